"""A tiny GPT-2 (random weights from a config) trained by ``transformers.Trainer`` with DDP
over gloo on CPU, collectors on through ``ArgusCallback``.

    python -m examples.hf_trainer --steps 40 --world-size 2 --straggler-rank 1 --slowdown 4

On ``--straggler-rank R`` every forward of GPT-2's first block MLP is followed by a sleep of
``(slowdown - 1)`` times its own duration (a slow device, seen from the host), so rank R's
``forward`` phase is slower. ``--no-collect`` runs without the callback (overhead bench).
Rank 0 writes a JSON summary (seconds, steps/s, collector cost) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp

from examples.threadcpu import collector_threads_cpu


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.x[i], "labels": self.x[i]}


def _slow_hook(factor: float) -> Any:
    state: dict[str, float] = {}

    def pre(_m: Any, _a: Any) -> None:
        state["t0"] = time.perf_counter()

    def post(_m: Any, _a: Any, _o: Any) -> None:
        time.sleep((factor - 1.0) * (time.perf_counter() - state["t0"]))

    return pre, post


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

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
    if rank == args.straggler_rank and args.slowdown > 1.0:
        pre, post = _slow_hook(args.slowdown)
        mlp: Any = model.transformer.h[0].mlp
        mlp.register_forward_pre_hook(pre)
        mlp.register_forward_hook(post)
    callbacks: list[Any] = []
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
    cpu0, t0 = time.process_time(), time.perf_counter()
    col_box: dict[str, Any] = {}
    if args.collect:
        import argus.collectors as ac

        orig = callbacks[0].on_train_end

        def keep(*a: Any, **k: Any) -> None:  # read the collector's figures before shutdown
            col = ac.active()
            if col is not None:
                col_box.update(
                    train_thread_s=col.overhead_total_ns / 1e9,
                    bg_s=sum(collector_threads_cpu().values()),
                    steps_emitted=col.steps_emitted,
                    errors=col.errors,
                    dropped=col.producer.dropped_records,
                )
            orig(*a, **k)

        callbacks[0].on_train_end = keep
    trainer.train()
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
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def _spawned(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
    )
    train(rank, world, args)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--job", default=f"hf-demo-{os.getpid()}")
    p.add_argument("--straggler-rank", type=int, default=-1)
    p.add_argument("--slowdown", type=float, default=1.0)
    p.add_argument("--no-collect", dest="collect", action="store_false")
    p.add_argument("--kernels-period-steps", type=int, default=50)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--out", default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if "RANK" in os.environ and "MASTER_ADDR" in os.environ:  # torchrun
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0
    mp.spawn(_spawned, args=(args.world_size, free_port(), args), nprocs=args.world_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
