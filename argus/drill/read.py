"""Kafka side of the drill-down helpers: read whole topics (or their tails), resolve
``--around``, explain an empty read, and list consumer groups' lag for ``argus status``.

The decisions live in the pure modules :mod:`argus.drill.window` and
:mod:`argus.drill.status`; this module only fetches records and offsets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from argus.drill.window import DrillWindow, Extent, explain_empty, window_around
from argus.errors import ArgusError
from argus.kafka.read import consume_ranges, partitions, scratch_consumer

__all__ = [
    "DrillReadError",
    "explain",
    "find_around",
    "group_lags",
    "group_members",
    "read_topic",
    "topic_exists",
]


class DrillReadError(ArgusError):
    """The broker did not answer, or a read timed out."""


def topic_exists(settings: Any, topic: str) -> bool:
    """Whether ``topic`` exists with partitions.

    Raises
    ------
    DrillReadError
        The broker did not answer within 10 s.
    """
    from confluent_kafka import KafkaException

    with scratch_consumer(settings, "drill") as cons:
        try:
            return bool(partitions(cons, topic))
        except KafkaException as exc:
            raise DrillReadError(f"{topic}: broker did not answer ({exc})") from exc


def topics_with_suffix(settings: Any, suffix: str) -> list[str]:
    """Every topic named ``<prefix>.<suffix>`` on the cluster (any prefix)."""
    with scratch_consumer(settings, "drill") as cons:
        md = cons.list_topics(timeout=10)
    return sorted(t for t in md.topics if t.endswith("." + suffix) or t == suffix)


def read_topic(
    settings: Any,
    topic: str,
    *,
    key_prefix: str | None = None,
    tail: int | None = None,
    timeout_s: float = 30.0,
) -> Iterator[tuple[str, dict[str, Any], int | None]]:
    """``(key, record, Kafka timestamp ms)`` of ``topic`` up to its high watermarks (as of
    the call), partition by partition in offset order; ``tail``: only the last ``tail``
    offsets of each partition. Records whose key lacks ``key_prefix`` are not decoded;
    undecodable records are skipped.

    Raises
    ------
    DrillReadError
        Topic missing, or not read within ``timeout_s``.
    """
    from confluent_kafka import TopicPartition

    from argus.schemas.codec import Codec

    codec = Codec(registry_url=getattr(settings, "schema_registry_url", "") or None)
    kp = key_prefix.encode() if key_prefix is not None else None
    with scratch_consumer(settings, "drill") as cons:
        parts = partitions(cons, topic)
        if not parts:
            raise DrillReadError(f"topic {topic} does not exist")
        ranges: dict[int, tuple[int, int]] = {}
        for p in parts:
            lo, hi = cons.get_watermark_offsets(TopicPartition(topic, p), 10)
            ranges[p] = (lo if tail is None else max(lo, hi - tail), hi)

        def timed_out(_left: object) -> DrillReadError:
            return DrillReadError(f"{topic}: read timed out after {timeout_s:.0f} s")

        for m in consume_ranges(cons, topic, ranges, timeout_s=timeout_s, timed_out=timed_out):
            key = m.key() or b""
            if kp is not None and not key.startswith(kp):
                continue
            try:
                _name, rec = codec.decode(m.value())
            except ArgusError:
                continue
            _kind, ts = m.timestamp()
            yield key.decode(errors="replace"), rec, (ts if ts and ts > 0 else None)


def find_around(
    settings: Any, ref: str, *, prefix: str | None = None, pad_ns: int = 30 * 10**9
) -> DrillWindow:
    """Resolve ``--around REF`` from ``argus.alerts`` (dedup keys) and, failing that,
    ``argus.anomalies`` (finding and verdict ids).

    Raises
    ------
    WindowError
        No such key or id.
    DrillReadError
        A read failed.
    """
    from argus.drill.window import WindowError
    from argus.topics import topic_name

    pfx = settings.topic_prefix if prefix is None else prefix
    alerts: list[dict[str, Any]] = []
    t_alerts = topic_name("alerts", pfx)
    if topic_exists(settings, t_alerts):
        alerts = [r for _k, r, _t in read_topic(settings, t_alerts)]
    try:
        return window_around(ref, alerts, (), pad_ns=pad_ns)
    except WindowError:
        pass
    anomalies: list[dict[str, Any]] = []
    t_an = topic_name("anomalies", pfx)
    if topic_exists(settings, t_an):
        anomalies = [r for _k, r, _t in read_topic(settings, t_an, timeout_s=120)]
    return window_around(ref, alerts, anomalies, pad_ns=pad_ns)


def explain(
    settings: Any,
    topic: str,
    job: str,
    start_ns: int,
    end_ns: int,
    *,
    lag_ns: int | None = None,
    ranks: Sequence[int] | None = None,
) -> str:
    """The sentence for an empty read of ``job`` on ``topic`` (see
    :func:`argus.drill.window.explain_empty`); scans the topic (30 s at most)."""
    from argus.topics import TOPICS, most_alike

    suffix = next((t.suffix for t in TOPICS if topic.endswith(f".{t.suffix}")), topic)
    others = most_alike(topic, topics_with_suffix(settings, suffix))  # likeliest first
    if not topic_exists(settings, topic):
        return explain_empty(
            topic=topic, job=job, start_ns=start_ns, end_ns=end_ns, exists=False,
            extent=None, prefix_topics=others,
        )  # fmt: skip
    ext = Extent()
    jobs: set[str] = set()
    try:
        for key, rec, ts in read_topic(settings, topic):
            if rec.get("job") == job:
                ext.add(rec, ts, (start_ns, end_ns))
            else:
                jobs.add(key.split("/", 1)[0])
    except DrillReadError as exc:  # a topic too large to scan: say what was seen
        cut = f" [partial: {exc}]"
    else:
        cut = ""
    with_job = []
    if not ext.records:
        for t in others[:5]:  # the job under another prefix? (bounded: 5 topics, 10 s each)
            try:
                if any(True for _ in read_topic(settings, t, key_prefix=f"{job}/", timeout_s=10)):
                    with_job.append(t)
            except DrillReadError:
                continue
    return explain_empty(
        topic=topic, job=job, start_ns=start_ns, end_ns=end_ns, exists=True, extent=ext,
        other_jobs=sorted(jobs), lag_ns=lag_ns, ranks=ranks, prefix_topics=with_job,
    ) + cut  # fmt: skip


def group_members(
    steps: Sequence[dict[str, Any]], group_kind: str, group_id: str, routing: Any = None
) -> list[int]:
    """Ranks of comparison group ``group_kind``/``group_id`` among step records' coords."""
    from argus.routing import Routing

    r = routing or Routing.default()
    out: set[int] = set()
    for rec in steps:
        try:
            if r.group_for_kind(rec["coords"], group_kind) == group_id:
                out.add(int(rec["rank"]))
        except (ArgusError, KeyError, ValueError):
            continue
    return sorted(out)


