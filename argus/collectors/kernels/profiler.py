"""Duty-cycled ``torch.profiler`` sources: CPU op events (CPU-only hosts) and Kineto GPU kernels.

``cpu_ops``: the CPU profiler's op events (``aten::addmm``, ...) stand in for kernels on
machines without a GPU, so the whole kernel path (columnar batches, compression, L3) runs
here. The stream column holds the host thread id; the main training thread is ``compute``.

``kineto``: the fallback on GPU hosts without cupti-python: CUDA kernel activity through
Kineto (``device_resource_id`` is the CUDA stream id). Untested here (no GPU).

Cost: while a window is open every op pays the profiler's instrumentation (~µs per op), and
starting/stopping costs ~1 ms; hence duty cycling (one window every N steps) and the
overhead budget. The first start in a process initialises Kineto (seconds), so
:meth:`warm_up` is called once at :func:`argus.collectors.start`, before training.

``cpu_ops`` windows start and stop the profiler through ``torch.autograd``'s own calls
(``_prepare_profiler``/``_enable_profiler``/``_disable_profiler``, what
``torch.profiler.profile`` runs inside) rather than the wrapper, which also gathers the
process group's configuration for trace metadata and builds its Python state every window
(~0.1 ms more of the training thread's CPU per window, issue 22); where those calls are
missing or refuse (another torch), the wrapper is used.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from argus.collectors.kernels.base import KernelColumns, columns_from_arrays

__all__ = ["ProfilerSource"]

_SKIP_PREFIXES = ("ProfilerStep", "[memory]")


#: events read per pass between two :func:`_columns` pacing points (~5 us of getters each)
_BLOCK = 256


def _no_pace() -> None:
    pass


def _columns(
    results: Any,
    gpu: bool,
    main_tid: int,
    cap: int,
    pace: Callable[[], None] = _no_pace,
    block: int = _BLOCK,
) -> KernelColumns | None:
    """Columns of one window's Kineto results (``None``: no results). ``pace`` is called
    after each ``block`` events read (the producer's :meth:`pace_point`: the delivery thread
    hands the GIL over there, so a large window's parse is not one long hold of it)."""
    if results is None:
        return None
    evs = results.events()
    pace()
    names: list[str] = []
    stream_l: list[int] = []
    start_l: list[int] = []
    dur_l: list[int] = []
    for i in range(0, len(evs), block):
        for e in evs[i : i + block]:
            if gpu and "CUDA" not in str(e.device_type()):
                continue
            n = e.name()
            if n.startswith(_SKIP_PREFIXES):
                continue
            names.append(n)
            stream_l.append(e.device_resource_id())
            start_l.append(e.start_ns())
            dur_l.append(e.duration_ns())
        pace()
    stream = np.array(stream_l, np.int64)
    start = np.array(start_l, np.int64)
    dur = np.array(dur_l, np.int64)
    order = np.argsort(start, kind="stable")
    names = [names[i] for i in order.tolist()]
    stream, start, dur = stream[order], start[order], dur[order]
    if gpu:
        return columns_from_arrays(names, stream, start, dur, max_events=cap)
    ids = [int(x) for x in np.unique(stream & 0xFFFFFFFF).tolist()]
    main = main_tid & 0xFFFFFFFF
    kinds = {s: ("compute" if s == main else "unknown") for s in ids}
    labels = {s: f"thread {s}" + (" (training)" if s == main else "") for s in ids}
    return columns_from_arrays(
        names, stream, start, dur, max_events=cap, stream_kinds=kinds, stream_labels=labels
    )


class ProfilerSource:
    """A ``torch.profiler`` window per kernel window.

    Parameters
    ----------
    gpu : bool
        ``True``: keep CUDA kernel events (source ``kineto``); ``False``: CPU op events
        (source ``cpu_ops``).
    max_events : int
        Events kept per window; the rest are counted as dropped.
    """

    def __init__(self, *, gpu: bool, max_events: int) -> None:
        import os

        # Kineto prints a line to stderr at every profiler start/stop (and a CUDA probe error
        # on CPU hosts); keep training logs clean unless the user chose a level
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        import torch.profiler as tp

        self._tp = tp
        self.gpu = gpu
        self.source = "kineto" if gpu else "cpu_ops"
        self.max_events = max_events
        self._acts = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if gpu else [])
        self._prof: Any = None
        self._raw: Any = None if gpu else _raw_calls(tp.ProfilerActivity.CPU)
        self.cost_per_event_ns = 0.0  # calibrated by warm_up()
        #: called between passes of a window's build (the collector sets the producer's
        #: ``pace_point``: the delivery thread hands the GIL over there)
        self.pace: Callable[[], None] = _no_pace
        self._main_tid = threading.get_native_id()

    def warm_up(self) -> None:
        """Initialise Kineto once (slow the first time in a process) and calibrate the
        profiler's cost per recorded op (CPU ns of the calling thread), which the collector
        charges to its overhead for every event of a window."""
        import time

        import torch

        with self._tp.profile(activities=self._acts) as prof:
            torch.zeros(1).add_(1)
        # build this window's columns once here (best effort): a first build imports and
        # initialises what it needs lazily (numpy.ma inside np.unique: 11-16 ms), GIL and
        # import lock held, on the delivery thread, where a 1.4 ms training step waited it
        # out (12-15 ms steps)
        with contextlib.suppress(Exception):
            _columns(prof.profiler.kineto_results, self.gpu, self._main_tid, self.max_events)
        x = torch.zeros(8)
        n = 400

        def run() -> int:
            c = time.thread_time_ns()
            for _ in range(n):
                x.add_(1)
            return time.thread_time_ns() - c

        base = min(run() for _ in range(3))
        with self._tp.profile(activities=self._acts):
            profiled = min(run() for _ in range(3))
        self.cost_per_event_ns = max(0.0, (profiled - base) / n)

    def start_window(self) -> None:
        self._main_tid = threading.get_native_id()
        if self._raw is not None:
            try:
                self._raw.start()
                self._prof = self._raw
                return
            except Exception:
                self._raw = None  # the wrapper from now on
        prof = self._tp.profile(activities=self._acts)
        prof.__enter__()
        self._prof = prof

    def end_window(self) -> Callable[[], KernelColumns | None]:
        prof, self._prof = self._prof, None
        if prof is None:
            return lambda: None
        gpu, main_tid, cap, pace = self.gpu, self._main_tid, self.max_events, self.pace
        if prof is self._raw:
            held = [prof.stop()]

            def build_raw() -> KernelColumns | None:
                try:
                    return _columns(held[0], gpu, main_tid, cap, pace)
                finally:
                    held.clear()

            return build_raw
        prof.__exit__(None, None, None)

        def build() -> KernelColumns | None:
            # delivery thread; holds the GIL, so kept short: one pass of pybind getters over
            # the events, the rest vectorised (a CPU-only window has no device events, so the
            # per-event device type is read only on GPU windows)
            try:
                return _columns(prof.profiler.kineto_results, gpu, main_tid, cap, pace)
            finally:
                # the profiler objects hold reference cycles around the C++ results (~1 MiB
                # per window here) that only a full gc frees: RSS grew without bound over
                # windows (pytorch/pytorch#193348); drop them as soon as the columns exist
                prof.profiler.kineto_results = None
                prof.profiler = None

        return build

    def close(self) -> None:
        if self._prof is not None:
            try:
                if self._prof is self._raw:
                    self._raw.stop()
                else:
                    self._prof.__exit__(None, None, None)
            finally:
                self._prof = None


