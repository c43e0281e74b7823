"""Checks of what the funnel sent, for the funnel tests on the real broker: every record its
durable state ever decided (the outboxes on its changelog) is on its topic exactly once, and
each culprit's alerts follow the funnel's rules (no trigger repeated while open)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from argus.config import Settings
from argus.detectors.alert_id import alert_identity

_SEVERITIES = ("warning", "error", "critical")


def changelog_outboxes(settings: Settings, prefix: str) -> dict[str, set[str]]:
    """Ids of every outbox entry in every version of the funnel state on its changelog
    (``<app id>-funnel-windows-state-changelog``), by topic suffix."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        settings.kafka_config(**{"group.id": f"{prefix}-audit", "enable.partition.eof": True})
    )
    try:
        topics = [
            t
            for t in c.list_topics(timeout=10).topics
            if t.startswith(prefix) and t.endswith("funnel-windows-state-changelog")
        ]
        assert len(topics) == 1, topics
        md = c.list_topics(topics[0], timeout=10).topics[topics[0]]
        parts = []
        for p in md.partitions:
            low, high = c.get_watermark_offsets(TopicPartition(topics[0], p), timeout=10)
            if high > low:
                parts.append(TopicPartition(topics[0], p, low))
        out: dict[str, set[str]] = {}
        left = {tp.partition for tp in parts}
        c.assign(parts)
        while left:
            m = c.poll(10)
            assert m is not None, f"changelog read stalled, partitions {left} left"
            if m.error() is not None:
                left.discard(m.partition())  # end of partition
                continue
            value = m.value()
            if not value:
                continue  # tombstone
            st = json.loads(value)
            for e in st.get("outbox") or ():
                if "record" in e:
                    out.setdefault(e["topic"], set()).add(e["id"])
                else:  # a bare alert (older version)
                    out.setdefault("alerts", set()).add(alert_identity(e))
        return out
    finally:
        c.close()


@dataclass
class Audit:
    """What the funnel's outputs tell (see :func:`audit`)."""

    decided: dict[str, set[str]]
    repeated: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    rule_breaks: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.repeated or self.lost or self.rule_breaks)


def _signature(a: dict[str, Any]) -> tuple[frozenset[str], int]:
    return frozenset(a["levels"]), _SEVERITIES.index(a["severity"])


def audit(
    settings: Settings,
    prefix: str,
    alerts: Sequence[dict[str, Any]],
    anomalies: Sequence[dict[str, Any]],
) -> Audit:
    """Compare the records on the topics (in topic order) with the funnel's decisions.

    * **repeated**: an alert id, or a funnel verdict id, on its topic more than once;
    * **lost**: an id that some durable version of the funnel state held in its outbox and
      that never reached its topic;
    * **rule_breaks**: a trigger of a culprit whose alert is open that raises neither its
      levels nor its severity (the funnel re-triggers only on those), or a resolve of a
      culprit with no open alert.
    """
    decided = changelog_outboxes(settings, prefix)
    a_ids = Counter(alert_identity(a) for a in alerts)
    v_ids = Counter(a["id"] for a in anomalies if a["level"] == "funnel")
    res = Audit(decided)
    res.repeated = [i for i, n in (a_ids + v_ids).items() if n > 1]
    res.lost = sorted(
        (decided.get("alerts", set()) - set(a_ids)) | (decided.get("anomalies", set()) - set(v_ids))
    )
    open_: dict[str, tuple[frozenset[str], int]] = {}
    for a in alerts:
        key = a["dedup_key"]
        if a["action"] == "resolve":
            if open_.pop(key, None) is None:
                res.rule_breaks.append(f"resolve of {key} with no open alert")
            continue
        sig = _signature(a)
        old = open_.get(key)
        if old is not None and sig[0] <= old[0] and sig[1] <= old[1]:
            res.rule_breaks.append(f"trigger of open {key} repeated (p={a['persistence']})")
        open_[key] = (sig[0] | old[0], max(sig[1], old[1])) if old else sig
    return res
