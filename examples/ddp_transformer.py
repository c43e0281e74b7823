"""A small transformer trained with DDP over gloo on CPU, collectors on.

    python -m examples.ddp_transformer --steps 100                     # 4 ranks, healthy
    python -m examples.ddp_transformer --straggler-rank 2 --slowdown 3 # rank 2's MLP 3x slower
    torchrun --nproc-per-node 4 -m examples.ddp_transformer --steps 100  # same, via torchrun

Each rank publishes one step record per step (phases ``forward``, ``attention``, ``mlp``,
``backward``, ``dp_allreduce``, ``optimizer``), duty-cycled CPU-op kernel batches and its
topology to the configured broker (default: the local one, ``argus kafka up``). Run
``argus collect stacks --job <job>`` next to it for the stacks channel.

The straggler: on ``--straggler-rank R`` every MLP forward takes ``--slowdown X`` times its
normal time. By default the extra time is slept (``--slow-mode sleep``), which is what a slow
GPU looks like from the host: the rank waits, it does not steal CPU from its peers (on a
shared 2-core machine real extra compute would slow every rank). ``--slow-mode compute``
repeats the MLP computation instead.

Bench hooks (used by ``bench/bench_overhead.py``): ``--schedule`` switches the collector
channels every block of steps on every rank at the same step, and rank 0 writes per-block
steps/s, RSS and drop counters to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import argus.collectors as ac
from examples.threadcpu import collector_threads_cpu

MODES = ("off", "all", "phases", "kernels", "stacks")


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x, attn_mask=mask, need_weights=False)[0]


class MLP(nn.Module):
    def __init__(self, d: int, slowdown: float = 1.0, slow_mode: str = "sleep") -> None:
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)
        self.slowdown = slowdown
        self.slow_mode = slow_mode

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.slowdown <= 1.0:
            return self._run(x)
        t0 = time.perf_counter()
        y = self._run(x)
        extra = (self.slowdown - 1.0) * (time.perf_counter() - t0)
        if self.slow_mode == "sleep":
            time.sleep(extra)
        else:
            for _ in range(max(1, round(self.slowdown - 1.0))):
                with torch.no_grad():
                    self._run(x)
        return y


class Block(nn.Module):
    def __init__(self, d: int, heads: int, slowdown: float, slow_mode: str) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = MLP(d, slowdown, slow_mode)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(
        self,
        vocab: int,
        d: int,
        heads: int,
        layers: int,
        seq: int,
        slowdown: float = 1.0,
        slow_mode: str = "sleep",
    ) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList(Block(d, heads, slowdown, slow_mode) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), -math.inf), 1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens) + self.pos[: tokens.shape[1]]
        n = tokens.shape[1]
        mask = self.mask[:n, :n]
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def parse_schedule(text: str | None) -> list[tuple[str, int]]:
    """``"off:50,all:50"`` -> ``[("off", 50), ("all", 50)]``."""
    if not text:
        return []
    out = []
    for part in text.split(","):
        mode, _, n = part.partition(":")
        if mode not in MODES or not n.isdigit() or int(n) < 2:
            raise SystemExit(f"bad --schedule entry {part!r}: MODE:STEPS, MODE in {MODES}")
        out.append((mode, int(n)))
    return out


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _collector_threads_cpu_s() -> float:
    """CPU seconds used so far by the collectors' own threads (see
    :func:`examples.threadcpu.collector_threads_cpu`)."""
    return sum(collector_threads_cpu().values())


def _apply_mode(col: Any, mode: str, mode_file: str | None) -> None:
    if col is not None:
        col.set_channels(phases=mode in ("all", "phases"), kernels=mode in ("all", "kernels"))
    if mode_file:
        tmp = mode_file + ".tmp"
        Path(tmp).write_text(mode)
        os.replace(tmp, mode_file)


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(1234 + rank)
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=rank, world_size=world)
    slow = args.slowdown if rank == args.straggler_rank else 1.0
    model = TinyLM(
        args.vocab, args.d_model, args.heads, args.layers, args.seq, slow, args.slow_mode
    )
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4)
    schedule = parse_schedule(args.schedule)
    col = None
    if args.collect:
        kconf = None
        if args.bootstrap:
            from argus.config import load_settings

            kconf = load_settings().kafka_config(**{"bootstrap.servers": args.bootstrap})
        col = ac.start(
            job=args.job,
            model=ddp,
            optimizer=opt,
            ddp=ddp,
            auto_step=False,
            phases={
                "attention": [b.attn for b in model.blocks],
                "mlp": [b.mlp for b in model.blocks],
            },
            kafka_config=kconf,
            kernels_period_steps=args.kernels_period_steps,
            stacks=True,
        )
    gen = torch.Generator().manual_seed(rank)
    blocks: list[dict[str, Any]] = []
    steps = sum(n for _, n in schedule) if schedule else args.steps
    bounds = []
    acc = 0
    for mode, n in schedule:
        bounds.append((acc, acc + n, mode))
        acc += n
    cur: dict[str, Any] | None = None
    t_first = time.perf_counter()
    for i in range(steps):
        if schedule:
            for lo, hi, mode in bounds:
                if i == lo:
                    _apply_mode(col, mode, args.mode_file if rank == 0 else None)
                    # every step of a block is timed (a kernel window may fall on the first)
                    now = time.perf_counter()
                    cur = {
                        "mode": mode,
                        "t0": now,
                        "last": now,
                        "durs": [],
                        "steps": 0,
                        "first": lo,
                        "n": hi - lo,
                        "cpu0": time.process_time(),
                        "bg0": _collector_threads_cpu_s(),
                        "oh0": col.overhead_total_ns if col is not None else 0,
                    }
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen)
        with ac.step(i):
            logits = ddp(tokens[:, :-1])
            loss = nn.functional.cross_entropy(
                logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1)
            )
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if cur is not None:
            now = time.perf_counter()
            cur["steps"] += 1
            cur["durs"].append(now - cur["last"])
            cur["last"] = now
            if i == cur["first"] + cur["n"] - 1:
                dt = now - cur["t0"]
                rec = {
                    "mode": cur["mode"],
                    "steps": cur["steps"],
                    "seconds": dt,
                    "steps_per_s": cur["steps"] / dt,
                    "rss_bytes": _rss_bytes(),
                    "median_step_s": statistics.median(cur["durs"]),
                    "cpu_s": time.process_time() - cur["cpu0"],
                    "collector_threads_cpu_s": _collector_threads_cpu_s() - cur["bg0"],
                    "collector_train_thread_s": (
                        (col.overhead_total_ns - cur["oh0"]) / 1e9 if col is not None else 0.0
                    ),
                }
                if col is not None:
                    rec.update(
                        dropped=col.producer.dropped_records,
                        errors=col.errors,
                        queue_depth=col.producer.queue_depth,
                        backed_off=col.budget.backed_off,
                    )
                blocks.append(rec)
                cur = None
        if rank == 0 and args.log_every and (i + 1) % args.log_every == 0:
            el = time.perf_counter() - t_first
            print(
                f"step {i + 1}/{steps} loss {loss.item():.3f} {(i + 1) / el:.2f} steps/s",
                flush=True,
            )
    total = time.perf_counter() - t_first
    stats = {}
    if col is not None:
        p = col.producer
        ac.shutdown(timeout_s=args.flush_s)
        stats = {
            "delivered": p.delivered,
            "dropped": p.dropped_records,
            "errors": col.errors,
            "steps_emitted": col.steps_emitted,
            "backoff_events": col.backoff_events,
        }
    if args.out:
        Path(f"{args.out}.rank{rank}").write_text(json.dumps(blocks))
    if rank == 0:
        summary = {
            "rank": rank,
            "world": world,
            "steps": steps,
            "seconds": total,
            "steps_per_s": steps / total,
            "blocks": blocks,
            "collector": stats,
            "straggler_rank": args.straggler_rank,
            "slowdown": args.slowdown,
        }
        if args.out:
            Path(args.out).write_text(json.dumps(summary))
        print(json.dumps({k: v for k, v in summary.items() if k != "blocks"}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def _spawned(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )
    train(rank, world, args)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--job", default=f"ddp-demo-{os.getpid()}")
    p.add_argument("--straggler-rank", type=int, default=-1)
    p.add_argument("--slowdown", type=float, default=1.0)
    p.add_argument("--slow-mode", choices=("sleep", "compute"), default="sleep")
    p.add_argument("--no-collect", dest="collect", action="store_false")
    p.add_argument("--bootstrap", default=None, help="override the broker (e.g. a closed port)")
    p.add_argument("--kernels-period-steps", type=int, default=50)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=65)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument(
        "--schedule", default=None, help=f"bench: MODE:STEPS,... (modes: {', '.join(MODES)})"
    )
    p.add_argument("--mode-file", default=None, help="bench: rank 0 writes the mode here")
    p.add_argument("--out", default=None, help="rank 0 writes a JSON summary here")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--flush-s", type=float, default=5.0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.slowdown < 1.0:
        raise SystemExit("--slowdown must be >= 1")
    if "RANK" in os.environ and "MASTER_ADDR" in os.environ:  # torchrun
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0
    if args.straggler_rank >= args.world_size:
        raise SystemExit(f"--straggler-rank must be < --world-size {args.world_size}")
    mp.spawn(_spawned, args=(args.world_size, _free_port(), args), nprocs=args.world_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
