"""Semantic checks of every record the stream agents consume (after Avro decoding).

The codec (:mod:`argus.schemas.codec`) rejects bytes that are not a record of the expected
schema; this module rejects records that decode but make no sense: a rank outside the job's
world, a negative, NaN or absurd duration, an empty or oversized batch, an event time or a
step that contradicts its own source. Each check raises :class:`InputError` with a short
``reason`` code; the agents send the record to ``argus.dlq`` with that code and the original
bytes (docs/reliability.md lists every code).

The validators are pure functions of a record and :class:`~argus.streams.limits.Limits` (the
``max_*`` settings of ``[streams]``, re-exported here); the skew checks also need
the receiving wall clock, the record's broker timestamp and what its source sent before,
which :class:`Clocks` keeps (bounded, in memory: a restarted worker starts afresh).
:class:`Checker` bundles them for an agent; ``checker(ctx)`` gives the one of a worker.

**Time and step skew, per source.** Recorded runs (the simulator's fixed 2026 epoch, a
re-published job, a backfill published faster than real time) carry old event times
legitimately, so event time is never judged against the wall clock in the past, and no job-
wide "newest" time exists that one record could move. A *source* is one rank's records of one
kind in one job (one level's, for anomalies). Its *reference* is the last record it had
accepted: step ``s0``, event time ``t0`` (the record's end), broker time ``u0`` (the Kafka
timestamp: the producer's create time) and pace ``p0`` (its event time per step: the larger of
the record's span and the event time per step since the record before). A record at
``(s, t, u)`` is rejected when

* **future** (``time-skew``): ``t`` is more than ``max_future_s`` ahead of the receiving wall
  clock (no record describes the future; it would hold event-time windows open);
* **time** (``time-skew``, records from outside the pipeline: steps, kernel batches, stacks):
  ``e = (t - t0) - (u - u0)``, how far its event clock ran ahead of the broker's since the
  reference, is above ``max_skew_s + 2 * max(s - s0, 1) * p0`` (its event time is later than
  the steps it advanced allow at twice its pace: the wall-clock-stamped record in a replayed
  job, 6 months ahead after one step) or below ``-max_skew_s`` (older than its source's
  records, as published: a stale record re-sent). A live source keeps ``e`` near 0 (event and
  broker time advance together, up to the collectors' ~30 s of buffering); a replay or
  backfill advances ``e`` by one step's event time per step, within the allowance;
* **step** (``step-skew``): ``s - s0`` is above ``max_step_jump + MAX_STEP_RATE * (t - t0)``
  (steps beyond what the event time elapsed allows at 1,000 steps/s) **and** so is its step
  against the job's reference: a rank behind its job catches up freely; steps going back (a
  restart from a checkpoint) are always fine.

Summaries and anomalies are written by the pipeline's own workers from records already
judged, so their broker time measures a worker's lag (unbounded: a worker down for an hour),
not their source's clock: they get the future and step checks only.

Which reference judges: the source's own once *confirmed* (a record agreed with the one before
it); otherwise the job's (the last record accepted from a confirmed source of the same kind and
job: a rank joining late, a worker's first records after a restart); otherwise none (the first
records of a job this worker sees are accepted, and the second confirms the first or replaces
it). A rejected record never moves a reference, so one record cannot move a source's or a
job's clock: the next good record is judged against the same reference as before it. Three
records of a source in a row that each agree with the one before but not with the reference
are a new regime (a replayed job's pause longer than ``max_skew_s``, collectors switched back
on after many steps): the third is accepted and becomes the reference, the two before it are
in the DLQ with their reasons. ``max_skew_s = 0`` / ``max_step_jump = 0`` turn the time /
step check off.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from argus.detectors.findings import KINDS, LEVELS
from argus.errors import ArgusError
from argus.streams.limits import Limits
from argus.summaries.quantile_wire import LOG16_STEPS_PER_UNIT, decode_log16
from argus.summaries.summary_record import BatchColumns, batch_columns, summary_wire_columns

__all__ = [
    "MAX_STEP_RATE",
    "REASONS",
    "Checker",
    "Clocks",
    "InputError",
    "Limits",
    "Mark",
    "checker",
    "step_skew",
    "time_skew",
    "validate_anomaly",
    "validate_kernel_batch",
    "validate_kernel_batch_columns",
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
_DIM_KEYS = tuple((d, f"{d}_size", f"{d}_rank") for d in DIMS)
_NS = 1_000_000_000


class InputError(ArgusError, ValueError):
    """A decoded record that is semantically invalid; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


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
    for d, size_key, rank_key in _DIM_KEYS:
        size, rank = coords.get(size_key, 1), coords.get(rank_key, 0)
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
    """A ``kernel_batch`` (compressor input); returns its number of events. See
    :func:`validate_kernel_batch_columns`."""
    return int(validate_kernel_batch_columns(batch, limits)[1].size)


