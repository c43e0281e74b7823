"""Hugging Face ``transformers`` Trainer: a ``TrainerCallback`` that drives the collectors.

    from argus.collectors.integrations.hf import ArgusCallback
    trainer = Trainer(model=model, args=args, ..., callbacks=[ArgusCallback(job="gpt2-ft")])

What it reads (``docs/integrations.md``):

* steps: ``on_step_begin`` opens step ``state.global_step``, ``on_step_end`` closes it (one
  optimizer update; micro-batches of gradient accumulation fall inside it);
* ``forward`` / ``backward``: hooks on the Trainer's model (:func:`~argus.collectors.hooks.
  instrument_model`, summed over micro-batches);
* ``optimizer``: ``on_pre_optimizer_step`` to ``on_optimizer_step``;
* ``dp_allreduce``: the timing DDP comm hook (:func:`~argus.collectors.hooks.instrument_ddp`)
  on the ``DistributedDataParallel`` the Trainer wrapped the model in (found once at
  ``on_train_begin``: the Trainer hands callbacks the unwrapped model).

Requires ``transformers`` (extra ``hf``); imported only with this module.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

from transformers import TrainerCallback

import argus.collectors as ac
from argus.collectors.integrations import CallbackState

__all__ = ["ArgusCallback", "find_ddp"]

log = logging.getLogger("argus.collectors.integrations")


def find_ddp(model: Any) -> Any:
    """The ``DistributedDataParallel`` wrapping ``model``, or ``None``.

    One pass over the objects the garbage collector tracks (``gc.get_objects()``), once per
    training run: the Trainer hands callbacks the unwrapped model, not its DDP wrapper.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp_types: dict[type, bool] = {}
    for obj in gc.get_objects():
        t = type(obj)  # not isinstance: that reads __class__, which lazy proxies compute
        is_ddp = ddp_types.get(t)
        if is_ddp is None:
            is_ddp = ddp_types[t] = issubclass(t, DDP)
        if is_ddp and obj.module is model:
            return obj
    return None


class ArgusCallback(CallbackState, TrainerCallback):
    """Collectors for a ``transformers.Trainer`` run.

    Parameters
    ----------
    job : str, optional
        Job name (else ``ARGUS_JOB`` / ``argus.toml``). Ignored when collectors already run.
    phases : mapping or callable, optional
        Named module phases (``{"mlp": [...]}``), or a function of the model returning them,
        e.g. ``lambda m: {"mlp": [b.mlp for b in m.transformer.h]}``.
    ddp : bool
        Time the gradient all-reduce through a DDP comm hook (default on). Turn off when you
        register your own comm hook (DDP takes one).
    **options
        Passed to :func:`argus.collectors.start` (``kernels=False``, ``settings=...``).
    """

    def on_train_begin(
        self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any
    ) -> None:
        self._start(model)
        if model is None:
            return
        self._handles += ac.instrument(model=model)
        if self.ddp:
            ddp = find_ddp(model)
            if ddp is not None:
                ac.instrument(ddp=ddp)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._clock.clear()
        ac.step_begin(state.global_step)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._clock.begin("optimizer")

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._clock.end("optimizer")

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        ac.step_end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self._finish()
