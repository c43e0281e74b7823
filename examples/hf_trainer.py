"""A tiny GPT-2 (random weights from a config) trained by ``transformers.Trainer`` with DDP
over gloo on CPU, collectors on through ``ArgusCallback``.

    python -m examples.hf_trainer --steps 40 --world-size 2 --straggler-rank 1 --slowdown 4

On ``--straggler-rank R`` every forward of GPT-2's first block MLP is followed by a sleep of
``(slowdown - 1)`` times its own duration (a slow device, seen from the host), so rank R's
``forward`` phase is slower. ``--no-collect`` runs without the callback. Rank 0 writes a JSON
summary (seconds, steps/s, collector cost) to ``--out``; ``--schedule`` is the overhead
bench's hook (``examples/_common.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

import torch

from examples._common import BenchHook, launch, parse_args, slow_down


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.x[i], "labels": self.x[i]}


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=args.vocab,
        n_positions=args.seq,
        n_embd=args.d_model,
        n_layer=args.layers,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(cfg)
    if rank == args.straggler_rank:
        slow_down(model.transformer.h[0].mlp, args.slowdown)

    bench = BenchHook(args)

    class Bench(TrainerCallback):  # before ArgusCallback: it sees each step before argus does
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            bench.step()

        def on_train_end(self, *a: Any, **k: Any) -> None:
            bench.finish()

    callbacks: list[Any] = [Bench()]
    if args.collect:
        from argus.collectors.integrations.hf import ArgusCallback

        callbacks.append(
            ArgusCallback(job=args.job, kernels_period_steps=args.kernels_period_steps)
        )
    targs = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="argus-hf-"),
        use_cpu=True,
        ddp_backend="gloo",
        max_steps=args.steps,
        per_device_train_batch_size=args.batch,
        learning_rate=3e-4,
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    data = RandomTokens(args.steps * args.batch * world, args.seq, args.vocab, seed=1)
    trainer = Trainer(model=model, args=targs, train_dataset=data, callbacks=callbacks)
    trainer.train()
    bench.write(rank, world)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    return launch(
        train,
        parse_args(__doc__, "hf-demo", argv, vocab=512, d_model=64, layers=2, seq=64, batch=8),
    )


if __name__ == "__main__":
    sys.exit(main())
