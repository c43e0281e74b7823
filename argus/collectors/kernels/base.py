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

# np.unique imports numpy.ma on its first call (numpy 2): 11-16 ms with the GIL and the import
# lock held, on the delivery thread that builds the first window, where a 1.4 ms training step
# waited it out (issue 19); imported here, at start, instead
import numpy.ma

__all__ = ["KernelColumns", "KernelSource", "columns_from_arrays", "columns_from_events"]


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


_NCCL_PREFIXES = ("ncclDevKernel", "ncclKernel")


def columns_from_arrays(
    names: Sequence[str],
    stream: np.ndarray,
    start_ns: np.ndarray,
    duration_ns: np.ndarray,
    *,
    max_events: int,
    stream_kinds: dict[int, str] | None = None,
    stream_labels: dict[int, str] | None = None,
    dropped: int = 0,
) -> KernelColumns:
    """Build :class:`KernelColumns` from parallel per-event columns, vectorised.

    Parameters
    ----------
    names : sequence of str, length n
        Event names, in event order (the caller sorts by start when it wants time order).
    stream, start_ns, duration_ns : (n,) integer arrays
        Stream id (only the low 32 bits are kept), start (ns since epoch), duration (ns).
    max_events : int
        Events kept (the first ``max_events``); the rest are counted in ``dropped``.
    stream_kinds, stream_labels : dict, optional
        Per stream id; a stream without a kind is ``"comm"`` when it ran an NCCL kernel, else
        ``"compute"``.

    The name dictionary is in order of first appearance; streams are sorted by id.
    """
    n = min(len(names), max_events)
    dropped += len(names) - n
    sid = (np.asarray(stream[:n], dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32)
    start = np.asarray(start_ns[:n], dtype=np.int64)
    dur = np.asarray(duration_ns[:n], dtype=np.int64)
    if n:
        uniq, first, inv = np.unique(
            np.asarray(names[:n], dtype=object), return_index=True, return_inverse=True
        )
        order = np.argsort(first, kind="stable")
        remap = np.empty(order.size, dtype=np.uint32)
        remap[order] = np.arange(order.size, dtype=np.uint32)
        idx = remap[inv.reshape(-1)]
        name_list = [str(x) for x in uniq[order]]
    else:
        idx = np.empty(0, dtype=np.uint32)
        name_list = []
    nccl = np.array([x.startswith(_NCCL_PREFIXES) for x in name_list], dtype=bool)
    kinds = stream_kinds or {}
    labels = stream_labels or {}
    streams = []
    for s in np.unique(sid).tolist():
        kind = kinds.get(s)
        if kind is None:
            kind = "comm" if bool(nccl[idx[sid == s]].any()) else "compute"
        streams.append({"id": int(s), "kind": kind, "label": labels.get(s, "")})
    return KernelColumns(name_list, idx, sid, start, dur, streams, dropped)


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
    ``"compute"``. See :func:`columns_from_arrays`.
    """
    kept = events[:max_events]
    cols = np.array([e[1:] for e in kept], dtype=np.int64).reshape(-1, 3)
    return columns_from_arrays(
        [e[0] for e in kept],
        cols[:, 0],
        cols[:, 1],
        cols[:, 2],
        max_events=max_events,
        stream_kinds=stream_kinds,
        stream_labels=stream_labels,
        dropped=dropped + max(0, len(events) - max_events),
    )


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
