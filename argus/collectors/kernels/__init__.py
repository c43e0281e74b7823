"""Kernel sources: CUPTI (GPU, always on), Kineto (GPU fallback, duty-cycled) and CPU ops
(CPU-only hosts, duty-cycled), all producing columnar :class:`KernelColumns` windows."""

from __future__ import annotations

import logging

from argus.collectors.kernels.base import (
    KernelColumns,
    KernelSource,
    columns_from_arrays,
    columns_from_events,
)

__all__ = [
    "KernelColumns",
    "KernelSource",
    "columns_from_arrays",
    "columns_from_events",
    "make_kernel_source",
]

log = logging.getLogger("argus.collectors.kernels")


def make_kernel_source(backend: str, *, max_events: int) -> KernelSource | None:
    """The kernel source for ``backend`` (``auto`` picks cupti > kineto > cpu_ops).

    Returns ``None`` (and logs why) when torch is missing or the backend cannot run here;
    an explicitly requested but unavailable backend is logged as a warning.
    """
    try:
        import torch
    except Exception:
        log.warning("argus collectors: torch is not importable; kernel channel off")
        return None
    cuda = bool(torch.cuda.is_available())
    if backend in ("auto", "cupti") and cuda:
        from argus.collectors.kernels.cupti_source import CuptiSource, cupti_available

        if cupti_available():
            try:
                return CuptiSource(max_events=max_events)
            except Exception as exc:
                log.warning("argus collectors: CUPTI unavailable (%r); trying Kineto", exc)
        elif backend == "cupti":
            log.warning("argus collectors: cupti-python is not installed; using Kineto")
    elif backend == "cupti":
        log.warning("argus collectors: no CUDA device; CUPTI needs one, using CPU ops")
    from argus.collectors.kernels.profiler import ProfilerSource

    if backend == "kineto" and not cuda:
        log.warning("argus collectors: no CUDA device; Kineto kernels need one, using CPU ops")
    return ProfilerSource(gpu=cuda and backend != "cpu_ops", max_events=max_events)
