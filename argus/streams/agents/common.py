"""Helpers shared by the agents: group membership, finding emission, bounded id sets."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

from argus.detectors.findings import Finding, anomaly_key, to_anomaly
from argus.detectors.routing import DIMS, rank_of
from argus.streams import metrics

__all__ = ["emit_findings", "group_members", "remember"]

_MAX_IDS = 512


def group_members(coords: Mapping[str, Any], varies: Sequence[str]) -> list[int]:
    """Global ranks of the group varying ``varies`` that holds the rank at ``coords``."""
    ranges = [
        range(int(coords.get(f"{d}_size", 1))) if d in varies else [int(coords.get(f"{d}_rank", 0))]
        for d in DIMS
    ]
    out = []
    for combo in itertools.product(*ranges):
        c = dict(coords)
        for d, v in zip(DIMS, combo, strict=True):
            c[f"{d}_rank"] = v
        out.append(rank_of(c))
    return sorted(out)


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
) -> int:
    """Send findings not emitted before as ``anomaly`` records; returns how many were sent."""
    n = 0
    for f in findings:
        rec = to_anomaly(f, detected_ns=time.time_ns())
        if not remember(emitted, rec["id"]):
            continue
        await ctx.emit("anomalies", anomaly_key(f), "anomaly", rec, role)
        metrics.ANOMALIES.labels(f.level, f.kind).inc()
        n += 1
    return n
