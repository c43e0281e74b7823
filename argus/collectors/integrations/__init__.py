"""Framework integrations: the collectors in two lines where users already train.

Each integration lives in its own module and imports its framework only when that module is
imported (optional extras: ``pip install "argus-trace[hf]"``, ``[lightning]``; Megatron and
FSDP2 need nothing beyond torch). They all drive the one collector of the process
(:func:`argus.collectors.start`, :mod:`argus.collectors.hooks`); none is a second collector.

Modules:

* :mod:`.hf`: ``ArgusCallback`` for the Hugging Face ``transformers`` Trainer;
* :mod:`.lightning`: ``ArgusCallback`` for PyTorch Lightning;
* :mod:`.fsdp`: ``instrument_fsdp`` for FSDP2 (``fully_shard``) all-gathers and reduce-scatters;
* :mod:`.megatron`: ``instrument_timers`` for Megatron-style named timers.

Docs: ``docs/integrations.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import argus.collectors as ac

__all__ = ["CallbackState", "PhaseClock", "PhaseSpec", "ensure_started"]

#: the clock of the integrations' own time: the monotonic clock, read in user space (vDSO).
#: The thread's CPU clock is a system call, and right after a torch op (these hooks run at
#: the end of forward, backward, a collective...) its first read cost ~5 us of CPU, cold, on
#: the 2-core bench VM: more than the few microseconds of work it measured (issue 22)
_perf = time.perf_counter_ns

#: named module phases, or a function of the model returning them
PhaseSpec = Mapping[str, Iterable[Any]] | Callable[[Any], Mapping[str, Iterable[Any]]]


def ensure_started(job: str | None, options: Mapping[str, Any]) -> tuple[Any, bool]:
    """The running collector, else one started with ``job`` and ``options``.

    Returns ``(collector, started_here)``; ``started_here`` tells the integration to shut it
    down at the end of training. Raises :class:`~argus.collectors.CollectorConfigError` (from
    :func:`argus.collectors.start`) for a bad argument, as ``start`` does.
    """
    col = ac.active()
    if col is not None:
        return col, False
    return ac.start(job, **dict(options)), True


class PhaseClock:
    """Open/close named phases of the running collector from framework callbacks.

    ``begin(name)`` marks a start, ``end(name, kind)`` adds the span ``start -> now`` as phase
    ``name`` (durations summed over a step). Errors are counted in the collector's ``errors``,
    never raised; the time spent here is charged to the step's overhead (ns, monotonic clock:
    these spans are microseconds of Python that do not block).
    """

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, Any] = {}

    def begin(self, name: str) -> None:
        col = ac.active()
        if col is None:
            return
        t0 = _perf()
        try:
            if col.phases_on:
                self._open[name] = col.mark()
        except Exception:
            col.errors += 1
        col.oh_ns += _perf() - t0

    def end(self, name: str, kind: str = "compute", mode: str = "sum") -> None:
        start = self._open.pop(name, None)
        col = ac.active()
        if col is None or start is None:
            return
        t0 = _perf()
        try:
            col.add_phase(name, kind, mode, start, col.mark())
        except Exception:
            col.errors += 1
        col.oh_ns += _perf() - t0

    def is_open(self, name: str) -> bool:
        return name in self._open

    def clear(self) -> None:
        self._open.clear()


class CallbackState:
    """What the framework callbacks share: their options, hook handles and whether they
    started the collector (then they shut it down at the end of training)."""

    def __init__(
        self,
        job: str | None = None,
        *,
        phases: PhaseSpec | None = None,
        ddp: bool = True,
        **options: Any,
    ) -> None:
        self.job = job
        self.phases = phases
        self.ddp = ddp
        self.options = options
        self._clock = PhaseClock()
        self._started_here = False
        self._handles: list[Any] = []

    def _start(self, model: Any, **defaults: Any) -> Any:
        """Start (or join) the collector; add the named module phases of ``model``."""
        col, self._started_here = ensure_started(
            self.job, {"auto_step": False, **defaults, **self.options}
        )
        phases = self.phases(model) if callable(self.phases) and model is not None else self.phases
        if phases and not callable(phases):
            self._handles += ac.instrument(phases=phases)
        return col

    def _finish(self) -> None:
        """Close the open step, remove the hooks, shut down what this callback started."""
        ac.step_end()
        for h in self._handles:
            h.remove()
        self._handles = []
        if self._started_here:
            ac.shutdown()
            self._started_here = False
