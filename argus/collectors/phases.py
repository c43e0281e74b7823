"""Phase timing: clocks, the per-step phase book, and the pure aggregation of phase spans.

A phase is a named span of a step (``forward``, ``attention``, ``mlp``, ``backward``,
``dp_allreduce``, ``optimizer``, ...). While a step runs, the training thread only appends
``(name, stream_kind, mode, start, end)`` tuples, where ``start``/``end`` are clock *marks*:

* CPU: ``time.perf_counter_ns()`` (monotonic), ns;
* CUDA: a ``torch.cuda.Event(enable_timing=True)`` recorded on the stream that runs the work.
  The events are resolved later by :class:`CudaResolver` on a background thread with
  ``query()``; the training thread never synchronises.

The step record carries **one entry per phase name**: :func:`aggregate_phases` folds repeated
spans (e.g. the ``mlp`` of every layer) by ``mode``:

* ``"sum"``: duration = sum of the span durations (compute phases, sequential by nature);
* ``"span"``: duration = last end - first start (collectives whose buckets overlap).

``start_ns`` is the first start in both modes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["CpuClock", "CudaClock", "CudaResolver", "PhaseItem", "aggregate_phases"]

log = logging.getLogger("argus.collectors.phases")

PhaseItem = tuple[str, str, str, Any, Any]  # (name, stream_kind, mode, start mark, end mark)


def aggregate_phases(
    items: Sequence[tuple[str, str, str, int, int]],
) -> list[tuple[str, str, int, int]]:
    """Fold raw phase spans into one entry per name.

    Parameters
    ----------
    items : sequence of (name, stream_kind, mode, start_ns, end_ns)
        Spans in any order; ``start_ns``/``end_ns`` on one clock, ns; ``mode`` is ``"sum"``
        or ``"span"``. Spans with ``end_ns < start_ns`` count as zero length.

    Returns
    -------
    list of (name, stream_kind, start_ns, duration_ns)
        Ordered by first start; the kind and mode of a name are those of its first span.

    Examples
    --------
    >>> aggregate_phases([("mlp", "compute", "sum", 0, 5), ("mlp", "compute", "sum", 10, 13),
    ...                   ("ar", "comm", "span", 2, 6), ("ar", "comm", "span", 4, 12)])
    [('mlp', 'compute', 0, 8), ('ar', 'comm', 2, 10)]
    """
    acc: dict[str, list[Any]] = {}
    for name, kind, mode, start, end in items:
        d = max(0, end - start)
        a = acc.get(name)
        if a is None:
            acc[name] = [kind, mode, start, d, max(start, end)]
            continue
        if start < a[2]:
            a[2] = start
        a[3] += d
        a[4] = max(a[4], end)
    out = []
    for name, (kind, mode, start, total, last_end) in acc.items():
        out.append((name, kind, start, total if mode == "sum" else last_end - start))
    out.sort(key=lambda t: t[2])
    return out


class CpuClock:
    """Monotonic host clock; marks are ``perf_counter_ns`` integers."""

    timer = "cpu"

    @staticmethod
    def mark(stream: Any = None) -> int:
        return time.perf_counter_ns()


class CudaClock:
    """CUDA events from a reusable pool, recorded on the given (or current) stream."""

    timer = "cuda_event"

    def __init__(self, pool_size: int = 4096) -> None:
        import torch

        self._torch = torch
        self._free: deque[Any] = deque()
        self._pool_size = pool_size
        self._lock = threading.Lock()

    def mark(self, stream: Any = None) -> Any:
        try:
            ev = self._free.pop()
        except IndexError:
            ev = self._torch.cuda.Event(enable_timing=True)
        ev.record(stream if stream is not None else self._torch.cuda.current_stream())
        return ev

    def release(self, events: Sequence[Any]) -> None:
        """Give resolved events back to the pool (called by the resolver thread)."""
        if len(self._free) < self._pool_size:
            self._free.extend(events)


class CudaResolver:
    """Resolves CUDA-event phases off the training thread and hands finished steps on.

    Each pending step holds its start/end events and the phase items. A daemon thread polls
    ``end.query()`` (never ``synchronize``) every ``poll_s`` seconds; when every event of a
    step has completed it converts them to ns offsets from the step start with
    ``elapsed_time`` (ms, float) and calls ``emit(step_meta, phases, step_duration_ns)``.
    At most ``max_pending`` steps wait; older ones are dropped and counted.
    """

    def __init__(
        self,
        clock: CudaClock,
        emit: Callable[[Any, list[tuple[str, str, int, int]], int], None],
        *,
        poll_s: float = 0.005,
        max_pending: int = 256,
    ) -> None:
        self._clock = clock
        self._emit = emit
        self._pending: deque[tuple[Any, Any, Any, list[PhaseItem]]] = deque()
        self._poll_s = poll_s
        self._max_pending = max_pending
        self._stop = threading.Event()
        self.dropped = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="argus-cuda-resolver", daemon=True)
        self._thread.start()

    def submit(self, meta: Any, start_ev: Any, end_ev: Any, items: list[PhaseItem]) -> None:
        """Queue one finished step (training thread; O(1))."""
        self._pending.append((meta, start_ev, end_ev, items))
        while len(self._pending) > self._max_pending:
            self._pending.popleft()
            self.dropped += 1

    def _ready(self, start_ev: Any, end_ev: Any, items: list[PhaseItem]) -> bool:
        if not end_ev.query():
            return False
        return all(it[4].query() for it in items)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                while self._pending:
                    meta, start_ev, end_ev, items = self._pending[0]
                    if not self._ready(start_ev, end_ev, items):
                        break
                    self._pending.popleft()
                    spans = [
                        (
                            n,
                            k,
                            m,
                            int(start_ev.elapsed_time(s) * 1e6),
                            int(start_ev.elapsed_time(e) * 1e6),
                        )
                        for n, k, m, s, e in items
                    ]
                    dur = int(start_ev.elapsed_time(end_ev) * 1e6)
                    self._emit(meta, aggregate_phases(spans), dur)
                    used = [start_ev, end_ev] + [x for it in items for x in (it[3], it[4])]
                    self._clock.release(used)
            except Exception as exc:
                self.errors += 1
                log.debug("cuda resolver: %r", exc)
                if self._pending:
                    self._pending.popleft()
            self._stop.wait(self._poll_s)

    def close(self, timeout_s: float = 2.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self._pending and time.monotonic() < deadline:
            time.sleep(self._poll_s)
        self._stop.set()
        self._thread.join(timeout=1.0)
