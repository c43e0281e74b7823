"""Findings: what a detector reports, and its ``anomaly`` record (``anomaly.avsc``).

A :class:`Finding` is a frozen value; :func:`finding_id` hashes the fields that identify it
(job, level, kind, group, ranks, phase, kernel, stream, window), so replaying the same input
gives the same id, whatever the processing time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

__all__ = ["LEVELS", "Finding", "anomaly_key", "finding_id", "to_anomaly"]

LEVELS = ("L1", "L2", "L3", "funnel")
KINDS = (
    "jitter",
    "regression",
    "straggler",
    "kernel_divergence",
    "group_divergence",
    "missing_rank",
)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One detector finding.

    Attributes
    ----------
    job : str
    level : str
        ``L1`` | ``L2`` | ``L3`` | ``funnel``.
    kind : str
        ``jitter`` | ``regression`` | ``straggler`` | ``kernel_divergence`` |
        ``group_divergence`` | ``missing_rank``.
    group_kind, group_id : str
        The comparison group (``job``/``all`` for job-level findings).
    ranks : tuple of int
        Culprit ranks, sorted; empty means the whole group.
    phase, kernel : str or None
    stream : int or None
        CUDA stream id of the kernel.
    window_start_step, window_end_step : int
        Inclusive step range of the window; a window that ends before it starts (in steps or
        in ns) is a ``ValueError``, so no detector can emit one.
    window_start_ns, window_end_ns : int
        Event-time span of the window, ns since epoch.
    score, threshold : float
        The statistic and its threshold at detection.
    baseline, observed : float
        Reference and culprit values, in ``unit``.
    unit : str
    evidence : mapping of str to str
        Detector-specific details (JSON strings where structured).
    """

    job: str
    level: str
    kind: str
    group_kind: str
    group_id: str
    ranks: tuple[int, ...] = ()
    phase: str | None = None
    kernel: str | None = None
    stream: int | None = None
    window_start_step: int = 0
    window_end_step: int = 0
    window_start_ns: int = 0
    window_end_ns: int = 0
    score: float = 0.0
    threshold: float = 0.0
    baseline: float = 0.0
    observed: float = 0.0
    unit: str = ""
    evidence: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {self.level!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if (
            self.window_end_step < self.window_start_step
            or self.window_end_ns < self.window_start_ns
        ):
            raise ValueError(
                f"{self.level} {self.kind} window ends before it starts: steps "
                f"[{self.window_start_step}, {self.window_end_step}], ns "
                f"[{self.window_start_ns}, {self.window_end_ns}]"
            )
        object.__setattr__(self, "ranks", tuple(sorted(int(r) for r in self.ranks)))
        object.__setattr__(
            self, "evidence", MappingProxyType({str(k): str(v) for k, v in self.evidence.items()})
        )

    @property
    def id(self) -> str:
        return finding_id(self)

    @property
    def margin(self) -> float:
        """``score / threshold`` (how far past its threshold), 1.0 when the threshold is 0."""
        if self.threshold == 0:
            return 1.0
        return float(abs(self.score) / abs(self.threshold))

    def with_window(self, start_step: int, end_step: int, start_ns: int, end_ns: int) -> Finding:
        return replace(
            self,
            window_start_step=start_step,
            window_end_step=end_step,
            window_start_ns=start_ns,
            window_end_ns=end_ns,
        )


def finding_id(f: Finding) -> str:
    """Deterministic id: BLAKE2b-128 hex of the identifying fields.

    Examples
    --------
    >>> a = Finding(job="j", level="L2", kind="straggler", group_kind="dp", group_id="pp0",
    ...             ranks=(3, 1), phase="mlp", window_start_step=10, window_end_step=19)
    >>> b = Finding(job="j", level="L2", kind="straggler", group_kind="dp", group_id="pp0",
    ...             ranks=(1, 3), phase="mlp", window_start_step=10, window_end_step=19, score=9.0)
    >>> finding_id(a) == finding_id(b)
    True
    >>> len(finding_id(a))
    32
    """
    key = [
        f.job,
        f.level,
        f.kind,
        f.group_kind,
        f.group_id,
        list(f.ranks),
        f.phase,
        f.kernel,
        f.stream,
        f.window_start_step,
        f.window_end_step,
    ]
    blob = json.dumps(key, separators=(",", ":"), ensure_ascii=True).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def anomaly_key(f: Finding) -> str:
    """Kafka key of the finding's anomaly record: ``job/group_kind/group_id``."""
    return f"{f.job}/{f.group_kind}/{f.group_id}"


def to_anomaly(
    f: Finding,
    *,
    detected_ns: int,
    persistence: int = 1,
    confidence: float = 0.0,
) -> dict[str, Any]:
    """The ``anomaly`` record (``anomaly.avsc``) of a finding.

    Parameters
    ----------
    detected_ns : int
        Processing time of detection, ns since epoch. Pass the window end (event time) for a
        fully deterministic record (offline diagnosis, replay).
    persistence : int
        Consecutive windows the culprit repeated (from the funnel).
    confidence : float
        0..1 (from the funnel).
    """
    return {
        "id": finding_id(f),
        "job": f.job,
        "level": f.level,
        "kind": f.kind,
        "group_kind": f.group_kind,
        "group_id": f.group_id,
        "ranks": list(f.ranks),
        "phase": f.phase,
        "kernel": f.kernel,
        "stream": f.stream,
        "window_start_step": int(f.window_start_step),
        "window_end_step": int(f.window_end_step),
        "window_start_ns": int(f.window_start_ns),
        "window_end_ns": int(f.window_end_ns),
        "score": float(f.score),
        "threshold": float(f.threshold),
        "baseline": float(f.baseline),
        "observed": float(f.observed),
        "unit": f.unit,
        "persistence": int(persistence),
        "confidence": float(confidence),
        "detected_ns": int(detected_ns),
        "evidence": dict(f.evidence),
    }