def group_lags(settings: Any, prefix: str) -> list[dict[str, Any]]:
    """Every consumer group named ``<prefix>-...`` (the workers' faust apps) or
    ``<prefix>.pagerduty`` (the sink): its
    state, members, and per topic the records behind the high watermark and the age (s) of
    the oldest unconsumed record (Kafka timestamp of the record at the committed offset).

    A group whose live members hold partitions leaves out the topics none of them reads:
    committed offsets the group left behind (the compressor moved to its own group,
    ``<prefix>-compressor``, docs/pipeline.md), which Kafka keeps until they expire.

    Returns a list of ``{"group", "state", "members", "topics": {topic: {"lag": n,
    "lag_s": s or None, "committed": n, "end": n}}}``.

    Raises
    ------
    DrillReadError
        The broker did not answer.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings.kafka_config(log_level=3))  # no "purging events" notice
    try:
        listed = admin.list_consumer_groups(request_timeout=10).result()
    except KafkaException as exc:
        raise DrillReadError(f"list consumer groups: {exc}") from exc
    ids = sorted(
        g.group_id
        for g in listed.valid
        if g.group_id.startswith(f"{prefix}-") or g.group_id == f"{prefix}.pagerduty"
    )
    if not ids:
        return []
    described = admin.describe_consumer_groups(ids, request_timeout=10)
    out: list[dict[str, Any]] = []
    with scratch_consumer(settings, "drill") as cons:
        for gid in ids:
            reading: set[str] = set()  # topics the members hold partitions of now
            try:
                d = described[gid].result()
                state = str(getattr(d.state, "name", d.state)).lower()
                members = len(d.members)
                for m in d.members:
                    reading.update(tp.topic for tp in m.assignment.topic_partitions or ())
            except KafkaException:
                state, members = "unknown", 0
            try:
                res = admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(gid)], request_timeout=10
                )[gid].result()
                parts = res.topic_partitions or []
            except KafkaException:
                parts = []
            topics: dict[str, dict[str, Any]] = {}
            for tp in parts:
                if tp.offset < 0 or not tp.topic.startswith(f"{prefix}."):
                    continue
                if reading and tp.topic not in reading:
                    continue  # the live members no longer read it: offsets left to expire
                lo, hi = cons.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), 10)
                lag = max(0, hi - max(tp.offset, lo))
                age = None
                if lag:
                    age = _age_s(cons, tp.topic, tp.partition, max(tp.offset, lo))
                t = topics.setdefault(tp.topic, {"lag": 0, "lag_s": None, "committed": 0, "end": 0})
                t["lag"] += lag
                t["committed"] += tp.offset
                t["end"] += hi
                if age is not None:
                    t["lag_s"] = max(t["lag_s"] or 0.0, age)
            out.append({"group": gid, "state": state, "members": members, "topics": topics})
    return out


def _age_s(cons: Any, topic: str, partition: int, offset: int) -> float | None:
    """Seconds since the Kafka timestamp of the record at ``offset`` (None: not fetched)."""
    from confluent_kafka import TopicPartition

    cons.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        m = cons.poll(0.5)
        if m is None or m.error() is not None:
            continue
        _k, ts = m.timestamp()
        return max(0.0, time.time() - ts / 1000) if ts and ts > 0 else None
    return None
