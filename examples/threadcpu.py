"""CPU time per thread, for the collectors' cost: this process's collector threads by name
(:func:`collector_threads_cpu`) and any process's threads from ``/proc`` (:func:`thread_ticks`).

Used by the DDP demo's bench blocks and by ``bench/producer_cpu.py`` and ``bench/thread_cpu.py``;
no torch import, so the bench tools load it without the demo's model.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")  # /proc ticks a second


def thread_ticks(pid: int | str = "self") -> dict[int, tuple[str, int]]:
    """``{tid: (comm, user + system ticks)}`` of every thread of ``pid`` (``/proc``; threads
    that end while read are left out)."""
    out: dict[int, tuple[str, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            st = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        comm = st[st.index("(") + 1 : st.rindex(")")]
        f = st.rsplit(")", 1)[1].split()
        out[int(tid)] = (comm, int(f[11]) + int(f[12]))
    return out


def collector_threads_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's collector threads, by name.

    The ``argus-*`` Python threads by their CPU clocks (exact) and librdkafka's ``rdk:*``
    threads from ``/proc`` (ticks, 10 ms at 100 Hz); the ``rdk:brokerN`` threads are summed
    as ``rdk:broker*``.
    """
    out: dict[str, float] = defaultdict(float)
    for t in threading.enumerate():
        if t.name.startswith("argus-") and t.ident is not None:
            try:
                out[t.name] += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except (OSError, ValueError):
                continue
    for comm, ticks in thread_ticks().values():
        if comm.startswith("rdk:"):
            out["rdk:broker*" if comm.startswith("rdk:broker") else comm] += ticks / TICK
    return dict(out)
