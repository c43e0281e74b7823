"""A tiny MLP ``LightningModule`` (random weights) trained by ``pytorch_lightning.Trainer``
with strategy ``ddp`` over gloo on CPU, collectors on through ``ArgusCallback``.

    python -m examples.lightning_ddp --steps 40 --world-size 2 --straggler-rank 1 --slowdown 4

The processes are started here (``torch.multiprocessing``) with the torchelastic variables,
so Lightning joins them instead of launching its own. On ``--straggler-rank R`` every
``training_step`` is followed by a sleep of ``(slowdown - 1)`` times its own duration, so
rank R's ``forward`` phase is slower. ``--no-collect`` runs without the callback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp
from torch import nn

from examples.hf_trainer import free_port
from examples.threadcpu import collector_threads_cpu


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
            if slowdown > 1.0:
                time.sleep((slowdown - 1.0) * (time.perf_counter() - t0))
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    return TinyMLP()


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    import pytorch_lightning as pl

    torch.manual_seed(0)
    slow = args.slowdown if rank == args.straggler_rank else 1.0
    module = _module(args, slow)
    g = torch.Generator().manual_seed(rank)
    n = args.steps * args.batch * world
    data = torch.utils.data.TensorDataset(
        torch.randn(n, args.d_model, generator=g), torch.randn(n, 1, generator=g)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch)
    callbacks: list[Any] = []
    col_box: dict[str, Any] = {}
    if args.collect:
        from argus.collectors.integrations.lightning import ArgusCallback

        class Keep(ArgusCallback):  # read the collector's figures before shutdown
            def on_train_end(self, trainer: Any, pl_module: Any) -> None:
                import argus.collectors as ac

                col = ac.active()
                if col is not None:
                    col_box.update(
                        train_thread_s=col.overhead_total_ns / 1e9,
                        bg_s=sum(collector_threads_cpu().values()),
                        steps_emitted=col.steps_emitted,
                        errors=col.errors,
                        dropped=col.producer.dropped_records,
                    )
                super().on_train_end(trainer, pl_module)

        callbacks.append(Keep(job=args.job, kernels_period_steps=args.kernels_period_steps))
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
    cpu0, t0 = time.process_time(), time.perf_counter()
    trainer.fit(module, loader)
    seconds = time.perf_counter() - t0
    summary = {
        "rank": rank,
        "world": world,
        "steps": args.steps,
        "seconds": seconds,
        "steps_per_s": args.steps / seconds,
        "cpu_s": time.process_time() - cpu0,
        "collector": col_box,
    }
    if args.out:
        Path(f"{args.out}.rank{rank}").write_text(json.dumps(summary))
        if rank == 0:
            Path(args.out).write_text(json.dumps(summary))


def _spawned(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        GROUP_RANK="0",
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
    )
    train(rank, world, args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--job", default=f"pl-demo-{os.getpid()}")
    p.add_argument("--straggler-rank", type=int, default=-1)
    p.add_argument("--slowdown", type=float, default=1.0)
    p.add_argument("--no-collect", dest="collect", action="store_false")
    p.add_argument("--kernels-period-steps", type=int, default=50)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--out", default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    mp.spawn(_spawned, args=(args.world_size, free_port(), args), nprocs=args.world_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
