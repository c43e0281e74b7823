"""The kernel-source interface and the columnar window every backend produces.

A source is switched on for a *window* (one or more steps) by the training thread and
switched off at its end. ``end_window`` must be cheap: it returns a thunk that the producer's
delivery thread calls to turn the raw activity into :class:`KernelColumns`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

__all__ = ["KernelColumns", "KernelSource", "columns_from_events"]


@dataclass
class KernelColumns:
    """One window of kernel events, columnar.

    Attributes
    ----------
    names : list of str
        Name dictionary.
    name_idx : (n,) uint32 array
        Index into ``names`` per event.
    stream : (n,) uint32 array
        CUDA stream id, or host thread id for CPU ops.
    start_ns : (n,) int64 array
        Event start, ns since epoch.
    duration_ns : (n,) int64 array
        Event duration, ns.
    streams : list of dict
        ``{"id", "kind", "label"}`` per stream seen (kind: compute | comm | p2p | unknown).
    dropped : int
        Events lost in this window (cap reached, or reported lost by the backend).
    """

    names: list[str]
    name_idx: np.ndarray
    stream: np.ndarray
    start_ns: np.ndarray
    duration_ns: np.ndarray
    streams: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0

    def __len__(self) -> int:
        return int(self.name_idx.shape[0])


def _stream_kind(names: Sequence[str]) -> str:
    for n in names:
        if n.startswith(("ncclDevKernel", "ncclKernel")):
            return "comm"
    return "compute"


def columns_from_events(
    events: Sequence[tuple[str, int, int, int]],
    *,
    max_events: int,
    stream_kinds: dict[int, str] | None = None,
    stream_labels: dict[int, str] | None = None,
    dropped: int = 0,
) -> KernelColumns:
    """Build :class:`KernelColumns` from ``(name, stream, start_ns, duration_ns)`` tuples.

    Events beyond ``max_events`` are counted in ``dropped``. A stream's kind is taken from
    ``stream_kinds`` when given, else ``"comm"`` when it ran an NCCL kernel, else
    ``"compute"``.
    """
    kept = events[:max_events]
    dropped += max(0, len(events) - max_events)
    index: dict[str, int] = {}
    names: list[str] = []
    idx = np.empty(len(kept), dtype=np.uint32)
    stream = np.empty(len(kept), dtype=np.uint32)
    start = np.empty(len(kept), dtype=np.int64)
    dur = np.empty(len(kept), dtype=np.int64)
    per_stream: dict[int, list[str]] = {}
    for i, (name, s, t0, d) in enumerate(kept):
        j = index.get(name)
        if j is None:
            j = index[name] = len(names)
            names.append(name)
            per_stream.setdefault(s & 0xFFFFFFFF, []).append(name)
        else:
            per_stream.setdefault(s & 0xFFFFFFFF, [])
        idx[i] = j
        stream[i] = s & 0xFFFFFFFF
        start[i] = t0
        dur[i] = d
    kinds = stream_kinds or {}
    labels = stream_labels or {}
    streams = [
        {"id": int(s), "kind": kinds.get(s, _stream_kind(ns)), "label": labels.get(s, "")}
        for s, ns in sorted(per_stream.items())
    ]
    return KernelColumns(names, idx, stream, start, dur, streams, dropped)


class KernelSource(Protocol):
    """What the collector needs from a kernel backend.

    ``source`` is the ``KernelBatch.source`` value (``cupti``, ``kineto``, ``cpu_ops``).
    ``start_window`` and ``end_window`` run on the training thread and must be cheap; the
    thunk from ``end_window`` runs on the delivery thread.
    """

    source: str

    def start_window(self) -> None: ...

    def end_window(self) -> Callable[[], KernelColumns | None]: ...

    def close(self) -> None: ...
