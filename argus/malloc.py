"""glibc malloc settings for processes that compress kernel windows (issue 21).

A compressor poll (64-256 windows of 3,000 events) makes a few dozen numpy temporaries of
1.5-6 MB each. glibc serves blocks that large with ``mmap`` (its threshold adapts up to
32 MB only after such blocks are freed, and a heap top over 128 KB is trimmed back to the
system): every temporary then costs fresh pages, one fault and a kernel zeroing per 4 KB,
~20 % of the compression's CPU on the 2-core VM. :func:`keep_freed_blocks` serves blocks up
to ``mmap_max`` from the heap and keeps up to ``trim_max`` of freed heap for the next poll;
the process's memory stays flat at about its largest poll's working set.

Nothing happens off glibc (``mallopt`` missing) or when the ``MALLOC_MMAP_THRESHOLD_`` or
``MALLOC_TRIM_THRESHOLD_`` environment variables are set (the operator chose).

:func:`no_numpy_hugepages`, for every worker process and the in-memory engine (diagnose,
replay): numpy advises the kernel to back each array of 4 MB or more with transparent huge
pages (``madvise(MADV_HUGEPAGE)``). Under the kernel's default
``transparent_hugepage/defrag = madvise`` a fault in such a region may compact memory before
it returns: on the 2-core VM the first touch of 64 MB took 510-530 ms that way and 23 ms in
4 KB pages, and an L3 block of 512 ranks (arrays of 60-70 MB, fresh ``mmap`` each block)
took 4.5 s instead of 1.0 s (BENCHMARKS.md, issue 21). Workers allocate such arrays afresh
every block, so they turn the advice off; the training job's collectors never call this.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["keep_freed_blocks", "no_numpy_hugepages"]

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_done: bool | None = None
_HUGEPAGE_ENV = "NUMPY_MADVISE_HUGEPAGE"  # numpy's own switch, read at its import


def keep_freed_blocks(mmap_max: int = 32 << 20, trim_max: int = 256 << 20) -> bool:
    """Blocks under ``mmap_max`` bytes from the heap, up to ``trim_max`` bytes of freed heap
    kept (glibc ``mallopt``); once per process. Returns whether the settings are in force."""
    global _done
    if _done is not None:
        return _done
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ:
        _done = False
        return _done
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        _done = False
        return _done
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _done = bool(mallopt(_M_MMAP_THRESHOLD, mmap_max)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_max)
    )
    return _done


def no_numpy_hugepages() -> bool:
    """Stop numpy advising huge pages for its large arrays (this process, from now on).

    Returns whether the advice is now off: False when the operator set
    ``NUMPY_MADVISE_HUGEPAGE`` (numpy's own switch, which then wins) or this numpy has no
    switch.
    """
    if _HUGEPAGE_ENV in os.environ:
        return False
    import numpy as np

    # numpy >= 2 keeps the switch in numpy._core, numpy 1.x in numpy.core
    mod = getattr(np, "_core", None) or getattr(np, "core", None)
    switch = getattr(getattr(mod, "multiarray", None), "_set_madvise_hugepage", None)
    if switch is None:
        return False
    switch(False)
    return True
