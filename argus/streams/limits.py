"""Input limits of the stream workers: the bounds a record must keep (:class:`Limits`).

The one definition of the ``max_*`` keys of ``[streams]``: :class:`~argus.streams.pipeline_config.
PipelineConfig` inherits them (so ``ARGUS_STREAMS__MAX_SKEW_S`` and the file set them, and
its ranges check them), and :mod:`argus.streams.validate` judges each record against them (a
record outside goes to the DLQ with the reason, docs/reliability.md). No import beyond the
standard library, so reading the settings stays light.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["Limits"]


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Bounds of acceptable input; the ``[streams]`` settings of the same names.

    Attributes
    ----------
    max_batch_events : int
        Kernel events per ``kernel_batch``. 2,000,000: 10x the collectors' own cap
        (``kernels_max_events`` 200,000); a 1 M-event batch compresses in ~0.3 s and
        ~200 MB, so it is processed, not rejected.
    max_phases : int
        Phases per ``step_record`` (collectors aggregate phases by name: tens).
    max_stacks : int
        Distinct stacks per ``stack_batch``.
    max_routed_bytes : int
        Largest record a router copies onto an internal topic (summaries, stacks, steps,
        anomalies), bytes; below the producer's 1 MB request limit.
    max_world_size : int
        Largest world size (product of the coords sizes) or stack rank accepted.
    max_duration_s : float
        Longest phase, kernel or summary quantile (s); a longer one is a clock or unit error.
    max_step_s : float
        Longest iteration (``end_ns - start_ns``) or window (s).
    max_future_s : float
        Event time allowed ahead of the receiving wall clock (s).
    max_skew_s : float
        How far a record's event time may drift from its broker timestamp, against its
        rank's last accepted record, beyond what the steps between them allow (s;
        :mod:`argus.streams.validate`); 0 disables. Never judged against the wall clock, so
        recorded runs (simulator, replay, backfill) pass. 3,600: a live rank stays within
        the collectors' buffering (librdkafka gives up on a record after 30 s), a fast
        replay drifts by the event time of the steps it advanced (allowed on top); a
        replayed pause longer than an hour (a preempted job's time in the queue) costs each
        rank two records in the DLQ before its new offset is taken.
    max_step_jump : int
        Steps (window ids) a record may be ahead of its rank's and its job's last accepted
        records beyond what the event time between them allows at 1,000 steps/s; 0 disables.
        1,000: a rank's step records advance 1 step each, its kernel windows one period (50
        steps, 51,200 backed off) with the event time those steps took, and a rank behind its
        job catches up against the job; no real job does 1,000 steps in no time. It also
        bounds what one accepted corrupt step can do: L1 sees a gap of 1,000 steps, the
        funnel walks 100 windows (1,000,000 let a +900,000 step through, and L1 emitted a
        window that ended before it started).
    """

    max_batch_events: int = 2_000_000
    max_phases: int = 1024
    max_stacks: int = 10_000
    max_routed_bytes: int = 512 * 1024
    max_world_size: int = 1 << 20
    max_duration_s: float = 3600.0
    max_step_s: float = 86400.0
    max_future_s: float = 3600.0
    max_skew_s: float = 3600.0
    max_step_jump: int = 1000

    @classmethod
    def from_pipeline(cls, pcfg: Any) -> Limits:
        """The limits alone of a :class:`~argus.streams.pipeline_config.PipelineConfig` (an
        object without one of them keeps its default)."""
        return cls(**{f.name: getattr(pcfg, f.name) for f in fields(cls) if hasattr(pcfg, f.name)})
