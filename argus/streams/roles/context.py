"""What a role needs of its driver, and what the roles share.

A role (:mod:`argus.streams.roles`) is driven by the faust agents (:mod:`argus.streams.app`
gives them a :class:`~argus.streams.app.Ctx`) or by the in-memory driver
(:mod:`argus.streams.memory`); both satisfy :class:`RoleContext`. A role never imports
faust or Kafka: it reads its settings, keeps its state in the tables it is given, and hands
what it produces to ``send_keyed`` (to another role) and ``emit`` (to an external topic).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import MutableMapping, Sequence
from typing import Any, Protocol

from argus.detectors.config import DetectorsConfig
from argus.detectors.findings import Finding, anomaly_key, to_anomaly
from argus.schemas import Codec
from argus.streams import metrics
from argus.streams.pipeline_config import PipelineConfig

__all__ = ["RoleContext", "emit_findings", "partition_of", "remember"]


def partition_of(key: str, partitions: int) -> int:
    """Partition of a re-keyed record (stable across processes: CRC-32 of the key)."""
    return zlib.crc32(key.encode()) % partitions


class RoleContext(Protocol):
    """The driver's side of a role: settings, tables, and where outputs go."""

    pcfg: PipelineConfig
    detectors: DetectorsConfig
    codec: Codec

    def table(self, name: str) -> MutableMapping[str, Any]:
        """A key-value table that survives a restart (a faust table, or a dict)."""

    def internal_topic(self, name: str) -> Any:
        """A handle of the internal topic ``name`` (for :meth:`send_keyed`)."""

    async def send_keyed(self, topic: Any, key: str, value: Any) -> None:
        """Send ``value`` to another role, keyed (JSON-able)."""

    async def emit(
        self, suffix: str, key: str, record_name: str, value: dict[str, Any], role: str
    ) -> None:
        """Send an Avro ``record_name`` record to the external topic ``suffix``."""

    async def late(self, role: str, reason: str) -> None:
        """A routed item came after its window closed without it: count it and send the
        message that carried it to the DLQ with ``reason`` (it changes no window)."""


_MAX_IDS = 512


def remember(ids: list[str], new: str) -> bool:
    """Add ``new`` to a bounded id list; False when it was already there (a replay)."""
    if new in ids:
        return False
    ids.append(new)
    if len(ids) > _MAX_IDS:
        del ids[: len(ids) - _MAX_IDS]
    return True


async def emit_findings(
    ctx: RoleContext, findings: Sequence[Finding], emitted: list[str], role: str
) -> list[dict[str, Any]]:
    """Send findings not emitted before as ``anomaly`` records; returns the records sent."""
    sent = []
    for f in findings:
        rec = to_anomaly(f, detected_ns=time.time_ns())
        if not remember(emitted, rec["id"]):
            continue
        await ctx.emit("anomalies", anomaly_key(f), "anomaly", rec, role)
        metrics.ANOMALIES.labels(f.level, f.kind).inc()
        sent.append(rec)
    return sent
