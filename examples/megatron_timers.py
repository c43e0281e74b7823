"""Megatron-core's named timers (``megatron.core.timers.Timers``, the real class) around a
plain PyTorch training step, 2 ranks over gloo on CPU, mapped to argus phases by
``instrument_timers``.

    python -m examples.megatron_timers --steps 40 --straggler-rank 1 --slowdown 4

Megatron's own schedules and models need CUDA (and Transformer Engine or Apex for most of
them), so they are not run here: this is the training step Megatron times, written with
torch (``forward-compute``, ``backward-compute``, ``all-grads-sync`` as an explicit
gradient all-reduce, ``optimizer``), timed by Megatron's timers. ``Timer.start``/``stop``
call ``torch.cuda.synchronize()``, which raises without a GPU: on a CPU-only torch it is
replaced by a no-op here. On ``--straggler-rank R`` the backward pass is followed by a
sleep of ``(slowdown - 1)`` times its own duration.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from examples.hf_trainer import free_port
from examples.threadcpu import collector_threads_cpu


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda *a, **k: None
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from megatron.core.timers import Timers

    timers = Timers(log_level=2, log_option="minmax")
    col: Any = None
    if args.collect:
        import argus.collectors as ac
        from argus.collectors.integrations.megatron import instrument_timers

        instrument_timers(timers, job=args.job, kernels_period_steps=args.kernels_period_steps)
        col = ac.active()
    torch.manual_seed(0)
    d = args.d_model
    model = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    slow = args.slowdown if rank == args.straggler_rank else 1.0
    t0 = time.perf_counter()
    for _ in range(args.steps):
        x = torch.randn(args.batch, d, generator=g)
        timers("forward-compute", log_level=2).start()
        loss = model(x).pow(2).mean()
        timers("forward-compute").stop()
        timers("backward-compute", log_level=2).start()
        tb = time.perf_counter()
        loss.backward()
        if slow > 1.0:
            time.sleep((slow - 1.0) * (time.perf_counter() - tb))
        timers("backward-compute").stop()
        timers("all-grads-sync", log_level=1).start()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(world)
        timers("all-grads-sync").stop()
        timers("optimizer", log_level=1).start()
        opt.step()
        opt.zero_grad(set_to_none=True)
        timers("optimizer").stop()
    seconds = time.perf_counter() - t0
    summary = {
        "rank": rank,
        "steps": args.steps,
        "seconds": seconds,
        "megatron_elapsed_s": {
            n: timers(n).elapsed(reset=False)
            for n in ("forward-compute", "backward-compute", "all-grads-sync", "optimizer")
        },
        "collector": {
            "train_thread_s": col.overhead_total_ns / 1e9,
            "bg_s": sum(collector_threads_cpu().values()),
        }
        if col is not None
        else {},
    }
    if col is not None:
        import argus.collectors as ac

        ac.shutdown()
    if args.out:
        Path(f"{args.out}.rank{rank}").write_text(json.dumps(summary))
    dist.barrier()
    dist.destroy_process_group()


def _spawned(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    train(rank, world, args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--job", default=f"megatron-demo-{os.getpid()}")
    p.add_argument("--straggler-rank", type=int, default=-1)
    p.add_argument("--slowdown", type=float, default=1.0)
    p.add_argument("--no-collect", dest="collect", action="store_false")
    p.add_argument("--kernels-period-steps", type=int, default=50)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    mp.spawn(_spawned, args=(args.world_size, free_port(), args), nprocs=args.world_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
