"""A small MLP sharded with FSDP2 (``fully_shard``), 2 ranks over gloo on CPU, collectors on
through ``instrument_fsdp`` (all-gathers and reduce-scatters) and ``ac.instrument``
(forward, backward, optimizer).

    python -m examples.fsdp2_mlp --steps 40 --straggler-rank 1 --slowdown 4

On ``--straggler-rank R`` the forward pass is followed by a sleep of ``(slowdown - 1)`` times
its own duration (a forward hook on the root module), so rank R's ``forward`` is slower and
its peer waits in the next collective. ``--schedule`` is the overhead bench's hook
(``examples/_common.py``).
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist
from torch import nn

from examples._common import BenchHook, launch, parse_args, slow_down


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
    if rank == args.straggler_rank:
        slow_down(model, args.slowdown)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if args.collect:
        from argus.collectors.integrations.fsdp import instrument_fsdp

        instrument_fsdp(model, job=args.job, kernels_period_steps=args.kernels_period_steps)
        ac.instrument(model=model, optimizer=opt, auto_step=False)
    g = torch.Generator().manual_seed(rank)
    bench = BenchHook(args)
    for i in range(args.steps):
        bench.step()
        x = torch.randn(args.batch, d, generator=g)
        with ac.step(i):
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    bench.finish()
    ac.shutdown()
    bench.write(rank, world)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    return launch(train, parse_args(__doc__, "fsdp2-demo", argv, d_model=256, layers=2, batch=64))


if __name__ == "__main__":
    sys.exit(main())