class _RawCalls:
    """``torch.autograd``'s profiler calls for a CPU-op window (what the wrapper runs)."""

    def __init__(self, autograd: Any, config: Callable[[], Any], acts: set[Any]) -> None:
        self._ag = autograd
        self._config = config
        self._acts = acts

    def start(self) -> None:
        cfg = self._config()
        self._ag._prepare_profiler(cfg, self._acts)
        self._ag._enable_profiler(cfg, self._acts)

    def stop(self) -> Any:
        """The window's results (``_ProfilerResult``, ``events()``)."""
        return self._ag._disable_profiler()


def _raw_calls(cpu: Any) -> _RawCalls | None:
    """The raw calls of this torch, or ``None`` where it lacks them."""
    try:
        import torch.autograd as ag
        from torch._C._profiler import ProfilerConfig, ProfilerState, _ExperimentalConfig

        if not all(hasattr(ag, f) for f in ("_prepare_profiler", "_enable_profiler")):
            return None

        def config() -> Any:
            # (state, input shapes, memory, stack, flops, modules, experimental config)
            return ProfilerConfig(
                ProfilerState.KINETO, False, False, False, False, False, _ExperimentalConfig()
            )

        config()  # this torch takes these arguments
        return _RawCalls(ag, config, {cpu})
    except Exception:
        return None
