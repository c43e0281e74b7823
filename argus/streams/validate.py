"""Semantic checks of every record the stream agents consume (after Avro decoding).

The codec (:mod:`argus.schemas.codec`) rejects bytes that are not a record of the expected
schema; this module rejects records that decode but make no sense: a rank outside the job's
world, a negative, NaN or absurd duration, an empty or oversized batch, an event time far in
the future or far behind the job's newest record. Each check raises :class:`InputError` with a
short ``reason`` code; the agents send the record to ``argus.dlq`` with that code and the
original bytes (docs/reliability.md lists every code).

The validators are pure functions of a record and :class:`Limits`; the time checks need the
receiving wall clock and the newest event time and step accepted per job, which
:class:`Frontier` keeps (bounded, in memory: a restarted worker starts with an empty one, so it
can only be more lenient). :class:`Checker` bundles the three for an agent; ``checker(ctx)``
gives the one of a worker.

Event time is judged two ways, because recorded runs (the simulator's fixed 2026 epoch,
``argus replay`` sources, backfills) legitimately carry old event times:

* **future**: more than ``max_future_s`` ahead of the receiving wall clock (a rank clock or a
  unit gone wrong); a record this far ahead would hold event-time windows open for that long;
* **past**: more than ``max_past_s`` behind the newest event time already accepted for the
  same job and record kind, never against the wall clock; a job replayed from last month is
  fine, a record hours behind its own job is not. ``max_past_s = 0`` disables it.

Steps (and kernel window ids, anomaly windows) more than ``max_step_jump`` ahead of the job's
newest step are rejected too: downstream windows advance one window at a time up to the
newest step, so one corrupt step number of 10**15 would stall the funnel.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from argus.detectors.findings import KINDS, LEVELS
from argus.schemas.errors import ArgusError
from argus.streams.summary_record import _summary_columns, batch_columns

__all__ = [
    "REASONS",
    "Checker",
    "Frontier",
    "InputError",
    "Limits",
    "checker",
    "validate_anomaly",
    "validate_kernel_batch",
    "validate_kernel_summary",
    "validate_stack_batch",
    "validate_step",
    "world_size",
]

REASONS = (
    "empty",
    "too-large",
    "bad-field",
    "bad-coords",
    "rank-out-of-range",
    "bad-duration",
    "time-skew",
    "step-skew",
)
DIMS = ("dp", "tp", "pp", "ep", "cp")
_NS = 1_000_000_000


class InputError(ArgusError, ValueError):
    """A decoded record that is semantically invalid; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Bounds of acceptable input; the ``[streams]`` settings of the same names.

    Attributes
    ----------
    max_batch_events : int
        Kernel events per ``kernel_batch``. 2,000,000: 10x the collectors' own cap
        (``kernels_max_events`` 200,000), and a 1 M-event batch compresses in ~0.3 s, ~200 MB.
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
    max_past_s : float
        Event time allowed behind the newest one accepted for the job (s); 0 disables.
    max_step_jump : int
        Steps (window ids) allowed ahead of the newest one accepted for the job; 0 disables.
    """

    max_batch_events: int = 2_000_000
    max_phases: int = 1024
    max_stacks: int = 10_000
    max_routed_bytes: int = 512 * 1024
    max_world_size: int = 1 << 20
    max_duration_s: float = 3600.0
    max_step_s: float = 86400.0
    max_future_s: float = 3600.0
    max_past_s: float = 6 * 3600.0
    max_step_jump: int = 1_000_000

    @classmethod
    def from_pipeline(cls, pcfg: Any) -> Limits:
        """The limits of a :class:`~argus.streams.pipeline_config.PipelineConfig`."""
        return cls(**{f.name: getattr(pcfg, f.name) for f in fields(cls) if hasattr(pcfg, f.name)})


# -- helpers ---------------------------------------------------------------------------------
def _int(rec: Mapping[str, Any], key: str, what: str) -> int:
    v = rec.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InputError("bad-field", f"{what}.{key} must be an int, got {v!r}")
    return int(v)


def _job(rec: Mapping[str, Any], what: str) -> str:
    job = rec.get("job")
    if not isinstance(job, str) or not job or "/" in job:
        raise InputError("bad-field", f"{what}.job must be a non-empty string without '/'")
    return job


def world_size(coords: Any, limits: Limits) -> int:
    """World size of a record from its coords (product of the ``*_size`` fields).

    Raises :class:`InputError` ``bad-coords`` for a size < 1, a world over
    ``max_world_size`` or a ``*_rank`` outside ``[0, *_size)``.
    """
    if not isinstance(coords, Mapping):
        raise InputError("bad-coords", f"coords must be a record, got {type(coords).__name__}")
    world = 1
    for d in DIMS:
        size, rank = coords.get(f"{d}_size", 1), coords.get(f"{d}_rank", 0)
        if not isinstance(size, int) or not isinstance(rank, int):
            raise InputError("bad-coords", f"coords.{d}_size/{d}_rank must be ints")
        if size < 1:
            raise InputError("bad-coords", f"coords.{d}_size is {size}; must be >= 1")
        if not 0 <= rank < size:
            raise InputError("bad-coords", f"coords.{d}_rank {rank} outside [0, {size})")
        world *= size
        if world > limits.max_world_size:
            raise InputError(
                "bad-coords", f"world size over {limits.max_world_size} (coords {dict(coords)})"
            )
    return world


def _rank(rec: Mapping[str, Any], world: int, what: str) -> int:
    rank = _int(rec, "rank", what)
    if not 0 <= rank < world:
        raise InputError(
            "rank-out-of-range", f"{what} rank {rank} outside the job's world [0, {world})"
        )
    return rank


def _span(
    rec: Mapping[str, Any], a: str, b: str, limits: Limits, what: str, *, capped: bool = True
) -> tuple[int, int]:
    """``(rec[a], rec[b])``: event times ns, ``0 <= a <= b`` and (``capped``)
    ``b - a <= max_step_s``."""
    t0, t1 = _int(rec, a, what), _int(rec, b, what)
    if t0 < 0:
        raise InputError("time-skew", f"{what}.{a} {t0} is before the Unix epoch")
    if t1 < t0:
        raise InputError("bad-duration", f"{what}.{b} {t1} < {a} {t0}")
    if capped and t1 - t0 > limits.max_step_s * _NS:
        raise InputError(
            "bad-duration", f"{what} spans {(t1 - t0) / _NS:.0f} s > max_step_s {limits.max_step_s}"
        )
    return t0, t1


def _size(raw: bytes | None, limits: Limits, what: str) -> None:
    if raw is not None and len(raw) > limits.max_routed_bytes:
        raise InputError(
            "too-large",
            f"{what} of {len(raw)} bytes > max_routed_bytes {limits.max_routed_bytes}",
        )


# -- one validator per record the agents consume ---------------------------------------------
def validate_step(rec: Mapping[str, Any], limits: Limits, raw: bytes | None = None) -> None:
    """A ``step_record`` (L1/L2 input): rank in the world, a positive iteration no longer than
    ``max_step_s``, at most ``max_phases`` phases of ``0 <= duration <= max_duration_s``."""
    what = "step_record"
    _size(raw, limits, what)
    _job(rec, what)
    _rank(rec, world_size(rec.get("coords"), limits), what)
    if _int(rec, "step", what) < 0:
        raise InputError("bad-field", f"step_record.step {rec['step']} < 0")
    t0, t1 = _span(rec, "start_ns", "end_ns", limits, what)
    if t1 == t0:
        raise InputError("bad-duration", "step_record iteration time is 0 ns")
    phases = rec.get("phases")
    if not isinstance(phases, list):
        raise InputError("bad-field", "step_record.phases must be a list")
    if len(phases) > limits.max_phases:
        raise InputError("too-large", f"{len(phases)} phases > max_phases {limits.max_phases}")
    cap = limits.max_duration_s * _NS
    for p in phases:
        d = p.get("duration_ns") if isinstance(p, Mapping) else None
        if not isinstance(d, int) or not 0 <= d <= cap:
            name = p.get("name") if isinstance(p, Mapping) else p
            raise InputError(
                "bad-duration",
                f"phase {name!r} duration_ns {d!r}; must be in [0, {limits.max_duration_s} s]",
            )


def validate_kernel_batch(batch: Mapping[str, Any], limits: Limits) -> int:
    """A ``kernel_batch`` (compressor input); returns its number of events.

    Empty batches and batches over ``max_batch_events`` are rejected before any work on the
    columns; a kernel longer than ``max_duration_s`` rejects the batch (a clock or unit
    error taints the whole window). Zero and negative durations of single events are not
    errors: the compressor counts them in the summary's ``rejected``, unless every event is.
    """
    what = "kernel_batch"
    _job(batch, what)
    _rank(batch, world_size(batch.get("coords"), limits), what)
    if _int(batch, "window_id", what) < 0:
        raise InputError("bad-field", f"kernel_batch.window_id {batch['window_id']} < 0")
    _span(batch, "window_start_ns", "window_end_ns", limits, what)
    col = batch.get("duration_ns")
    n = len(col) // 8 if isinstance(col, bytes) else 0
    if n > limits.max_batch_events:
        raise InputError(
            "too-large", f"{n} kernel events > max_batch_events {limits.max_batch_events}"
        )
    if n == 0:
        raise InputError("empty", "kernel_batch has no kernel events")
    _names, _idx, _stream, dur = batch_columns(batch)  # BatchError on inconsistent columns
    hi = int(dur.max())
    if hi > limits.max_duration_s * _NS:
        raise InputError(
            "bad-duration",
            f"a kernel lasts {hi / _NS:.0f} s > max_duration_s {limits.max_duration_s}",
        )
    if hi <= 0:
        raise InputError("bad-duration", f"all {n} kernel durations are <= 0")
    return n


def validate_kernel_summary(
    rec: Mapping[str, Any], limits: Limits, raw: bytes | None = None
) -> None:
    """A ``kernel_summary`` (L3 input): rank in the world, consistent columns, quantile levels
    in [0, 1] and non-decreasing, quantiles finite in ``[0, max_duration_s]``, >= 1 group."""
    what = "kernel_summary"
    _size(raw, limits, what)
    _job(rec, what)
    _rank(rec, world_size(rec.get("coords"), limits), what)
    if _int(rec, "window_id", what) < 0:
        raise InputError("bad-field", f"kernel_summary.window_id {rec['window_id']} < 0")
    _span(rec, "window_start_ns", "window_end_ns", limits, what)
    for k in ("n_events", "rejected"):
        if _int(rec, k, what) < 0:
            raise InputError("bad-field", f"kernel_summary.{k} < 0")
    lv = np.asarray(rec.get("quantile_levels") or [], dtype=np.float64)
    if lv.size == 0 or not np.all((lv >= 0) & (lv <= 1)) or np.any(np.diff(lv) < 0):
        raise InputError(
            "bad-field", "kernel_summary.quantile_levels must be non-empty, in [0, 1], sorted"
        )
    gk, _gs, _gc, _cc, q, _lv = _summary_columns(rec)  # BatchError on inconsistent columns
    if gk.size == 0:
        raise InputError("empty", "kernel_summary has no kernel groups")
    if not np.all(np.isfinite(q)):
        raise InputError("bad-duration", "kernel_summary quantiles hold NaN or infinity")
    if q.size and (float(q.min()) < 0 or float(q.max()) > limits.max_duration_s * _NS):
        raise InputError(
            "bad-duration",
            f"kernel_summary quantiles span [{float(q.min()):.3g}, {float(q.max()):.3g}] ns; "
            f"must be in [0, {limits.max_duration_s} s]",
        )


def validate_stack_batch(rec: Mapping[str, Any], limits: Limits, raw: bytes | None = None) -> None:
    """A ``stack_batch`` (stacks input): rank in ``[0, max_world_size)``, a window, counts
    >= 0, a finite positive sample rate, at most ``max_stacks`` stacks of count > 0."""
    what = "stack_batch"
    _size(raw, limits, what)
    _job(rec, what)
    rank = _int(rec, "rank", what)
    if not 0 <= rank < limits.max_world_size:
        raise InputError("rank-out-of-range", f"stack_batch rank {rank} outside [0, world)")
    _span(rec, "window_start_ns", "window_end_ns", limits, what)
    for k in ("samples", "errors"):
        if _int(rec, k, what) < 0:
            raise InputError("bad-field", f"stack_batch.{k} < 0")
    hz = rec.get("sample_rate_hz")
    if not isinstance(hz, (int, float)) or not math.isfinite(hz) or hz <= 0:
        raise InputError("bad-field", f"stack_batch.sample_rate_hz {hz!r}; must be finite > 0")
    stacks = rec.get("stacks")
    if not isinstance(stacks, list):
        raise InputError("bad-field", "stack_batch.stacks must be a list")
    if len(stacks) > limits.max_stacks:
        raise InputError("too-large", f"{len(stacks)} stacks > max_stacks {limits.max_stacks}")
    for s in stacks:
        if not isinstance(s, Mapping) or not isinstance(s.get("count"), int) or s["count"] <= 0:
            raise InputError("bad-field", "every stack_batch stack needs a count > 0")


def validate_anomaly(rec: Mapping[str, Any], limits: Limits, raw: bytes | None = None) -> None:
    """An ``anomaly`` (funnel input): a known level and kind, a window of steps
    ``0 <= start <= end`` and of event times, a non-NaN score, ranks >= 0."""
    what = "anomaly"
    _size(raw, limits, what)
    _job(rec, what)
    if rec.get("level") not in LEVELS or rec.get("kind") not in KINDS:
        raise InputError(
            "bad-field", f"anomaly level/kind {rec.get('level')!r}/{rec.get('kind')!r} unknown"
        )
    if not isinstance(rec.get("id"), str) or not rec["id"]:
        raise InputError("bad-field", "anomaly.id must be a non-empty string")
    a, b = _int(rec, "window_start_step", what), _int(rec, "window_end_step", what)
    if not 0 <= a <= b:
        raise InputError("bad-field", f"anomaly steps [{a}, {b}]: need 0 <= start <= end")
    _span(rec, "window_start_ns", "window_end_ns", limits, what, capped=False)
    score = rec.get("score")
    if not isinstance(score, (int, float)) or math.isnan(score):
        raise InputError("bad-field", f"anomaly.score {score!r} is not a number")
    ranks = rec.get("ranks") or []
    if any(not isinstance(r, int) or not 0 <= r < limits.max_world_size for r in ranks):
        raise InputError("rank-out-of-range", "anomaly.ranks outside [0, max_world_size)")


# -- time and step skew -------------------------------------------------------------------------
class Frontier:
    """Newest event time (ns) and step accepted per ``(kind, job)``, for the skew checks.

    Bounded: the ``max_jobs`` least recently seen jobs are forgotten (a forgotten job's
    next record is judged against the wall clock only).
    """

    def __init__(self, max_jobs: int = 4096) -> None:
        self.max_jobs = max_jobs
        self._newest: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()

    def newest(self, kind: str, job: str) -> tuple[int, int] | None:
        """``(newest step, newest event time ns)`` accepted, or None."""
        return self._newest.get((kind, job))

    def check(self, kind: str, job: str, step: int, t_ns: int, limits: Limits, now_ns: int) -> None:
        """Raise ``time-skew`` / ``step-skew`` for a record of ``job`` at (``step``, ``t_ns``)."""
        ahead = t_ns - now_ns
        if ahead > limits.max_future_s * _NS:
            raise InputError(
                "time-skew",
                f"{kind} of {job} at event time {t_ns} is {ahead / _NS:.0f} s ahead of the wall "
                f"clock (max_future_s {limits.max_future_s})",
            )
        seen = self._newest.get((kind, job))
        if seen is None:
            return
        s0, t0 = seen
        if limits.max_past_s and t0 - t_ns > limits.max_past_s * _NS:
            raise InputError(
                "time-skew",
                f"{kind} of {job} at event time {t_ns} is {(t0 - t_ns) / _NS:.0f} s behind the "
                f"job's newest record (max_past_s {limits.max_past_s})",
            )
        if limits.max_step_jump and step - s0 > limits.max_step_jump:
            raise InputError(
                "step-skew",
                f"{kind} of {job} at step {step} is {step - s0} steps ahead of the job's newest "
                f"step {s0} (max_step_jump {limits.max_step_jump})",
            )

    def advance(self, kind: str, job: str, step: int, t_ns: int) -> None:
        """Record an accepted record of ``job``."""
        key = (kind, job)
        seen = self._newest.pop(key, None)
        self._newest[key] = (
            (step, t_ns) if seen is None else (max(seen[0], step), max(seen[1], t_ns))
        )
        while len(self._newest) > self.max_jobs:
            self._newest.popitem(last=False)


class Checker:
    """The validators of one worker: :class:`Limits`, a :class:`Frontier`, a wall clock.

    Each method validates one decoded record, then its event time and step, and advances the
    job's frontier when the record is accepted; it raises :class:`InputError` (or the
    :class:`~argus.streams.summary_record.BatchError` of inconsistent columns) otherwise.
    """

    def __init__(self, limits: Limits, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.limits = limits
        self.frontier = Frontier()
        self.clock_ns = clock_ns

    def _time(self, kind: str, job: str, step: int, t_ns: int) -> None:
        self.frontier.check(kind, job, step, t_ns, self.limits, self.clock_ns())
        self.frontier.advance(kind, job, step, t_ns)

    def step(self, rec: Mapping[str, Any], raw: bytes | None = None) -> None:
        validate_step(rec, self.limits, raw)
        self._time("step", rec["job"], int(rec["step"]), int(rec["end_ns"]))

    def kernel_batch(self, batch: Mapping[str, Any]) -> int:
        n = validate_kernel_batch(batch, self.limits)
        self._time("kernels", batch["job"], int(batch["window_id"]), int(batch["window_end_ns"]))
        return n

    def kernel_summary(self, rec: Mapping[str, Any], raw: bytes | None = None) -> None:
        validate_kernel_summary(rec, self.limits, raw)
        self._time("summary", rec["job"], int(rec["window_id"]), int(rec["window_end_ns"]))

    def stack_batch(self, rec: Mapping[str, Any], raw: bytes | None = None) -> None:
        validate_stack_batch(rec, self.limits, raw)
        self._time("stacks", rec["job"], 0, int(rec["window_end_ns"]))

    def anomaly(self, rec: Mapping[str, Any], raw: bytes | None = None) -> None:
        validate_anomaly(rec, self.limits, raw)
        self._time("anomaly", rec["job"], int(rec["window_end_step"]), int(rec["window_end_ns"]))


def checker(ctx: Any) -> Checker:
    """The :class:`Checker` of a worker (``ctx.shared["validate"]``, built from ``ctx.pcfg``)."""
    c = ctx.shared.get("validate")
    if c is None:
        c = ctx.shared["validate"] = Checker(Limits.from_pipeline(ctx.pcfg))
    return c
