"""A funnel verdict and what it renders to: the ``anomaly`` record (level ``funnel``), the
``alert`` record (``alert.avsc``), its one-line summary and its details."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from argus.detectors.findings import Finding
from argus.detectors.funnel.join import Culprit, _waiting

__all__ = ["MAX_IDS", "Verdict", "severity", "summary"]

MAX_IDS = 32
"""Most anomaly ids an alert carries."""


@dataclass(frozen=True)
class Verdict:
    """A culprit in one window with its persistence and confidence."""

    culprit: Culprit
    persistence: int
    confidence: float
    first_seen_ns: int

    @property
    def dedup_key(self) -> str:
        return self.culprit.dedup_key

    def to_anomaly(self, *, detected_ns: int | None = None) -> dict[str, Any]:
        """The ``anomaly`` record (level ``funnel``) of this verdict; deterministic id."""
        from argus.detectors.findings import to_anomaly

        c = self.culprit
        p = c.primary
        f = Finding(
            job=c.job,
            level="funnel",
            kind=p.kind,
            group_kind=c.group_kind,
            group_id=c.group_id,
            ranks=c.ranks,
            phase=c.phase,
            kernel=c.kernels[0] if c.kernels else None,
            stream=p.stream,
            window_start_step=c.window_start_step,
            window_end_step=c.window_end_step,
            window_start_ns=c.window_start_ns,
            window_end_ns=c.window_end_ns,
            score=p.score,
            threshold=p.threshold,
            baseline=p.baseline,
            observed=p.observed,
            unit=p.unit,
            evidence=_details(self),
        )
        return to_anomaly(
            f,
            detected_ns=c.window_end_ns if detected_ns is None else detected_ns,
            persistence=self.persistence,
            confidence=self.confidence,
        )

    def to_alert(self, action: str = "trigger") -> dict[str, Any]:
        """The ``alert`` record (``alert.avsc``) of this verdict."""
        c = self.culprit
        return {
            "dedup_key": c.dedup_key,
            "action": action,
            "severity": severity(self),
            "summary": summary(self),
            "job": c.job,
            "group_kind": c.group_kind,
            "group_id": c.group_id,
            "ranks": list(c.ranks),
            "phase": c.phase,
            "kernels": list(c.kernels),
            "levels": list(c.levels),
            "first_seen_ns": int(self.first_seen_ns),
            "last_seen_ns": int(c.window_end_ns),
            "persistence": int(self.persistence),
            "confidence": float(self.confidence),
            "anomaly_ids": [f.id for f in c.findings][:MAX_IDS],
            "details": _details(self),
        }


def severity(v: Verdict) -> str:
    if v.confidence >= 0.9 and len(v.culprit.levels) >= 2:
        return "critical"
    if v.confidence >= 0.7:
        return "error"
    return "warning"


def summary(v: Verdict) -> str:
    """One line a human reads first."""
    c = v.culprit
    p = c.primary
    who = (
        f"rank(s) {_ranges(c.ranks)}"
        if c.ranks
        else ("the whole job" if c.group_kind == "job" else f"{c.group_kind} group {c.group_id}")
    )
    what = {
        "straggler": f"straggler in {c.phase}"
        if p.evidence.get("role") != "late_arrival" or c.phase != p.phase
        else f"late into {c.phase} (peers waited)",
        "kernel_divergence": f"kernel {c.kernels[0] if c.kernels else p.kernel} diverged",
        "group_divergence": f"collective/kernel {p.kernel} slow for the whole group",
        "regression": f"iteration time regressed {p.baseline:.1f} -> {p.observed:.1f} ms",
        "jitter": f"iteration-time spikes {p.observed:.1f} ms vs {p.baseline:.1f} ms",
    }.get(p.kind, p.kind)
    return (
        f"[{'+'.join(c.levels)}] {c.job}: {who}: {what}; steps {c.window_start_step}-"
        f"{c.window_end_step}; persistence {v.persistence}, confidence {v.confidence:.2f}"
    )


def _ranges(ranks: Sequence[int]) -> str:
    out: list[str] = []
    rs = sorted(ranks)
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    s = ",".join(out[:16])
    return s + (f",... ({len(rs)} ranks)" if len(out) > 16 else "")


def _details(v: Verdict) -> dict[str, str]:
    c = v.culprit
    d: dict[str, str] = {
        "kind": c.kind,
        "levels": ",".join(c.levels),
        "findings": json.dumps(
            [
                {
                    "level": f.level,
                    "kind": f.kind,
                    "group": f"{f.group_kind}/{f.group_id}",
                    "phase": f.phase,
                    "kernel": f.kernel,
                    "ranks": list(f.ranks[:32]),
                    "score": round(f.score, 4),
                    "threshold": round(f.threshold, 4),
                    "baseline": round(f.baseline, 4),
                    "observed": round(f.observed, 4),
                    "unit": f.unit,
                    "role": f.evidence.get("role"),
                }
                for f in c.findings[:16]
            ]
        ),
    }
    named = {r for f in c.findings for r in json.loads(f.evidence.get("victims", "[]"))}
    waited = {r for f in c.findings if _waiting(f) for r in f.ranks}  # late into collectives
    victims = sorted((named | waited) - set(c.ranks))
    if victims:
        d["victims"] = json.dumps(victims[:64])
    return d
