"""Automatic phases for plain PyTorch: module, autograd, optimizer and DDP comm hooks.

* ``forward``: forward pre/post hooks on the top-level module;
* named module phases (``attention``, ``mlp``, ...): forward pre/post hooks on the modules
  you name, summed over their calls in a step;
* ``backward``: from the moment autograd reaches the model output (a pre-hook on the
  output's ``grad_fn``, registered in the forward hook) to the moment every parameter's
  gradient is computed (``torch.autograd.graph.register_multi_grad_hook``, mode ``all``);
* ``optimizer``: ``Optimizer.register_step_pre_hook`` / ``register_step_post_hook``; with
  ``auto_step`` the post hook also closes the step and opens the next;
* ``dp_allreduce`` (stream kind ``comm``): a DDP communication hook that wraps the default
  all-reduce and times each bucket from its launch to the completion of its future; the
  phase spans first launch to last completion. On CUDA the end mark is recorded inside the
  future's callback, where the current stream waits on the NCCL stream, so it is timed on
  the stream that really ran the collective; the start mark is recorded on the compute
  stream when the bucket is handed to NCCL (the NCCL stream cannot start earlier).

Every hook is wrapped: an exception is counted in the collector's ``errors`` and swallowed,
and the hook's own time is charged to the step's overhead.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "collective_phase",
    "instrument_ddp",
    "instrument_model",
    "instrument_modules",
    "instrument_optimizer",
]

# collector cost is accounted in CPU time of the training thread (immune to preemption)
_perf = time.thread_time_ns


def instrument_modules(
    col: Any, phases: Mapping[str, Iterable[Any]], *, stream_kind: str = "compute"
) -> list[Any]:
    """Time every forward call of the given modules as phase ``name`` (durations summed).

    Returns the hook handles (``.remove()`` them to undo).
    """
    handles = []
    for name, mods in phases.items():
        for mod in mods:
            handles.extend(_time_forward(col, mod, name, stream_kind))
    return handles


def _time_forward(col: Any, mod: Any, name: str, kind: str) -> list[Any]:
    starts: list[Any] = []

    def pre(_m: Any, _args: Any) -> None:
        t0 = _perf()
        try:
            if col.phases_on:
                starts.append(col.mark())
        except Exception:
            col.errors += 1
        col.oh_ns += _perf() - t0

    def post(_m: Any, _args: Any, _out: Any) -> None:
        t0 = _perf()
        try:
            if starts:
                col.add_phase(name, kind, "sum", starts.pop(), col.mark())
        except Exception:
            col.errors += 1
        col.oh_ns += _perf() - t0

    return [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]


def instrument_model(
    col: Any, model: Any, *, forward: str = "forward", backward: str = "backward"
) -> list[Any]:
    """``forward`` and ``backward`` phases of ``model`` (a ``torch.nn.Module``)."""
    import torch

    handles = _time_forward(col, model, forward, "compute")
    bwd: dict[str, Any] = {}
    params = [p for p in model.parameters() if p.requires_grad]

    def on_backward_start(*_a: Any) -> None:
        t0 = _perf()
        try:
            if col.phases_on and "start" not in bwd:
                bwd["start"] = col.mark()
        except Exception:
            col.errors += 1
        col.oh_ns += _perf() - t0

    def post(_m: Any, _args: Any, out: Any) -> None:
        t0 = _perf()
        try:
            if col.phases_on and torch.is_grad_enabled():
                bwd.clear()
                t = _first_tensor(out)
                if t is not None and t.grad_fn is not None:
                    t.grad_fn.register_prehook(on_backward_start)
        except Exception:
            col.errors += 1
        col.oh_ns += _perf() - t0

    def on_grads_done(_grads: Any) -> None:
        t0 = _perf()
        try:
            start = bwd.pop("start", None)
            if start is not None:
                col.add_phase(backward, "compute", "sum", start, col.mark())
        except Exception:
            col.errors += 1
        col.oh_ns += _perf() - t0

    handles.append(model.register_forward_hook(post))
    if params:
        handles.append(
            torch.autograd.graph.register_multi_grad_hook(params, on_grads_done, mode="all")
        )
    return handles


def _first_tensor(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    if isinstance(out, dict):
        for o in out.values():
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


def instrument_optimizer(
    col: Any, optimizer: Any, *, name: str = "optimizer", auto_step: bool = False
) -> list[Any]:
    """``optimizer`` phase; with ``auto_step`` the end of ``optimizer.step()`` ends the step."""
    state: dict[str, Any] = {}

    def pre(_opt: Any, _args: Any, _kw: Any) -> None:
        t0 = _perf()
        try:
            if col.phases_on:
                state["start"] = col.mark()
        except Exception:
            col.errors += 1
        col.oh_ns += _perf() - t0

    def post(_opt: Any, _args: Any, _kw: Any) -> None:
        t0 = _perf()
        try:
            start = state.pop("start", None)
            if start is not None:
                col.add_phase(name, "compute", "sum", start, col.mark())
        except Exception:
            col.errors += 1
        col.oh_ns += _perf() - t0
        if auto_step and not col.explicit_steps:
            col.auto_stepping = True
            col.step_end()
            col.step_begin()

    return [optimizer.register_step_pre_hook(pre), optimizer.register_step_post_hook(post)]


def instrument_ddp(
    col: Any, ddp_model: Any, *, name: str = "dp_allreduce", process_group: Any = None
) -> None:
    """Register a timing DDP communication hook (the default mean all-reduce, timed).

    Must be called before the first backward pass (a DDP rule). Replaces no user hook: DDP
    allows one comm hook, so call this only when you have not registered your own (else wrap
    your hook's future with :func:`collective_phase`).
    """
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    # DDP checks the hook's annotations against GradBucket / Future[Tensor]; leave them off.
    def hook(state, bucket):
        fut = allreduce_hook(state, bucket)
        return collective_phase(col, name, fut)

    ddp_model.register_comm_hook(process_group, hook)


def collective_phase(
    col: Any, name: str, fut: Any, *, kind: str = "comm", start: Any = None
) -> Any:
    """Time a collective from now (or ``start``) to the completion of its future.

    ``fut`` is a ``torch.futures.Future`` (e.g. ``work.get_future()`` of an ``async_op``
    collective, or a DDP comm hook's future). Returns a future with the same value, to use in
    its place. Spans of one name in a step are merged first-start to last-end.
    """
    t0 = _perf()
    try:
        if not col.phases_on:
            return fut
        begin = start if start is not None else col.mark()
    except Exception:
        col.errors += 1
        return fut
    finally:
        col.oh_ns += _perf() - t0

    def done(f: Any) -> Any:
        try:
            col.add_phase(name, kind, "span", begin, col.mark())
        except Exception:
            col.errors += 1
        return f.value()

    return fut.then(done)
