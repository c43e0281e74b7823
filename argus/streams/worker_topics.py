"""The topics a stream worker creates itself: its re-key topics and its table changelogs.

Re-key topics (``<prefix>.internal.*``) only carry records from a router to the window agent
behind it, so they delete after ``streams.internal_retention_s``; changelogs are compacted
state and keep the broker's retention (compaction, not age, bounds them).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from argus.config import Settings
from argus.streams.pipeline_config import PipelineConfig

__all__ = [
    "CHANGELOG_CONFIG",
    "REKEY_SEGMENT_MS_MAX",
    "ensure_worker_topics",
    "rekey_config",
    "retention_mismatches",
    "worker_topics",
]

log = logging.getLogger("argus.streams")

#: Topic configs of a table changelog: compacted, no retention of ours.
CHANGELOG_CONFIG: Mapping[str, str] = {"cleanup.policy": "compact"}


#: Longest a re-key topic's active segment stays open, ms. Retention deletes whole closed
#: segments only, and Kafka closes one at 1 GiB or 7 days: a quiet partition would keep a
#: week of records whatever ``retention.ms`` says.
REKEY_SEGMENT_MS_MAX = 3_600_000


def rekey_config(pcfg: PipelineConfig) -> dict[str, str]:
    """Topic configs of a re-key topic: deleted after ``internal_retention_s`` (as ms), its
    segments rolled at least every hour (at most the retention), so that records leave within
    about the retention plus an hour."""
    retention_ms = round(pcfg.internal_retention_s * 1e3)
    return {
        "cleanup.policy": "delete",
        "retention.ms": str(retention_ms),
        "segment.ms": str(min(retention_ms, REKEY_SEGMENT_MS_MAX)),
    }


def worker_topics(ctx: Any) -> list[tuple[list[str], dict[str, str]]]:
    """``[(names, configs)]`` of the topics an app (:class:`argus.streams.app.Ctx`) owns:
    its re-key topics, then its table changelogs."""
    return [
        ([t.get_topic_name() for t in ctx.internal.values()], rekey_config(ctx.pcfg)),
        ([t.changelog_topic_name for t in ctx.durable.tables], dict(CHANGELOG_CONFIG)),
    ]


def retention_mismatches(
    settings: Settings, names: Iterable[str], want_ms: str, *, timeout_s: float = 30.0
) -> dict[str, str]:
    """``{topic: its retention.ms}`` of the topics in ``names`` whose ``retention.ms`` is not
    ``want_ms`` (created before the setting, or by hand); a topic whose configs cannot be
    read (ACL, gone) is left out."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(settings.kafka_config())
    out: dict[str, str] = {}
    res = [ConfigResource("topic", n) for n in names]
    if not res:
        return out
    for r, fut in admin.describe_configs(res, request_timeout=timeout_s).items():
        try:
            got = fut.result(timeout=timeout_s)["retention.ms"].value
        except Exception:  # not allowed to describe, or deleted meanwhile: nothing to say
            continue
        if got != want_ms:
            out[r.name] = str(got)
    return out


def ensure_worker_topics(settings: Settings, ctx: Any) -> dict[str, str]:
    """Create the app's re-key topics and changelogs that do not exist yet, with their
    configs (before faust starts, :func:`argus.kafka.admin.ensure_topics`); warn about
    existing re-key topics with another retention. Returns ``{topic: "created" | "exists"}``."""
    from argus.kafka.admin import ensure_topics

    result: dict[str, str] = {}
    topics = worker_topics(ctx)
    for names, config in topics:
        result.update(
            ensure_topics(
                settings,
                names,
                partitions=ctx.pcfg.internal_partitions,
                replication=ctx.pcfg.replication,
                config=config,
            )
        )
    rekey, rekey_cfg = topics[0]
    want = rekey_cfg["retention.ms"]
    old = [n for n in rekey if result.get(n) == "exists"]
    for name, got in retention_mismatches(settings, old, want).items():
        log.warning(
            "re-key topic %s keeps retention.ms=%s, not streams.internal_retention_s (%s ms): "
            "it was created before; kafka-configs.sh --alter --entity-type topics "
            "--entity-name %s --add-config retention.ms=%s",
            name,
            got,
            want,
            name,
            want,
        )
    return result
