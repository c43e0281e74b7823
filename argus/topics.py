"""The topic table: names, partitions, retention and compaction of every argus topic.

This table is the single source of truth; ``argus topics create``, the docker-compose
topic service and the Strimzi ``KafkaTopic`` resources in ``k8s/`` all follow it (a test
checks k8s against it).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "MAX_MESSAGE_BYTES",
    "TOPICS",
    "TOPIC_MAX_MESSAGE_BYTES",
    "TopicSpec",
    "most_alike",
    "topic_name",
    "topic_specs",
]

#: The one size limit (bytes) of an argus record, key + value: the collectors' producer
#: ``message.max.bytes`` and the size a kernel window is split to (``argus.schemas.kernel_parts``;
#: docs/collectors.md). Kafka's and librdkafka's default, so a broker left at its defaults takes it.
MAX_MESSAGE_BYTES = 1_000_000
#: Every topic's ``max.message.bytes`` (a compressed record batch): the record plus Kafka's
#: batch overhead, Kafka's default 1,048,588. Brokers' ``message.max.bytes`` must be at least
#: this (the compose file and k8s set 8 MiB; ``argus kafka up`` keeps the default).
TOPIC_MAX_MESSAGE_BYTES = MAX_MESSAGE_BYTES + 48_588

_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS


@dataclass(frozen=True)
class TopicSpec:
    """One topic. ``suffix`` is appended to the prefix (``argus`` + ``.raw.steps``)."""

    suffix: str
    record: str  # schema short name of its values
    partitions: int
    retention_ms: int  # -1: forever
    compact: bool = False
    doc: str = ""

    def config(self) -> dict[str, str]:
        """Kafka topic configs."""
        cfg = {
            "retention.ms": str(self.retention_ms),
            "max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES),
        }
        if self.compact:
            cfg["cleanup.policy"] = "compact"
        return cfg


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(
        "raw.steps", "step_record", 8, 7 * _DAY_MS, doc="one record per rank per step; key job/rank"
    ),
    TopicSpec(
        "raw.kernels",
        "kernel_batch",
        8,
        6 * _HOUR_MS,
        doc="columnar kernel events per rank per window; high volume, short retention",
    ),
    TopicSpec(
        "raw.stacks",
        "stack_batch",
        4,
        2 * _DAY_MS,
        doc="py-spy collapsed stacks per process per window",
    ),
    TopicSpec(
        "summary.kernels",
        "kernel_summary",
        8,
        30 * _DAY_MS,
        doc="KDE cluster summaries per rank per window; input of L3 and replay",
    ),
    TopicSpec(
        "summary.stacks",
        "stack_summary",
        4,
        30 * _DAY_MS,
        doc="aggregated stacks per rank per window; L5 drill-down",
    ),
    TopicSpec(
        "anomalies",
        "anomaly",
        4,
        90 * _DAY_MS,
        doc="detector findings; key job/group_kind/group_id",
    ),
    TopicSpec(
        "alerts", "alert", 1, 90 * _DAY_MS, doc="funnel verdicts, trigger/resolve; key = dedup key"
    ),
    TopicSpec(
        "control",
        "control_command",
        1,
        -1,
        compact=True,
        doc="runtime commands to collectors; key job/target/channel",
    ),
    TopicSpec("jobs", "job_topology", 1, -1, compact=True, doc="job layouts; key job or job/rank"),
    TopicSpec(
        "dlq",
        "dlq_record",
        1,
        30 * _DAY_MS,
        doc="records a worker could not process, with the reason and original bytes",
    ),
)


def topic_name(suffix: str, prefix: str = "argus") -> str:
    """Full topic name, e.g. ``topic_name("raw.steps") == "argus.raw.steps"``."""
    return f"{prefix}.{suffix}" if prefix else suffix


def topic_specs(prefix: str = "argus") -> dict[str, TopicSpec]:
    """``{full topic name: spec}`` for a prefix."""
    return {topic_name(t.suffix, prefix): t for t in TOPICS}


def most_alike(name: str, names: Iterable[str]) -> list[str]:
    """``names`` without ``name``, the most alike ``name`` first (``difflib`` ratio, then
    alphabetical): a "did you mean" hint that shows the likely topic however many others
    (other jobs', other tests') the cluster holds."""
    return sorted(
        (n for n in set(names) if n != name),
        key=lambda n: (-difflib.SequenceMatcher(None, name, n).ratio(), n),
    )
