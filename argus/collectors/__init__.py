"""argus.collectors: the in-process collectors of a training rank.

Importing this package costs nothing and, until :func:`start` is called, every function is
a no-op: a training script can be instrumented unconditionally and publishes only where
argus is configured.

Typical use (see ``docs/collectors.md``)::

    import argus.collectors as ac

    ac.start(job="llama-70b-run3", model=ddp_model, optimizer=opt,
             phases={"attention": [b.attn for b in blocks], "mlp": [b.mlp for b in blocks]})
    for batch in loader:
        with ac.step():
            loss = ddp_model(batch).sum()
            loss.backward()
            opt.step()
            with ac.phase("logging", stream_kind="host"):
                ...
    ac.shutdown()

Zero code change: with ``ARGUS_JOB`` set, ``python -m argus.collectors.autorun train.py``
starts the collectors before the script and closes steps on every ``optimizer.step()``
(global optimizer hooks).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # imported lazily: importing argus.collectors must cost nothing
    from argus.collectors.config import CollectorConfig
    from argus.collectors.errors import CollectorConfigError
    from argus.collectors.runtime import Collector
    from argus.collectors.topology import Layout, Topology, group_id

__all__ = [
    "Collector",
    "CollectorConfig",
    "CollectorConfigError",
    "Layout",
    "Topology",
    "active",
    "collective",
    "group_id",
    "instrument",
    "phase",
    "shutdown",
    "start",
    "step",
    "step_begin",
    "step_end",
]

log = logging.getLogger("argus.collectors")

F = TypeVar("F", bound=Callable[..., Any])

_active: Any = None
_start_lock = threading.Lock()
# collector cost is accounted in CPU time of the training thread (immune to preemption)
_perf = time.thread_time_ns


def _after_fork_in_child() -> None:
    global _active
    if _active is not None:
        with suppress(Exception):
            _active.forked()
    _active = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def active() -> Any:
    """The running :class:`~argus.collectors.runtime.Collector`, or ``None``."""
    return _active


_LAZY = {
    "Collector": "argus.collectors.runtime",
    "CollectorConfig": "argus.collectors.config",
    "CollectorConfigError": "argus.collectors.errors",
    "Layout": "argus.collectors.topology",
    "Topology": "argus.collectors.topology",
    "group_id": "argus.collectors.topology",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'argus.collectors' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


def start(
    job: str | None = None,
    *,
    model: Any = None,
    optimizer: Any = None,
    ddp: Any = None,
    phases: Mapping[str, Iterable[Any]] | None = None,
    auto_step: bool | None = None,
    layout: Layout | None = None,
    coords: Mapping[str, int] | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    local_rank: int | None = None,
    settings: Any = None,
    env: Mapping[str, str] | None = None,
    kafka_config: dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    """Start the collectors of this process (once; a second call warns and returns the first).

    Parameters
    ----------
    job : str, optional
        Job name (else ``ARGUS_JOB`` / the ``[collectors]`` table).
    model : torch.nn.Module, optional
        Adds ``forward`` and ``backward`` phases.
    optimizer : torch.optim.Optimizer, optional
        Adds the ``optimizer`` phase (and step boundaries with ``auto_step``).
    ddp : DistributedDataParallel, optional
        Adds the ``dp_allreduce`` phase through a timing comm hook.
    phases : mapping of str to modules, optional
        Named module phases, e.g. ``{"attention": [...], "mlp": [...]}``.
    auto_step : bool, optional
        Close a step at the end of every ``optimizer.step()``; default: on when an optimizer
        is given, until the script calls :func:`step` / :func:`step_begin` itself.
    layout, coords, rank, world_size, local_rank
        Topology (see :mod:`argus.collectors.topology`); discovered when omitted.
    settings : Settings, optional
        Kafka/topic settings; loaded from file and environment when omitted.
    kafka_config : dict, optional
        librdkafka settings overriding ``settings.kafka_config()``.
    **options
        Any :class:`CollectorConfig` key (``kernels=False``, ``overhead_budget=0.005``, ...).

    Returns
    -------
    Collector

    Raises
    ------
    CollectorConfigError
        Once, here, for a bad argument, a missing or malformed job name, bad topology or
        Kafka security settings; nothing raises later. A bad value in the file or the
        environment is logged and its default used (:func:`load_collector_config`).
    """
    global _active
    with _start_lock:
        if _active is not None:
            log.warning("argus collectors already started (job %s); ignoring start()", _active.job)
            return _active
        from argus.collectors.config import load_collector_config
        from argus.collectors.errors import CollectorConfigError
        from argus.collectors.registry import ProcessEntry, register_process, unregister_process
        from argus.collectors.runtime import Collector
        from argus.collectors.topology import discover_topology
        from argus.config import ConfigError, load_settings

        try:
            if settings is None:  # a bad value logs and falls back (argus.config, lenient)
                settings = load_settings(env=env, lenient=True)
        except ConfigError as exc:
            raise CollectorConfigError(str(exc)) from None
        cfg = load_collector_config(settings, env, job=job, **options)
        topo = discover_topology(
            rank=rank,
            world_size=world_size,
            local_rank=local_rank,
            layout=layout,
            coords=coords,
            env=env,
        )
        col = Collector(cfg, settings, topo, kafka_config=kafka_config)
        _active = col
        instrument(model=model, optimizer=optimizer, ddp=ddp, phases=phases, auto_step=auto_step)
        if cfg.stacks:
            state_dir = settings.state_dir
            if register_process(
                state_dir,
                ProcessEntry(
                    cfg.job, topo.rank, topo.pid, topo.host, time.time_ns(), dict(col._groups)
                ),
            ):
                atexit.register(unregister_process, state_dir, topo.pid)
        atexit.register(shutdown)
        log.info(
            "argus collectors started: job %s rank %d/%d, kernels=%s, timer=%s",
            cfg.job,
            topo.rank,
            topo.world_size,
            getattr(col.kernel_source, "source", "off"),
            col.timer,
        )
        return col


def instrument(
    *,
    model: Any = None,
    optimizer: Any = None,
    ddp: Any = None,
    phases: Mapping[str, Iterable[Any]] | None = None,
    auto_step: bool | None = None,
) -> list[Any]:
    """Add automatic phases to the running collector (no-op when none runs).

    Returns the hook handles. See :mod:`argus.collectors.hooks`.
    """
    col = _active
    if col is None:
        return []
    from argus.collectors import hooks

    handles: list[Any] = []

    def attempt(what: str, fn: Callable[[], Any]) -> None:
        try:
            got = fn()
            if isinstance(got, list):
                handles.extend(got)
        except Exception as exc:  # never raise into the training script
            col.errors += 1
            log.warning("argus collectors: could not instrument %s: %r", what, exc)

    if model is not None:
        attempt("the model", lambda: hooks.instrument_model(col, model))
    if phases:
        attempt("the phase modules", lambda: hooks.instrument_modules(col, phases))
    if optimizer is not None:
        step_auto = auto_step if auto_step is not None else True
        attempt(
            "the optimizer",
            lambda: hooks.instrument_optimizer(col, optimizer, auto_step=step_auto),
        )
        if auto_step is not False and not col.in_step:
            col.step_begin()
    if ddp is not None:
        attempt("DDP", lambda: hooks.instrument_ddp(col, ddp))
    return handles


def shutdown(timeout_s: float = 5.0) -> None:
    """Close the open step, flush (at most ``timeout_s``) and stop. Safe to call twice."""
    global _active
    col, _active = _active, None
    if col is not None:
        col.close(timeout_s)


def step_begin(step: int | None = None) -> None:
    """Start step ``step`` (default: previous + 1); closes an open step first."""
    col = _active
    if col is not None:
        col.explicit_steps = True
        col.step_begin(step)


def step_end() -> None:
    """End the current step; its record is queued for publication."""
    col = _active
    if col is not None:
        col.step_end()


@contextmanager
def step(index: int | None = None) -> Iterator[None]:
    """Context manager around one training step."""
    step_begin(index)
    try:
        yield
    finally:
        step_end()


class phase:
    """Time a named phase of the current step; a context manager and a decorator.

    Parameters
    ----------
    name : str
        Phase name (``attention``, ``mlp``, ``dp_allreduce``, ...).
    stream_kind : str
        ``compute`` | ``comm`` | ``p2p`` | ``host``.
    stream : torch.cuda.Stream, optional
        On CUDA, the stream that runs the work (default: the current stream). Give the
        communication stream for collectives, or their time is meaningless.
    mode : str
        ``sum`` (default: durations of repeated spans add up) or ``span`` (first start to
        last end).
    """

    __slots__ = ("_col", "_start", "mode", "name", "stream", "stream_kind")

    def __init__(
        self, name: str, stream_kind: str = "compute", *, stream: Any = None, mode: str = "sum"
    ) -> None:
        self.name = name
        self.stream_kind = stream_kind
        self.stream = stream
        self.mode = mode
        self._col: Any = None
        self._start: Any = None

    def __enter__(self) -> phase:
        col = _active
        if col is not None and col.phases_on:
            t0 = _perf()
            try:
                self._start = col.mark(self.stream)
                self._col = col
            except Exception:
                col.errors += 1
            col.oh_ns += _perf() - t0
        return self

    def __exit__(self, *exc: Any) -> None:
        col, self._col = self._col, None
        if col is not None:
            t0 = _perf()
            try:
                col.add_phase(
                    self.name, self.stream_kind, self.mode, self._start, col.mark(self.stream)
                )
            except Exception:
                col.errors += 1
            col.oh_ns += _perf() - t0

    def __call__(self, fn: F) -> F:
        name, kind, stream, mode = self.name, self.stream_kind, self.stream, self.mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with phase(name, kind, stream=stream, mode=mode):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def collective(name: str, work_or_future: Any, *, kind: str = "comm") -> Any:
    """Time an async collective (a ``Work`` or a ``Future``) as phase ``name``.

    Returns a future to wait on instead of the original, e.g.
    ``ac.collective("tp_allgather", dist.all_gather(..., async_op=True)).wait()``.
    """
    col = _active
    fut = work_or_future.get_future() if hasattr(work_or_future, "get_future") else work_or_future
    if col is None:
        return fut
    from argus.collectors.hooks import collective_phase

    return collective_phase(col, name, fut, kind=kind)
