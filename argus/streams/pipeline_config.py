"""Settings of the stream workers (``[streams]`` section), frozen and validated at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from argus.config import ConfigError

__all__ = ["PipelineConfig"]


@dataclass(frozen=True, kw_only=True)
class PipelineConfig:
    """Stream worker knobs.

    Attributes
    ----------
    step_grace_s : float
        Processing time a step window waits for missing ranks before it closes anyway (s).
        10 s: longer than a normal step's spread of arrival, short against the 5 s latency
        bar only when a rank is missing (which is then itself reported).
    l2_window_steps : int
        Closed steps per L2 evaluation (sliding). 4: medians over 4 steps tame jitter while
        a straggler still shows within one step of onset.
    l3_grace_s : float
        Processing time an L3 window waits for the last rank's summary (s).
    l3_windows : int
        Kernel windows merged per L3 evaluation (tumbling). 4: enough events per rank for a
        stable distribution, and the L3 latency stays within one minute at 15 steps/min.
    funnel_window_s : float
        Processing-time length of one funnel window (s); persistence counts these.
    internal_partitions : int
        Partitions of the re-key topics and tables (scale-out unit of L1/L2/L3/funnel).
    fidelity_every : int
        One in this many kernel windows is kept raw for the live fidelity check.
    stack_window_s : float
        Length of a stack-summary window (s).
    metrics_port : int
        Prometheus port on 127.0.0.1; 0 disables.
    replication : int
        Replication factor of internal and changelog topics.
    """

    step_grace_s: float = 10.0
    l2_window_steps: int = 4
    l3_grace_s: float = 20.0
    l3_windows: int = 4
    funnel_window_s: float = 5.0
    internal_partitions: int = 4
    fidelity_every: int = 16
    stack_window_s: float = 10.0
    metrics_port: int = 0
    replication: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "metrics_port":
                if not 0 <= v < 65536:
                    raise ConfigError(f"streams.metrics_port must be 0..65535, got {v}")
            elif v <= 0:
                raise ConfigError(f"streams.{f.name} must be > 0, got {v}")

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any] | None) -> PipelineConfig:
        """Build from a ``[streams]`` mapping (strings from the environment are converted)."""
        m = dict(m or {})
        known = {f.name: f for f in fields(cls)}
        unknown = set(m) - set(known)
        if unknown:
            raise ConfigError(
                f"[streams]: unknown key(s) {sorted(unknown)}; known: {sorted(known)}"
            )
        kw: dict[str, Any] = {}
        for k, v in m.items():
            typ = int if known[k].type in ("int", int) else float
            try:
                kw[k] = typ(v)
            except (TypeError, ValueError):
                raise ConfigError(f"streams.{k} must be a number, got {v!r}") from None
        return cls(**kw)
