"""A small MLP sharded with FSDP2 (``fully_shard``), 2 ranks over gloo on CPU, collectors on
through ``instrument_fsdp`` (all-gathers and reduce-scatters) and ``ac.instrument``
(forward, backward, optimizer).

    python -m examples.fsdp2_mlp --steps 40 --straggler-rank 1 --slowdown 4

On ``--straggler-rank R`` the forward pass is followed by a sleep of ``(slowdown - 1)`` times
its own duration (a forward hook on the root module), so rank R's ``forward`` is slower and
its peer waits in the next collective.
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

from examples.hf_trainer import _slow_hook, free_port
from examples.threadcpu import collector_threads_cpu


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.fsdp import fully_shard

    import argus.collectors as ac

    torch.manual_seed(0)
    d = args.d_model
    model = nn.Sequential(
        *[
            nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            for _ in range(args.layers)
        ]
    )
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    if rank == args.straggler_rank and args.slowdown > 1.0:
        pre, post = _slow_hook(args.slowdown)
        model.register_forward_pre_hook(pre)
        model.register_forward_hook(post)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    col: Any = None
    if args.collect:
        from argus.collectors.integrations.fsdp import instrument_fsdp

        instrument_fsdp(model, job=args.job, kernels_period_steps=args.kernels_period_steps)
        ac.instrument(model=model, optimizer=opt, auto_step=False)
        col = ac.active()
    g = torch.Generator().manual_seed(rank)
    t0 = time.perf_counter()
    for i in range(args.steps):
        x = torch.randn(args.batch, d, generator=g)
        with ac.step(i):
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - t0
    summary = {
        "rank": rank,
        "steps": args.steps,
        "seconds": seconds,
        "collector": {
            "train_thread_s": col.overhead_total_ns / 1e9,
            "bg_s": sum(collector_threads_cpu().values()),
        }
        if col is not None
        else {},
    }
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
    p.add_argument("--job", default=f"fsdp2-demo-{os.getpid()}")
    p.add_argument("--straggler-rank", type=int, default=-1)
    p.add_argument("--slowdown", type=float, default=1.0)
    p.add_argument("--no-collect", dest="collect", action="store_false")
    p.add_argument("--kernels-period-steps", type=int, default=50)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    mp.spawn(_spawned, args=(args.world_size, free_port(), args), nprocs=args.world_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
