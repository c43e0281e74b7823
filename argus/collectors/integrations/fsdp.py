"""PyTorch FSDP2 (``fully_shard``): all-gathers and reduce-scatters as collective phases.

    from argus.collectors.integrations.fsdp import instrument_fsdp
    instrument_fsdp(model, job="llama-fsdp")              # after fully_shard(...)

Every ``FSDPModule`` inside ``model`` (``model`` included) gets FSDP's default all-gather and
reduce-scatter wrapped in timing ones (``FSDPModule.set_custom_all_gather`` /
``set_custom_reduce_scatter``, torch >= 2.8): phases ``fsdp_allgather`` and
``fsdp_reducescatter`` (stream kind ``comm``, first start to last end of a step). FSDP calls
them with its all-gather / reduce-scatter stream current, so on CUDA the marks are recorded
on the stream that runs the collective; an ``async_op`` call is timed to the completion of
its ``Work``. ``forward``/``backward``/``optimizer`` come from ``ac.instrument(model=...,
optimizer=...)`` as for any model; steps from ``ac.step`` or the optimizer (``auto_step``).
"""

from __future__ import annotations

from typing import Any

import argus.collectors as ac
from argus.collectors.integrations import ensure_started

__all__ = ["instrument_fsdp"]


class _Timed:
    """A FSDP comm (``AllGather``/``ReduceScatter``) whose calls time an argus phase."""

    def __init__(self, inner: Any, phase: str) -> None:
        self._inner = inner
        self._phase = phase

    def allocate(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner.allocate(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        col = ac.active()
        if col is None or not col.phases_on:
            return self._inner(*args, **kwargs)
        try:
            start = col.mark()
        except Exception:
            col.errors += 1
            return self._inner(*args, **kwargs)
        work = self._inner(*args, **kwargs)
        try:
            if work is not None and hasattr(work, "get_future"):
                from argus.collectors.hooks import collective_phase

                collective_phase(col, self._phase, work.get_future(), start=start)
            else:
                col.add_phase(self._phase, "comm", "span", start, col.mark())
        except Exception:
            col.errors += 1
        return work


def instrument_fsdp(
    model: Any,
    job: str | None = None,
    *,
    allgather: str = "fsdp_allgather",
    reducescatter: str = "fsdp_reducescatter",
    **options: Any,
) -> int:
    """Time the all-gathers and reduce-scatters of every FSDP2 module in ``model``.

    Starts the collectors (``job``, ``options``) if none run. Returns the number of FSDP
    modules instrumented (0: ``model`` holds none, nothing changed).
    """
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    ensure_started(job, options)
    n = 0
    for mod in model.modules():
        if isinstance(mod, FSDPModule):
            ag: Any = _Timed(DefaultAllGather(), allgather)
            rs: Any = _Timed(DefaultReduceScatter(), reducescatter)
            mod.set_custom_all_gather(ag)
            mod.set_custom_reduce_scatter(rs)
            n += 1
    return n
