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
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["keep_freed_blocks"]

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_done: bool | None = None


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
