"""Background work of the collectors yields the CPU to the training threads.

Linux keeps a nice value per thread, and a thread starts with its creator's: a thread that
lowers its own priority before it creates librdkafka's client makes that client's threads
(``rdk:main``, ``rdk:broker*``) low-priority too. On a host whose cores the training job
keeps busy (CPU training, a data-loading-bound GPU job) the collectors' encoding, sends and
the stacks sidecar's py-spy then run in the gaps instead of taking turns with the job; on an
idle core they run as fast as before. Lowering a priority needs no privilege.
"""

from __future__ import annotations

import os
import threading

__all__ = ["BACKGROUND_NICE", "lower_this_thread"]

BACKGROUND_NICE = 10
"""Nice increment of the collectors' background threads and the sidecar's py-spy (0: off)."""


def lower_this_thread(increment: int = BACKGROUND_NICE) -> bool:
    """Raise the calling thread's nice value by ``increment`` (at most 19); never raises.

    Returns False where it could not (not Linux, or ``increment`` <= 0).
    """
    if increment <= 0:
        return False
    try:
        tid = threading.get_native_id()
        nice = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, nice + increment))
        return True
    except (AttributeError, OSError):
        return False
