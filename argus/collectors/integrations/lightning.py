"""PyTorch Lightning: a ``Callback`` that drives the collectors.

    from argus.collectors.integrations.lightning import ArgusCallback
    trainer = pl.Trainer(strategy="ddp", ..., callbacks=[ArgusCallback(job="lit-run")])

What it reads (``docs/integrations.md``):

* rank and world size: ``trainer.global_rank`` / ``trainer.world_size`` (the strategy's);
* steps: ``on_train_batch_start`` opens step ``trainer.global_step``, ``on_train_batch_end``
  closes it once the optimizer stepped (accumulated micro-batches stay in one step);
* ``forward``: ``on_train_batch_start`` to ``on_before_backward`` (your ``training_step``);
* ``backward``: ``on_before_backward`` to the moment every parameter's gradient is computed
  (``register_multi_grad_hook``), else ``on_after_backward``;
* ``optimizer``: ``on_before_optimizer_step`` to the end of the torch optimizer's ``step``
  (its step post-hook; Lightning runs the closure inside ``step``, so a pre-hook would
  cover forward and backward too);
* ``dp_allreduce``: the timing DDP comm hook on ``trainer.strategy.model`` when it is a
  ``DistributedDataParallel`` (strategy ``ddp``; skipped, with a log line, when you gave
  the strategy your own ``ddp_comm_hook``).

Works with ``lightning`` (``lightning.pytorch``) or ``pytorch_lightning`` (extra
``lightning``), whichever is installed; imported only with this module.
"""

from __future__ import annotations

import logging
from typing import Any

import argus.collectors as ac
from argus.collectors.integrations import CallbackState, PhaseSpec

try:
    from lightning.pytorch import Callback
except ImportError:  # the standalone package
    from pytorch_lightning import Callback

__all__ = ["ArgusCallback"]

log = logging.getLogger("argus.collectors.integrations")


class ArgusCallback(CallbackState, Callback):
    """Collectors for a Lightning ``Trainer.fit`` run.

    Parameters
    ----------
    job : str, optional
        Job name (else ``ARGUS_JOB`` / ``argus.toml``). Ignored when collectors already run.
    phases : mapping or callable, optional
        Named module phases, or a function of the ``LightningModule`` returning them.
    ddp : bool
        Time the gradient all-reduce through a DDP comm hook (default on).
    **options
        Passed to :func:`argus.collectors.start`.
    """

    def __init__(
        self,
        job: str | None = None,
        *,
        phases: PhaseSpec | None = None,
        ddp: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(job, phases=phases, ddp=ddp, **options)
        self._step_at_begin: int | None = None
        self._bwd_done = False

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        col = self._start(pl_module, rank=trainer.global_rank, world_size=trainer.world_size)
        try:
            import torch

            params = [p for p in pl_module.parameters() if p.requires_grad]
            if params:
                self._handles.append(
                    torch.autograd.graph.register_multi_grad_hook(
                        params, self._grads_done, mode="all"
                    )
                )
            for opt in trainer.optimizers:
                self._handles.append(opt.register_step_post_hook(self._optimizer_done))
        except Exception as exc:  # never raise into training
            col.errors += 1
            log.warning("argus collectors: could not hook the Lightning module: %r", exc)
        model = getattr(trainer.strategy, "model", None)
        if self.ddp and model is not None:
            from torch.nn.parallel import DistributedDataParallel as DDP

            if isinstance(model, DDP):
                ac.instrument(ddp=model)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        col = ac.active()
        if col is not None and not col.in_step:
            self._clock.clear()
            ac.step_begin(trainer.global_step)
            self._step_at_begin = trainer.global_step
        self._clock.begin("forward")

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._clock.end("forward")
        self._bwd_done = False
        self._clock.begin("backward")

    def _grads_done(self, _grads: Any) -> None:
        self._bwd_done = True
        self._clock.end("backward")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if not self._bwd_done:
            self._clock.end("backward")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._clock.begin("optimizer")

    def _optimizer_done(self, _opt: Any, _args: Any, _kw: Any) -> None:
        self._clock.end("optimizer")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step != self._step_at_begin:  # the optimizer stepped
            ac.step_end()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish()
