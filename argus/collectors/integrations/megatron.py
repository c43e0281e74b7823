"""Megatron-style named timers -> argus phases.

    from argus.collectors.integrations.megatron import instrument_timers
    instrument_timers(get_timers(), job="gpt-175b")      # after initialize_megatron

Megatron-LM (and NeMo, Megatron-core's ``megatron.core.timers.Timers``) time the parts of a
training step with named timers, ``timers("forward-compute", log_level=2).start()`` ...
``.stop()``. :func:`instrument_timers` makes every ``timers(name)`` call return the framework's
timer wrapped so that its ``start``/``stop`` also open/close the argus phase the name maps to
(:data:`MEGATRON_PHASES`; names not in the mapping are left alone, and so is the framework's
own timing and logging; a name above the framework's log level, for which it hands out its
``DummyTimer``, is still timed by argus). With
``auto_step`` (default) the end of the ``optimizer`` timer closes the step and opens the
next, so no other line is needed; else wrap each iteration in ``argus.collectors.step(i)``.

Timers never made by ``timers(name)`` (a timer object kept from before instrumenting) are not
seen. Megatron's ``Timer`` calls ``torch.cuda.synchronize()`` at every start and stop, so
these phases are host spans that already include the device work (timer ``cpu``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from argus.collectors.integrations import PhaseClock, ensure_started

__all__ = ["MEGATRON_PHASES", "instrument_timers"]

#: Megatron timer name -> (argus phase, stream kind). Phase names route to comparison groups
#: by the detectors' rules (docs/detectors.md): ``pp_*`` to the pipeline chain, ``tp_*`` to
#: the TP group, ``dp_*`` and compute phases to the DP replicas.
MEGATRON_PHASES: dict[str, tuple[str, str]] = {
    "batch-generator": ("data_load", "host"),
    "forward-compute": ("forward", "compute"),
    "backward-compute": ("backward", "compute"),
    "forward-recv": ("pp_recv_forward", "p2p"),
    "forward-send": ("pp_send_forward", "p2p"),
    "backward-recv": ("pp_recv_backward", "p2p"),
    "backward-send": ("pp_send_backward", "p2p"),
    "forward-send-backward-recv": ("pp_send_forward_recv_backward", "p2p"),
    "backward-send-forward-recv": ("pp_send_backward_recv_forward", "p2p"),
    "forward-backward-send-forward-backward-recv": ("pp_send_recv_interleaved", "p2p"),
    "all-grads-sync": ("dp_allreduce", "comm"),
    "params-all-gather": ("dp_allgather", "comm"),
    "embedding-grads-all-reduce": ("pp_embedding_grads_allreduce", "comm"),
    "layernorm-grads-all-reduce": ("tp_layernorm_grads_allreduce", "comm"),
    "optimizer": ("optimizer", "compute"),
    "optimizer-copy-to-main-grad": ("optimizer_copy_to_main_grad", "compute"),
    "optimizer-unscale-and-check-inf": ("optimizer_unscale_and_check_inf", "compute"),
    "optimizer-clip-main-grad": ("optimizer_clip_main_grad", "compute"),
    "optimizer-count-zeros": ("optimizer_count_zeros", "compute"),
    "optimizer-inner-step": ("optimizer_inner_step", "compute"),
    "optimizer-copy-main-to-model-params": ("optimizer_copy_main_to_model_params", "compute"),
}


class _PhaseTimer:
    """The framework's timer, whose ``start``/``stop`` also time an argus phase."""

    def __init__(self, inner: Any, phase: str, kind: str, on_stop: Any) -> None:
        self._inner = inner
        self._phase = phase
        self._kind = kind
        self._clock = PhaseClock()
        self._on_stop = on_stop

    def start(self, *args: Any, **kwargs: Any) -> Any:
        out = self._inner.start(*args, **kwargs)
        self._clock.begin(self._phase)  # after the framework's sync/barrier: the work itself
        return out

    def stop(self, *args: Any, **kwargs: Any) -> Any:
        out = self._inner.stop(*args, **kwargs)
        self._clock.end(self._phase, self._kind)
        if self._on_stop is not None:
            self._on_stop()
        return out

    def __getattr__(self, name: str) -> Any:  # elapsed, reset, active_time, ...
        return getattr(self._inner, name)


def instrument_timers(
    timers: Any,
    job: str | None = None,
    *,
    mapping: Mapping[str, tuple[str, str]] | None = None,
    auto_step: bool = True,
    step_timer: str = "optimizer",
    first_step: int = 0,
    **options: Any,
) -> Any:
    """Map ``timers``' named timers to argus phases (starting the collectors if none run).

    Parameters
    ----------
    timers : megatron.core.timers.Timers (or any object called as ``timers(name, log_level)``)
        Its class is swapped, on this instance only, for a subclass whose ``__call__`` wraps
        the timers it returns.
    job : str, optional
        Job name for :func:`argus.collectors.start`.
    mapping : mapping, optional
        Timer name -> (phase, stream kind); default :data:`MEGATRON_PHASES`.
    auto_step : bool
        Close the step at each stop of ``step_timer`` and open the next (steps numbered from
        ``first_step``).
    **options
        Passed to :func:`argus.collectors.start`.

    Returns
    -------
    The same ``timers`` object.
    """
    col = ensure_started(job, {"auto_step": False, **options})[0]
    names = dict(MEGATRON_PHASES if mapping is None else mapping)
    wrapped: dict[str, _PhaseTimer] = {}

    def next_step() -> None:
        # as optimizer auto-steps do (hooks.instrument_optimizer): the step open after the
        # last iteration is dropped at shutdown, and ac.step() in the script takes over
        if col.explicit_steps:
            return
        col.auto_stepping = True
        col.step_end()
        col.step_begin()

    base = type(timers)

    def call(self: Any, name: str, log_level: int | None = None) -> Any:
        inner = base.__call__(self, name, log_level)
        spec = names.get(name)
        if spec is None:
            return inner
        w = wrapped.get(name)
        if w is None or w._inner is not inner:
            on_stop = next_step if auto_step and name == step_timer else None
            w = wrapped[name] = _PhaseTimer(inner, spec[0], spec[1], on_stop)
        return w

    timers.__class__ = type(f"Argus{base.__name__}", (base,), {"__call__": call})
    if auto_step and not col.in_step:
        col.step_begin(first_step)
    return timers
