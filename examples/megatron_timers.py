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
sleep of ``(slowdown - 1)`` times its own duration. ``--schedule`` is the overhead bench's
hook (``examples/_common.py``).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

from examples._common import BenchHook, launch, parse_args, sleep_slower


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    if not torch.cuda.is_available():
        torch.cuda.synchronize = lambda *a, **k: None
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from megatron.core.timers import Timers

    import argus.collectors as ac

    timers = Timers(log_level=2, log_option="minmax")
    if args.collect:
        from argus.collectors.integrations.megatron import instrument_timers

        instrument_timers(timers, job=args.job, kernels_period_steps=args.kernels_period_steps)
    torch.manual_seed(0)
    d = args.d_model
    model = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(rank)
    slow = args.slowdown if rank == args.straggler_rank else 1.0
    bench = BenchHook(args)
    for _ in range(args.steps):
        bench.step()
        x = torch.randn(args.batch, d, generator=g)
        timers("forward-compute", log_level=2).start()
        loss = model(x).pow(2).mean()
        timers("forward-compute").stop()
        timers("backward-compute", log_level=2).start()
        tb = time.perf_counter()
        loss.backward()
        sleep_slower(tb, slow)
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
        timers("optimizer").stop()  # with instrument_timers: also the end of the argus step
    bench.finish()
    elapsed = {
        n: timers(n).elapsed(reset=False)
        for n in ("forward-compute", "backward-compute", "all-grads-sync", "optimizer")
    }
    ac.shutdown()
    bench.write(rank, world, megatron_elapsed_s=elapsed)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    return launch(train, parse_args(__doc__, "megatron-demo", argv, d_model=256, batch=64))


if __name__ == "__main__":
    sys.exit(main())
