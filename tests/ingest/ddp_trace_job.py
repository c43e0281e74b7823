"""A CPU DDP job over gloo that writes real torch.profiler (Kineto) traces, one per rank.

``python tests/ingest/ddp_trace_job.py OUT WORLD SLOW_RANK [STEPS] [PORT]``: a tiny MLP,
randomly initialised; rank SLOW_RANK sleeps 30 ms inside its model's forward (under DDP's
``DistributedDataParallel.forward`` annotation), so every other rank waits in the gradient
all-reduce. ``tensorboard_trace_handler`` writes the traces (``distributedInfo`` included).
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler


class Tiny(torch.nn.Module):
    def __init__(self, slow: bool) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64)
        )
        self.slow = slow

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.slow:
            time.sleep(0.03)
        return self.net(x)


def run(rank: int, world: int, out: str, slow_rank: int, steps: int, port: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    ddp = torch.nn.parallel.DistributedDataParallel(Tiny(rank == slow_rank))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    sched = schedule(wait=1, warmup=1, active=steps)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=tensorboard_trace_handler(out, use_gzip=rank % 2 == 1),
    ) as prof:
        for _ in range(steps + 2):
            loss = ddp(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, world, slow = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    port = int(sys.argv[5]) if len(sys.argv) > 5 else 29531
    mp.start_processes(run, args=(world, out, slow, steps, port), nprocs=world, start_method="fork")
