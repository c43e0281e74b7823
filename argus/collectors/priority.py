"""Background work of the collectors yields the CPU to the training threads.

Linux keeps a nice value per thread, and a thread starts with its creator's: a thread that
lowers its own priority before it creates librdkafka's client makes that client's threads
(``rdk:main``, ``rdk:broker*``) low-priority too (:func:`made_at_low_priority`). On a host
whose cores the training job keeps busy (CPU training, a data-loading-bound GPU job) the
collectors' sends and the stacks sidecar's py-spy then run in the gaps instead of taking
turns with the job; on an idle core they run as fast as before. Lowering a priority needs no
privilege.

**Only threads that never hold the GIL are lowered.** The collectors' Python threads (the
producer's delivery thread, the control follower) keep the training thread's priority: a
low-priority thread that holds the GIL when a busy host preempts it makes the training thread
wait for it (a priority inversion: 100-500 ms steps under load 7-14 with the delivery thread
at nice +10, issue 19), and raising a lowered priority back needs a privilege.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["BACKGROUND_NICE", "lower_this_thread", "made_at_low_priority"]

T = TypeVar("T")

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


def made_at_low_priority(make: Callable[[], T]) -> T:
    """``make()`` on a short-lived low-priority thread, so that the threads it starts
    (librdkafka's) inherit the priority while the caller keeps its own; ``make``'s exception
    is raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        lower_this_thread()
        try:
            box["value"] = make()
        except BaseException as exc:  # re-raised on the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name="argus-client-init", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
