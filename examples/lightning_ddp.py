"""A tiny MLP ``LightningModule`` (random weights) trained by ``pytorch_lightning.Trainer``
with strategy ``ddp`` over gloo on CPU, collectors on through ``ArgusCallback``.

    python -m examples.lightning_ddp --steps 40 --world-size 2 --straggler-rank 1 --slowdown 4

The processes are started here (``torch.multiprocessing``) with the torchelastic variables,
so Lightning joins them instead of launching its own. On ``--straggler-rank R`` every
``training_step`` is followed by a sleep of ``(slowdown - 1)`` times its own duration, so
rank R's ``forward`` phase is slower. ``--no-collect`` runs without the callback;
``--schedule`` is the overhead bench's hook (``examples/_common.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any

import torch
from torch import nn

from examples._common import BenchHook, launch, parse_args, sleep_slower


def _module(args: argparse.Namespace, slowdown: float) -> Any:
    import pytorch_lightning as pl

    class TinyMLP(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            d = args.d_model
            self.net = nn.Sequential(
                *[
                    m
                    for _ in range(args.layers)
                    for m in (nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                ]
            )
            self.head = nn.Linear(d, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            t0 = time.perf_counter()
            x, y = batch
            loss = nn.functional.mse_loss(self.head(self.net(x)), y)
            sleep_slower(t0, slowdown)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    return TinyMLP()


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    import pytorch_lightning as pl

    torch.manual_seed(0)
    module = _module(args, args.slowdown if rank == args.straggler_rank else 1.0)
    g = torch.Generator().manual_seed(rank)
    n = args.steps * args.batch * world
    data = torch.utils.data.TensorDataset(
        torch.randn(n, args.d_model, generator=g), torch.randn(n, 1, generator=g)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch)

    bench = BenchHook(args)

    class Bench(pl.Callback):  # before ArgusCallback: it sees each step before argus does
        def on_train_batch_start(self, *a: Any) -> None:
            bench.step()

        def on_train_end(self, *a: Any) -> None:
            bench.finish()

    callbacks: list[Any] = [Bench()]
    if args.collect:
        from argus.collectors.integrations.lightning import ArgusCallback

        callbacks.append(
            ArgusCallback(job=args.job, kernels_period_steps=args.kernels_period_steps)
        )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=world,
        num_nodes=1,
        strategy="ddp",
        max_steps=args.steps,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        default_root_dir=tempfile.mkdtemp(prefix="argus-pl-"),
    )
    trainer.fit(module, loader)
    bench.write(rank, world)


def main(argv: list[str] | None = None) -> int:
    return launch(train, parse_args(__doc__, "pl-demo", argv, d_model=512, layers=2, batch=64))


if __name__ == "__main__":
    sys.exit(main())
