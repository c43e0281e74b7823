"""The in-process collector: step boundaries, phases, kernel windows, budget, control.

One :class:`Collector` per training process, created by :func:`argus.collectors.start`.
Every method that runs on the training thread catches ``Exception``, counts it in
``errors`` and returns; each measures its own time into the step's ``overhead_ns``.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable
from itertools import chain
from typing import Any

from argus import __version__
from argus.collectors.budget import OverheadBudget
from argus.collectors.config import CollectorConfig
from argus.collectors.control import ControlFollower, ControlState, addresses
from argus.collectors.kernels import KernelColumns, KernelSource, make_kernel_source
from argus.collectors.phases import CpuClock, CudaClock, CudaResolver, PhaseItem, aggregate_phases
from argus.collectors.producer import RecordProducer
from argus.collectors.topology import Topology, topology_records
from argus.config import Settings
from argus.routing import Routing
from argus.schemas import pack
from argus.schemas.kernel_parts import split_batch
from argus.schemas.step_body import StepBodyEncoder
from argus.topics import MAX_MESSAGE_BYTES, topic_name

__all__ = ["Collector"]

log = logging.getLogger("argus.collectors")

_perf = time.perf_counter_ns
_cpu = time.thread_time_ns  # collector cost: CPU time of the training thread
# no ``os.getpid()`` on the step path: a system call, the first of which after a torch op cost
# ~5 us of CPU, cold, on the 2-core bench VM (issue 22); the at-fork hook closes every
# collector in a forked child (``forked``)
_LIVE: weakref.WeakSet[Collector] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for col in list(_LIVE):
        col.forked()


os.register_at_fork(after_in_child=_after_fork_in_child)
_wall = time.time_ns

STEP_RECORD_BYTES = 256  # size hint per step record + per phase below
PHASE_BYTES = 48
KERNEL_BATCH_BYTES = 256 * 1024  # size hint of a kernel window before it is parsed
MESSAGE_SLACK_BYTES = 512  # librdkafka's per-message overhead under message.max.bytes, and more
#: ``CollectorStats`` fields in schema order (``step_record.avsc``)
STATS_FIELDS = (
    "overhead_ns",
    "dropped_records",
    "dropped_bytes",
    "errors",
    "queue_depth",
    "backed_off",
    "kernels",
)


def _pipeline_group_ids(settings: Settings, coords: dict[str, int]) -> dict[str, str]:
    """``{group kind: group id}`` exactly as the detectors name groups in anomaly records
    (``argus.routing``, honouring ``[detectors.routing]``), so that an operator can
    address a control command to the group an alert names. Empty when unavailable."""
    try:
        table = settings.section("detectors").get("routing")
        routing = Routing.from_config(table if isinstance(table, dict) else None)
        return {kind: routing.group_for_kind(coords, kind) for kind in routing.groups}
    except Exception as exc:
        log.debug("argus collectors: detector routing unavailable (%r); own group ids", exc)
        return {}


class Collector:
    """Collectors of one training process.

    Parameters
    ----------
    cfg : CollectorConfig
        Validated configuration.
    settings : Settings
        Kafka and topic settings.
    topo : Topology
        This rank's place in the job.
    kafka_config : mapping, optional
        librdkafka settings; default ``settings.kafka_config()``.
    """

    def __init__(
        self,
        cfg: CollectorConfig,
        settings: Settings,
        topo: Topology,
        *,
        kafka_config: dict[str, Any] | None = None,
    ) -> None:
        self.cfg = cfg
        self.settings = settings
        self.topo = topo
        self.job = cfg.job
        self.key = topo.key(cfg.job)
        self.errors = 0
        self._pid = os.getpid()
        self._closed = False
        _LIVE.add(self)
        prefix = settings.topic_prefix
        self.topics = {
            s: topic_name(s, prefix) for s in ("raw.steps", "raw.kernels", "jobs", "control")
        }
        kconf = kafka_config if kafka_config is not None else settings.kafka_config()
        self.producer = RecordProducer(
            kconf,
            max_records=cfg.max_queue_records,
            max_bytes=cfg.max_queue_bytes,
            message_timeout_ms=cfg.message_timeout_ms,
            drain_interval_s=cfg.delivery_interval_ms / 1000,
        )
        self.producer.builders["step"] = self._step_record
        self.producer.builders["resolved"] = self._resolved_record
        self._coords = dict(topo.coords)
        self._groups = _pipeline_group_ids(settings, self._coords) or topo.groups()
        # clocks -------------------------------------------------------------------------
        self.cuda = False
        try:
            import torch

            self.cuda = bool(torch.cuda.is_available())
        except Exception:
            pass
        self._resolver: CudaResolver | None = None
        self.clock: Any = CpuClock()
        if self.cuda:
            cuda_clock = CudaClock()
            self.clock = cuda_clock
            self._resolver = CudaResolver(cuda_clock, self._emit_resolved)
        self.timer = self.clock.timer
        #: step records' Avro bodies, written on the delivery thread (``None``: coordinates
        #: the encoder does not take; the codec encodes the record's dict, as it did before)
        self._body: StepBodyEncoder | None = None
        try:
            self._body = StepBodyEncoder(self.job, topo.rank, topo.host, self._coords, self.timer)
        except Exception as exc:
            log.debug("argus collectors: step records through the codec: %r", exc)
        # channels ------------------------------------------------------------------------
        self.control = ControlState()
        self.phases_on = cfg.phases
        self.kernel_source: KernelSource | None = None
        if cfg.kernels:
            try:
                self.kernel_source = make_kernel_source(
                    cfg.kernels_backend, max_events=cfg.kernels_max_events
                )
                if hasattr(self.kernel_source, "pace"):  # its builds hand the GIL over
                    setattr(self.kernel_source, "pace", self.producer.pace_point)  # noqa: B010
                warm = getattr(self.kernel_source, "warm_up", None)
                if warm is not None:
                    warm()
            except Exception as exc:
                log.warning("argus collectors: kernel channel off: %r", exc)
                self.kernel_source = None
        continuous = bool(getattr(self.kernel_source, "continuous", False))
        self._base_period = 1 if continuous else cfg.kernels_period_steps
        self._active = 1 if continuous else cfg.kernels_active_steps
        self.kernels_on = self.kernel_source is not None
        self.budget = OverheadBudget(
            cfg.overhead_budget, window_steps=max(100, 2 * self._base_period)
        )
        self.period = self._base_period
        # step state ----------------------------------------------------------------------
        self.step_index = -1
        self.in_step = False
        self.items: list[PhaseItem] = []
        self.oh_ns = 0
        self._step_mono = 0
        self._step_wall = 0
        self._step_ev: Any = None
        self._window_open = False
        self._window_first_step = 0
        self._covered = False
        self._window_wall = 0
        self._window_steps = 0
        self._kernel_oh_pending_ns = 0
        self.explicit_steps = False
        self.auto_stepping = False
        self.steps_emitted = 0
        self.overhead_total_ns = 0  # cumulative training-thread cost, ns
        self.backoff_events = 0
        # side channels ---------------------------------------------------------------------
        self._follower: ControlFollower | None = None
        if cfg.control:
            try:
                self._follower = ControlFollower(kconf, self.topics["control"], self._on_command)
            except Exception as exc:
                log.warning("argus collectors: runtime control off: %r", exc)
        if cfg.publish_topology:
            self._publish_topology()

    # -- marks and phases (training thread) ---------------------------------------------------
    def mark(self, stream: Any = None) -> Any:
        """A clock mark: ns (CPU) or a CUDA event recorded on ``stream`` (default: current)."""
        return self.clock.mark(stream)

    def add_phase(self, name: str, kind: str, mode: str, start: Any, end: Any) -> None:
        """Record one span of phase ``name`` between two marks of :meth:`mark`."""
        if self.phases_on:
            self.items.append((name, kind, mode, start, end))

    def charge(self, ns: int) -> None:
        """Add ``ns`` of collector work on the training thread to the current step."""
        self.oh_ns += ns

    # -- steps (training thread) ---------------------------------------------------------------
    def step_begin(self, step: int | None = None) -> None:
        """Mark the start of a step (ends the previous one if still open)."""
        try:
            if self._closed:  # a forked child is closed by the at-fork hook
                return
            if self.in_step:
                self.step_end()
        except Exception:
            self.errors += 1
        c0 = _cpu()
        try:
            self.step_index = self.step_index + 1 if step is None else int(step)
            self.in_step = True
            self.items = []
            self._step_wall = _wall()
            self._step_mono = _perf()
            if self.cuda:
                self._step_ev = self.clock.mark()
            self._maybe_open_window()
        except Exception:
            self.errors += 1
        self.oh_ns = _cpu() - c0

    def step_end(self) -> None:
        """Mark the end of the current step and queue its records."""
        t0 = _perf()
        c0 = _cpu()
        try:
            if not self.in_step or self._closed:
                return
            self.in_step = False
            dur = t0 - self._step_mono
            self._covered = self._window_open  # a kernel batch will cover this step
            if self._window_open:
                self._window_steps += 1
                if self._window_steps >= self._active_now() or not self.kernels_on:
                    self._close_window()
            # the profiler's cost lies inside the ops it instruments; it is estimated when a
            # window is parsed (events x calibrated cost per event) and charged here
            pending, self._kernel_oh_pending_ns = self._kernel_oh_pending_ns, 0
            oh = self.oh_ns + pending + (_cpu() - c0)
            self.overhead_total_ns += oh
            if self.phases_on:
                self._queue_step(dur, oh)
            decision = self.budget.observe(oh, max(dur, 1))
            if decision.changed:
                self._apply_level(decision.level, decision.ratio)
        except Exception:
            self.errors += 1

    def _queue_step(self, dur_ns: int, oh_ns: int) -> None:
        items = self.items
        self.items = []
        meta = (self.step_index, self._step_wall, self._step_mono, oh_ns, self._covered)
        if self._resolver is not None:
            end_ev = self.clock.mark()
            self._resolver.submit(meta, self._step_ev, end_ev, items)
            return
        size = STEP_RECORD_BYTES + PHASE_BYTES * len(items)
        # plain values only (CPU marks are ints): the gc untracks the tuple at its first look,
        # so a step waiting up to a second for the delivery thread never reaches the old
        # generation, whose growth triggers full collections of the job's heap
        self.producer.submit(
            self.topics["raw.steps"],
            self.key,
            "step_record",
            ("step", *meta, dur_ns, *chain.from_iterable(items)),
            size,
        )
        self.steps_emitted += 1

    def _emit_resolved(self, meta: Any, phases: list[tuple[str, str, int, int]], dur: int) -> None:
        # resolver thread: phase offsets are already relative to the step start event
        step, wall, _mono, oh, covered = meta
        self.producer.submit(
            self.topics["raw.steps"],
            self.key,
            "step_record",
            ("resolved", step, wall, dur, oh, covered, *chain.from_iterable(phases)),
            STEP_RECORD_BYTES + PHASE_BYTES * len(phases),
        )
        self.steps_emitted += 1

    def _resolved_record(
        self, step: int, wall: int, dur: int, oh: int, covered: bool, *flat: Any
    ) -> bytes | dict[str, Any]:
        # delivery thread: a CUDA step whose phases the resolver converted; ``flat`` holds
        # (name, kind, offset ns, duration ns) per phase, one after the other
        phases = [
            (flat[i], flat[i + 1], wall + flat[i + 2], flat[i + 3]) for i in range(0, len(flat), 4)
        ]
        return self._step_body(step, wall, dur, oh, phases, covered)

    def _step_record(
        self, step: int, wall: int, mono: int, oh: int, covered: bool, dur_ns: int, *flat: Any
    ) -> bytes | dict[str, Any]:
        # delivery thread; ``flat`` holds the PhaseItems' five values one after the other
        items: list[PhaseItem] = [flat[i : i + 5] for i in range(0, len(flat), 5)]
        phases = [(n, k, wall + (s - mono), d) for n, k, s, d in aggregate_phases(items)]
        return self._step_body(step, wall, dur_ns, oh, phases, covered)

    def _step_body(
        self,
        step: int,
        wall: int,
        dur: int,
        oh: int,
        phases: list[tuple[str, str, int, int]],
        covered: bool = False,
    ) -> bytes | dict[str, Any]:
        """A ``step_record``'s Avro body (delivery thread; ``covered``: a kernel batch of this
        rank covers the step); the record's dict when the encoder is unavailable or refuses
        a value, so that the codec encodes it or raises the
        :class:`~argus.errors.EncodeError` the producer counts."""
        p = self.producer
        stats = (
            oh,
            p.dropped_records,
            p.dropped_bytes,
            self.errors + p.errors,
            p.queue_depth,
            self.budget.backed_off,
            covered,
        )
        if self._body is not None:
            try:
                return self._body.encode(step, wall, wall + dur, phases, stats)
            except (OverflowError, TypeError, ValueError, AttributeError):
                pass
        return {
            "job": self.job,
            "rank": self.topo.rank,
            "step": step,
            "start_ns": wall,
            "end_ns": wall + dur,
            "host": self.topo.host,
            "coords": self._coords,
            "phases": [
                {"name": n, "stream_kind": k, "start_ns": s, "duration_ns": d, "timer": self.timer}
                for n, k, s, d in phases
            ],
            "collector": dict(zip(STATS_FIELDS, stats, strict=True)),
        }

    # -- kernel windows --------------------------------------------------------------------------
    def _active_now(self) -> int:
        return 1 if self.control.drilling(_wall()) else self._active

    def _period_now(self) -> int:
        return 1 if self.control.drilling(_wall()) else self.period

    def _maybe_open_window(self) -> None:
        if not self.kernels_on or self._window_open or self.kernel_source is None:
            return
        period = self._period_now()
        if self.step_index % period != 0:
            return
        src = self.kernel_source
        if hasattr(src, "continuous"):
            src.continuous = period == 1
        src.start_window()
        self._window_open = True
        self._window_first_step = self.step_index
        self._window_wall = self._step_wall
        self._window_steps = 0

    def _close_window(self) -> None:
        src = self.kernel_source
        self._window_open = False
        if src is None:
            return
        if hasattr(src, "continuous") and (not self.kernels_on or self._period_now() != 1):
            src.continuous = False  # an always-on source really stops when switched off
        build = src.end_window()
        first, wstart, wend = self._window_first_step, self._window_wall, _wall()
        self.producer.submit(
            self.topics["raw.kernels"],
            self.key,
            "kernel_batch",
            lambda: self._kernel_record(build, first, wstart, wend),
            KERNEL_BATCH_BYTES,
        )

    def _kernel_record(
        self, build: Callable[[], KernelColumns | None], window_id: int, start_ns: int, end_ns: int
    ) -> list[dict[str, Any]] | None:
        """The window's ``kernel_batch``, split into parts that fit one Kafka message
        (:func:`argus.schemas.kernel_parts.split_batch`; delivery thread)."""
        cols = build()
        if cols is None:
            return None
        per_event = float(getattr(self.kernel_source, "cost_per_event_ns", 0.0))
        self._kernel_oh_pending_ns += int(per_event * len(cols))
        rec = {
            "job": self.job,
            "rank": self.topo.rank,
            "window_id": window_id,
            "window_start_ns": start_ns,
            "window_end_ns": end_ns,
            "host": self.topo.host,
            "coords": self._coords,
            "source": getattr(self.kernel_source, "source", "cpu_ops"),
            "names": cols.names,
            "name_idx": pack(cols.name_idx, "uint32"),
            "stream": pack(cols.stream, "uint32"),
            "start_ns": pack(cols.start_ns, "int64"),
            "duration_ns": pack(cols.duration_ns, "int64"),
            "streams": cols.streams,
            "dropped": int(cols.dropped),
        }
        return split_batch(rec, MAX_MESSAGE_BYTES - MESSAGE_SLACK_BYTES - len(self.key))

    # -- budget and control ------------------------------------------------------------------------
    def _apply_level(self, level: int, ratio: float) -> None:
        self.backoff_events += 1
        self.period = self._base_period * (2**level)
        if level:
            log.warning(
                "argus collectors: overhead %.2f%% of step time is over the %.2f%% budget; "
                "backing off (level %d: kernel window every %d steps)",
                100 * ratio,
                100 * self.cfg.overhead_budget,
                level,
                self.period,
            )
        else:
            log.warning(
                "argus collectors: overhead %.3f%% is back under budget; full rate "
                "(kernel window every %d steps)",
                100 * ratio,
                self.period,
            )

    def _on_command(self, cmd: dict[str, Any]) -> None:
        # control thread: only plain attribute writes, read by the training thread at step ends
        if not addresses(cmd, job=self.job, rank=self.topo.rank, groups=self._groups):
            return
        self.control.apply(cmd)
        self._refresh_channels()
        log.info(
            "argus collectors: applied control %s %s (rank %d)",
            cmd["action"],
            cmd["channel"],
            self.topo.rank,
        )

    def set_channels(self, *, phases: bool | None = None, kernels: bool | None = None) -> None:
        """Switch channels at runtime, as an ``enable``/``disable`` command would."""
        if phases is not None:
            self.control.enabled["phases"] = phases
        if kernels is not None:
            self.control.enabled["kernels"] = kernels
        self._refresh_channels()

    def _refresh_channels(self) -> None:
        self.phases_on = self.control.is_on("phases", self.cfg.phases)
        self.kernels_on = self.kernel_source is not None and self.control.is_on(
            "kernels", self.cfg.kernels
        )
        duty = self.control.rate.get("kernels")
        if duty:
            self._base_period = max(1, round(self._active / duty))
            self.period = self._base_period * (2**self.budget.level)

    def _publish_topology(self) -> None:
        for key, rec in topology_records(self.job, self.topo, _wall(), __version__):
            self.producer.submit(
                self.topics["jobs"], key, "job_topology", rec, 256 + 64 * len(rec["ranks"])
            )

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self, timeout_s: float = 5.0) -> None:
        """End the open step, flush for at most ``timeout_s``, stop the threads."""
        if self._closed or self._pid != os.getpid():
            return
        try:
            if self.in_step and self.auto_stepping and not self.explicit_steps:
                # auto steps end at optimizer.step(); the open one is the tail after the last
                # step, not a training step: drop it
                self.in_step = False
            if self.in_step:
                self.step_end()
            if self._window_open:
                self._close_window()
            if self.kernel_source is not None:
                self.kernel_source.close()
            if self._resolver is not None:
                self._resolver.close()
            if self._follower is not None:
                # a daemon thread: not waited for past a moment (with the broker away it
                # sits in a metadata request of up to 5 s, with it in a 1 s poll, and the
                # job is exiting; issue 19: the whole exit within 1 s)
                self._follower.close(timeout_s=0.05)
        except Exception:
            self.errors += 1
        self._closed = True
        self.producer.close(timeout_s)

    def forked(self) -> None:
        """Called in a forked child: become inert (no threads exist there)."""
        self._closed = True
        self.phases_on = False
        self.kernels_on = False