def validate_kernel_batch_columns(batch: Mapping[str, Any], limits: Limits) -> BatchColumns:
    """A ``kernel_batch`` (compressor input); returns its columns
    (:func:`~argus.summaries.summary_record.batch_columns`: the compressor takes them as they
    are, so a record's columns are unpacked once).

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
    cols = batch_columns(batch)  # BatchError on inconsistent columns
    hi = int(np.maximum.reduce(cols[3]))
    if hi > limits.max_duration_s * _NS:
        raise InputError(
            "bad-duration",
            f"a kernel lasts {hi / _NS:.0f} s > max_duration_s {limits.max_duration_s}",
        )
    if hi <= 0:
        raise InputError("bad-duration", f"all {n} kernel durations are <= 0")
    return cols


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
    gk, _gs, _gc, _cc, q, off, lv = summary_wire_columns(rec)  # BatchError: inconsistent
    if gk.size == 0:
        raise InputError("empty", "kernel_summary has no kernel groups")
    if not np.all(np.isfinite(q)):  # log16: a finite median decodes to finite quantiles
        raise InputError("bad-duration", "kernel_summary quantiles hold NaN or infinity")
    top = limits.max_duration_s * _NS
    # log16 within range undecoded: 0 <= m * exp(k / steps) <= max m * exp(max(max k, 0))
    if (
        off.size
        and float(q.min()) >= 0
        and float(q.max()) * _exp_step(max(int(off.max()), 0)) <= top
    ):
        return
    if off.size:
        q = decode_log16(q, off, lv)
    if q.size and (float(q.min()) < 0 or float(q.max()) > top):
        raise InputError(
            "bad-duration",
            f"kernel_summary quantiles span [{float(q.min()):.3g}, {float(q.max()):.3g}] ns; "
            f"must be in [0, {limits.max_duration_s} s]",
        )


def _exp_step(k: int) -> float:
    """``exp(k / LOG16_STEPS_PER_UNIT)`` as :func:`decode_log16` computes it for offset k."""
    out: float = np.exp(np.array([k], dtype=np.float64) / LOG16_STEPS_PER_UNIT)[0]
    return out


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
MAX_STEP_RATE = 1000.0
"""Steps per second of event time no training job exceeds (no training step takes < 1 ms)."""


def _iso(ns: int) -> str:
    try:
        return datetime.fromtimestamp(ns / _NS, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"{ns} ns"


@dataclass(slots=True)
class Mark:
    """What the skew checks keep of one record of a source.

    Attributes
    ----------
    step : int
        Step or window id.
    t_ns : int
        Event time (the record's end), ns since the epoch.
    u_ns : int
        Broker timestamp (the producer's create time), ns since the epoch; the receiving wall
        clock for a record without one.
    pace_ns : float
        The source's event time per step, ns (>= 1): the larger of the record's own span and
        the event time per step since the source's previous record.
    confirmed : bool
        The record agreed with an earlier one of its source, with its job's reference, or ended
        a regime change (:class:`Clocks`).
    """

    step: int
    t_ns: int
    u_ns: int
    pace_ns: float
    confirmed: bool = False


def time_skew(m: Mark, ref: Mark, max_skew_s: float) -> str | None:
    """Why ``m``'s event time disagrees with reference ``ref`` of its source, or None.

    ``e = (m.t - ref.t) - (m.u - ref.u)``: how far the event clock ran ahead of the broker's
    since ``ref``. Allowed: ``e <= max_skew_s + 2 * max(m.step - ref.step, 1) * ref.pace``
    (ahead: the steps done since, at twice the source's pace, plus the tolerance) and
    ``e >= -max_skew_s`` (behind).
    """
    e = (m.t_ns - ref.t_ns) - (m.u_ns - ref.u_ns)
    steps = max(m.step - ref.step, 1)
    ahead = max_skew_s * _NS + 2.0 * steps * ref.pace_ns
    if e <= ahead and e >= -max_skew_s * _NS:
        return None
    way, lim = ("ahead of", ahead) if e > 0 else ("behind", max_skew_s * _NS)
    return (
        f"event time {_iso(m.t_ns)} with broker time {_iso(m.u_ns)} is {abs(e) / _NS:.0f} s "
        f"further {way} the broker's clock than at step {ref.step} (event time "
        f"{_iso(ref.t_ns)}, broker time {_iso(ref.u_ns)}); allowed {lim / _NS:.0f} s "
        f"(max_skew_s {max_skew_s:g}"
        + (f" + 2 x {steps} steps x {ref.pace_ns / _NS:.3g} s)" if e > 0 else ")")
    )


def step_skew(m: Mark, ref: Mark, max_step_jump: int) -> str | None:
    """Why ``m``'s step is too far ahead of reference ``ref``, or None.

    Allowed: ``m.step - ref.step <= max_step_jump + MAX_STEP_RATE * max(m.t - ref.t, 0) s``;
    steps behind are always fine (a job restarted from a checkpoint).
    """
    dt_s = max(m.t_ns - ref.t_ns, 0) / _NS
    allowed = max_step_jump + MAX_STEP_RATE * dt_s
    jump = m.step - ref.step
    if jump <= allowed:
        return None
    return (
        f"{jump} steps ahead of step {ref.step} after {dt_s:.0f} s of event time; allowed "
        f"{allowed:.0f} (max_step_jump {max_step_jump} + {MAX_STEP_RATE:g} steps/s)"
    )


def _mark(prev: Mark | None, step: int, t_ns: int, u_ns: int, span_ns: int) -> Mark:
    """A record's :class:`Mark`, its pace measured since ``prev``."""
    pace = float(max(span_ns, 1))
    if prev is not None and step > prev.step and t_ns > prev.t_ns:
        pace = max(pace, (t_ns - prev.t_ns) / (step - prev.step))
    return Mark(step, t_ns, u_ns, pace)


@dataclass(slots=True)
class _Source:
    ref: Mark | None = None
    pending: list[Mark] = field(default_factory=list)  # rejected in a row since ref, <= 2


class Clocks:
    """Per-source references of the skew checks (see the module doc), bounded.

    A *source* is one rank's records of one kind (one level's, for anomalies) in one job. The
    reference of a source is the last record it had accepted; a job's reference is the last
    record accepted from a confirmed source of it. The ``max_sources`` sources and
    ``max_jobs`` jobs least recently seen are forgotten (judged afresh, as after a restart).
    """

    def __init__(self, max_sources: int = 1 << 17, max_jobs: int = 4096) -> None:
        self.max_sources = max_sources
        self.max_jobs = max_jobs
        self._src: OrderedDict[tuple[str, str, str], _Source] = OrderedDict()
        self._jobs: OrderedDict[tuple[str, str], Mark] = OrderedDict()

    def reference(self, kind: str, job: str, who: str) -> Mark | None:
        """The source's reference (its last accepted record), or None."""
        s = self._src.get((kind, job, who))
        return None if s is None else s.ref

    def job_reference(self, kind: str, job: str) -> Mark | None:
        """The job's reference (last record accepted from a confirmed source), or None."""
        return self._jobs.get((kind, job))

    def check(
        self,
        kind: str,
        job: str,
        who: str,
        *,
        step: int,
        t_ns: int,
        u_ns: int,
        span_ns: int,
        limits: Limits,
        timed: bool,
    ) -> None:
        """Judge one record of source ``who`` (``"rank 3"``); remember it when accepted.

        Raises :class:`InputError` ``time-skew`` (``timed`` kinds only) or ``step-skew``.
        """
        key = (kind, job, who)
        src = self._src.get(key)
        if src is None:
            src = self._src[key] = _Source()
            while len(self._src) > self.max_sources:
                self._src.popitem(last=False)
        else:
            self._src.move_to_end(key)
        own, jref = src.ref, self._jobs.get((kind, job))
        m = _mark(own, step, t_ns, u_ns, span_ns)
        judge = own if own is not None and own.confirmed else jref
        why = None if judge is None else self._disagrees(m, judge, jref, limits, timed)
        if why is None:
            # agreeing with a confirmed reference confirms; with no reference, agreeing with
            # the source's own unconfirmed last record does (the first records of a job)
            m.confirmed = judge is not None or (
                own is not None and self._disagrees(m, own, None, limits, timed) is None
            )
        else:
            prev = src.pending[-1] if src.pending else own
            m = _mark(prev, step, t_ns, u_ns, span_ns)  # its pace within the run
            if not (
                len(src.pending) == 2
                and self._disagrees(src.pending[1], src.pending[0], None, limits, timed) is None
                and self._disagrees(m, src.pending[1], None, limits, timed) is None
            ):
                src.pending = [*src.pending[-1:], m]
                reason, what = why
                raise InputError(reason, f"{kind} of {job} {who} step {step}: {what}")
            m.confirmed = True  # three in a row that agree: the source's new regime
        src.ref = m
        if src.pending:
            src.pending = []
        if m.confirmed:
            jk = (kind, job)
            jobs = self._jobs
            if jk in jobs:
                jobs[jk] = m
                jobs.move_to_end(jk)
            else:
                jobs[jk] = m
                while len(jobs) > self.max_jobs:
                    jobs.popitem(last=False)

    @staticmethod
    def _disagrees(
        m: Mark, ref: Mark, jref: Mark | None, limits: Limits, timed: bool
    ) -> tuple[str, str] | None:
        """``(reason, what)`` when ``m`` disagrees with ``ref``: time (``timed``), or a step
        too far ahead of ``ref`` and of ``jref`` (when given); else None."""
        if timed and limits.max_skew_s:
            why = time_skew(m, ref, limits.max_skew_s)
            if why is not None:
                return "time-skew", why
        if limits.max_step_jump:
            why = step_skew(m, ref, limits.max_step_jump)
            if why is not None and jref is not None and jref is not ref:
                if step_skew(m, jref, limits.max_step_jump) is None:
                    why = None  # ahead of its own last record only (a rank catching up)
                else:
                    why = f"{why}; its job's reference is at step {jref.step}"
            if why is not None:
                return "step-skew", why
        return None


class Checker:
    """The validators of one worker: :class:`Limits`, :class:`Clocks`, a wall clock.

    Each method validates one decoded record, then its event time and step; it raises
    :class:`InputError` (or the :class:`~argus.summaries.summary_record.BatchError` of
    inconsistent columns) for a bad one. ``broker_s`` is the record's Kafka timestamp in
    seconds (faust's ``event.message.timestamp``: the producer's create time); without one
    (None, <= 0) the receiving wall clock stands in.
    """

    def __init__(self, limits: Limits, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.limits = limits
        self.clocks = Clocks()
        self.clock_ns = clock_ns

    def _time(
        self,
        kind: str,
        rec: Mapping[str, Any],
        who: str,
        step: int,
        span: tuple[str, str] = ("window_start_ns", "window_end_ns"),
        broker_s: float | None = None,
        timed: bool = True,
    ) -> None:
        """The future check, then :meth:`Clocks.check` of ``rec`` (event time: ``span``)."""
        job, t0, t_ns = rec["job"], int(rec[span[0]]), int(rec[span[1]])
        now = self.clock_ns()
        ahead = t_ns - now
        if ahead > self.limits.max_future_s * _NS:
            raise InputError(
                "time-skew",
                f"{kind} of {job} {who} step {step}: event time {_iso(t_ns)} is "
                f"{ahead / _NS:.0f} s ahead of the wall clock (max_future_s "
                f"{self.limits.max_future_s:g})",
            )
        u_ns = round(broker_s * 1000) * 1_000_000 if broker_s and broker_s > 0 else now
        self.clocks.check(
            kind, job, who, step=step, t_ns=t_ns, u_ns=u_ns, span_ns=t_ns - t0,
            limits=self.limits, timed=timed,
        )  # fmt: skip

    def step(
        self, rec: Mapping[str, Any], raw: bytes | None = None, *, broker_s: float | None = None
    ) -> None:
        validate_step(rec, self.limits, raw)
        rank, step = f"rank {rec['rank']}", int(rec["step"])
        self._time("step_record", rec, rank, step, ("start_ns", "end_ns"), broker_s)

    def kernel_batch(self, batch: Mapping[str, Any], *, broker_s: float | None = None) -> int:
        return int(self.kernel_batch_columns(batch, broker_s=broker_s)[1].size)

    def kernel_batch_columns(
        self, batch: Mapping[str, Any], *, broker_s: float | None = None
    ) -> BatchColumns:
        """:meth:`kernel_batch`, returning the record's columns
        (:func:`validate_kernel_batch_columns`)."""
        cols = validate_kernel_batch_columns(batch, self.limits)
        rank, step = f"rank {batch['rank']}", int(batch["window_id"])
        self._time("kernel_batch", batch, rank, step, broker_s=broker_s)
        return cols

    def kernel_summary(self, rec: Mapping[str, Any], raw: bytes | None = None) -> None:
        validate_kernel_summary(rec, self.limits, raw)
        rank, step = f"rank {rec['rank']}", int(rec["window_id"])
        self._time("kernel_summary", rec, rank, step, timed=False)

    def stack_batch(
        self, rec: Mapping[str, Any], raw: bytes | None = None, *, broker_s: float | None = None
    ) -> None:
        validate_stack_batch(rec, self.limits, raw)
        self._time("stack_batch", rec, f"rank {rec['rank']}", 0, broker_s=broker_s)

    def anomaly(self, rec: Mapping[str, Any], raw: bytes | None = None) -> None:
        validate_anomaly(rec, self.limits, raw)
        level, step = f"level {rec['level']}", int(rec["window_end_step"])
        self._time("anomaly", rec, level, step, timed=False)


def checker(ctx: Any) -> Checker:
    """The :class:`Checker` of a worker (``ctx.shared["validate"]``, built from ``ctx.pcfg``)."""
    c = ctx.shared.get("validate")
    if c is None:
        c = ctx.shared["validate"] = Checker(Limits.from_pipeline(ctx.pcfg))
    return c
