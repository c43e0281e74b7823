"""Helpers shared by the agents: finding emission and bounded id sets."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from argus.detectors.findings import Finding, anomaly_key, to_anomaly
from argus.streams import metrics

__all__ = ["emit_findings", "remember"]

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
    ctx: Any, findings: Sequence[Finding], emitted: list[str], role: str
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
