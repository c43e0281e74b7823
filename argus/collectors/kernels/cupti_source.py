"""CUPTI kernel activity through ``cupti-python`` (GPU hosts; optional dependency).

UNVERIFIED: written from the cupti-python documentation (``from cupti import cupti``;
``activity_register_callbacks(buffer_requested, buffer_completed)`` where
``buffer_requested() -> (size_bytes, max_records)`` and ``buffer_completed(activities)``
receives Python activity objects; ``ActivityKind.CONCURRENT_KERNEL`` records carry ``name``,
``start``, ``end`` (ns, CUPTI clock), ``stream_id``, ``device_id``, ``correlation_id``;
``get_timestamp()`` reads the CUPTI clock; ``activity_flush_all(0)``). No GPU was available
to run it; ``bench/gpu_cupti_check.py`` is the prepared check.

Design (after ARGUS §4.3): the CUPTI callback only appends tuples under a lock (bounded:
past ``max_events`` per window it counts drops); flushing and conversion to columns happen in
the thunk, which runs on the producer's delivery thread, never on the training thread. With a
duty cycle of 1 (the default for this backend) activity stays enabled: "always on".

Windows: a batch holds the kernels CUPTI delivered since the previous batch; because the GPU
runs behind the host, a step's last kernels may land in the next step's batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from argus.collectors.kernels.base import KernelColumns, columns_from_events

__all__ = ["CuptiSource", "cupti_available"]

BUFFER_BYTES = 8 * 1024 * 1024


def cupti_available() -> bool:
    """True when cupti-python imports and a CUDA device is present."""
    try:
        import torch
        from cupti import cupti  # noqa: F401

        return bool(torch.cuda.is_available())
    except Exception:
        return False


class CuptiSource:
    """Kernel windows from the CUPTI Activity API (CONCURRENT_KERNEL)."""

    source = "cupti"

    def __init__(self, *, max_events: int) -> None:
        from cupti import cupti

        self._c = cupti
        self._kind = cupti.ActivityKind.CONCURRENT_KERNEL
        self.max_events = max_events
        self.continuous = True
        self._lock = threading.Lock()
        self._events: list[tuple[str, int, int, int]] = []
        self._dropped = 0
        self.errors = 0
        self._enabled = False
        cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        # CUPTI timestamps are ns on CUPTI's clock; map them to ns since epoch.
        self._offset_ns = time.time_ns() - int(cupti.get_timestamp())

    # CUPTI's threads ------------------------------------------------------------------------
    def _buffer_requested(self) -> tuple[int, int]:
        return BUFFER_BYTES, 0

    def _buffer_completed(self, activities: Any) -> None:
        off, cap, kind = self._offset_ns, self.max_events, self._kind
        with self._lock:
            out = self._events
            for a in activities:
                try:
                    if a.kind != kind:
                        continue
                    if len(out) >= cap:
                        self._dropped += 1
                        continue
                    start = int(a.start)
                    out.append((str(a.name), int(a.stream_id), start + off, int(a.end) - start))
                except Exception:  # never raise into CUPTI's thread; count the record as lost
                    self.errors += 1
                    self._dropped += 1

    # training thread ------------------------------------------------------------------------
    def start_window(self) -> None:
        if not self._enabled:
            self._c.activity_enable(self._kind)
            self._enabled = True

    def end_window(self) -> Callable[[], KernelColumns | None]:
        if not self.continuous and self._enabled:
            self._c.activity_disable(self._kind)
            self._enabled = False

        def build() -> KernelColumns | None:
            self._c.activity_flush_all(0)
            with self._lock:
                evs, self._events = self._events, []
                dropped, self._dropped = self._dropped, 0
            evs.sort(key=lambda t: t[2])
            return columns_from_events(evs, max_events=self.max_events, dropped=dropped)

        return build

    def close(self) -> None:
        try:
            if self._enabled:
                self._c.activity_disable(self._kind)
            self._c.activity_flush_all(1)
        finally:
            self._enabled = False
