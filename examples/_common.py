"""Plumbing the framework examples share (``hf_trainer``, ``lightning_ddp``, ``megatron_timers``,
``fsdp2_mlp``): command line, starting the ranks, the slowed rank, and the bench hook.

None of it is part of an integration: each example shows its framework's own lines (the
callback, ``instrument_timers``, ``instrument_fsdp``) in full.

The bench hook (``--schedule``, used by ``bench/bench_integrations.py``): the examples call
:meth:`BenchHook.step` at the start of every training step and :meth:`BenchHook.finish` after
the last one, before the collectors shut down. At the first step of each block of the
schedule it switches the running collector's channels (``Collector.set_channels``, what an
``argus control enable/disable`` command flips) and closes the previous block's figures
(wall and CPU time, the collectors' CPU), the fields ``bench/bench_overhead.py`` reads from
the DDP demo's blocks.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from examples.threadcpu import collector_threads_cpu

#: channel modes of a ``--schedule`` block: (phases on, kernels on)
MODES: dict[str, tuple[bool, bool]] = {
    "off": (False, False),
    "all": (True, True),
    "phases": (True, False),
    "kernels": (False, True),
}


def parse_schedule(text: str | None) -> list[tuple[str, int]]:
    """``"off:10,all:10"`` -> ``[("off", 10), ("all", 10)]``; raises ``SystemExit`` naming a
    bad entry."""
    if not text:
        return []
    out = []
    for part in text.split(","):
        mode, _, n = part.partition(":")
        if mode not in MODES or not n.isdigit() or int(n) < 1:
            raise SystemExit(f"bad --schedule entry {part!r}: MODE:STEPS, MODE in {list(MODES)}")
        out.append((mode, int(n)))
    return out


def parse_args(
    doc: str | None, job: str, argv: list[str] | None, **sizes: int
) -> argparse.Namespace:
    """The examples' common options, plus one ``--<size>`` int option per keyword (model and
    batch sizes, with their defaults); with ``--schedule``, ``--steps`` is its total."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--job", default=f"{job}-{os.getpid()}")
    p.add_argument("--straggler-rank", type=int, default=-1, help="this rank is slowed")
    p.add_argument("--slowdown", type=float, default=1.0, help="by this factor")
    p.add_argument("--no-collect", dest="collect", action="store_false", help="no collectors")
    p.add_argument("--kernels-period-steps", type=int, default=50)
    p.add_argument("--out", default=None, help="JSON summary: OUT (rank 0), OUT.rankR")
    p.add_argument(
        "--schedule",
        default=None,
        help=f"bench: MODE:STEPS,... channel blocks (modes {', '.join(MODES)}); sets --steps",
    )
    for name, default in sizes.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    args = p.parse_args(argv)
    sched = parse_schedule(args.schedule)
    if sched:
        args.steps = sum(n for _, n in sched)
    return args


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawned(
    rank: int, train: Callable[[int, int, Any], None], world: int, port: int, args: Any
) -> None:
    os.environ.update(  # what torchrun sets; the frameworks read them
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        GROUP_RANK="0",
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
    )
    train(rank, world, args)


def launch(train: Callable[[int, int, Any], None], args: argparse.Namespace) -> int:
    """Run ``train(rank, world, args)`` on ``--world-size`` local processes (under
    ``torchrun``: on this one, its rank)."""
    if "RANK" in os.environ and "MASTER_ADDR" in os.environ:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return 0
    import torch.multiprocessing as mp

    mp.spawn(_spawned, args=(train, args.world_size, free_port(), args), nprocs=args.world_size)
    return 0


def sleep_slower(t0: float, factor: float) -> None:
    """Sleep ``(factor - 1)`` times the time since ``t0`` (``time.perf_counter()``, s): a
    slow device seen from the host (the rank waits, it takes no CPU from its peers)."""
    if factor > 1.0:
        time.sleep((factor - 1.0) * (time.perf_counter() - t0))


def slow_down(module: Any, factor: float) -> None:
    """Make every forward of ``module`` take ``factor`` times its time (forward hooks)."""
    t0 = [0.0]

    def pre(_m: Any, _a: Any) -> None:
        t0[0] = time.perf_counter()

    def post(_m: Any, _a: Any, _o: Any) -> None:
        sleep_slower(t0[0], factor)

    module.register_forward_pre_hook(pre)
    module.register_forward_hook(post)


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def collector_figures() -> dict[str, Any]:
    """The running collector's cost so far (training thread and background threads, s) and
    counters; empty without one."""
    import argus.collectors as ac

    col = ac.active()
    if col is None:
        return {}
    return {
        "train_thread_s": col.overhead_total_ns / 1e9,
        "bg_s": sum(collector_threads_cpu().values()),
        "steps_emitted": col.steps_emitted,
        "errors": col.errors,
        "dropped": col.producer.dropped_records,
    }


class BenchHook:
    """Step clock of a training run and the ``--schedule`` of channel blocks (module doc).

    ``step()`` at the start of every step, ``finish()`` after the last (collectors still up).
    ``blocks``: one dict per block: ``mode``, ``steps``, ``seconds`` (first step's start to
    the next block's), ``steps_per_s``, ``median_step_s``, ``step_s`` (each step, start to
    the next step's start), ``cpu_s`` (this process),
    ``collector_threads_cpu_s`` (background threads), ``collector_train_thread_s``
    (``overhead_total_ns``), ``rss_bytes``, ``dropped``, ``errors``. ``seconds``: first
    step's start to ``finish()``.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.out: str | None = args.out
        self.starts: dict[int, str] = {}
        first = 0
        for mode, n in parse_schedule(args.schedule):
            self.starts[first] = mode
            first += n
        self.steps = 0
        self.blocks: list[dict[str, Any]] = []
        self.collector: dict[str, Any] = {}
        self.seconds = 0.0
        self._t_first = 0.0
        self._cur: dict[str, Any] | None = None
        self._last = 0.0

    @staticmethod
    def _col() -> Any:
        import argus.collectors as ac

        return ac.active()

    def step(self) -> None:
        """A step starts: close the previous step (and block); open a block here."""
        now = time.perf_counter()
        if self.steps == 0:
            self._t_first = now
        if self._cur is not None:
            self._cur["durs"].append(now - self._last)
        self._last = now
        mode = self.starts.get(self.steps)
        self.steps += 1
        if mode is None:
            return
        self._close(now)
        col = self._col()
        if col is not None:
            phases, kernels = MODES[mode]
            col.set_channels(phases=phases, kernels=kernels)
        self._cur = {
            "mode": mode,
            "t0": time.perf_counter(),
            "durs": [],
            "cpu0": time.process_time(),
            "bg0": sum(collector_threads_cpu().values()),
            "oh0": col.overhead_total_ns if col is not None else 0,
        }
        self._last = self._cur["t0"]

    def _close(self, now: float) -> None:
        cur, self._cur = self._cur, None
        if cur is None or not cur["durs"]:
            return
        col = self._col()
        dt = now - cur["t0"]
        n = len(cur["durs"])
        self.blocks.append(
            {
                "mode": cur["mode"],
                "steps": n,
                "seconds": dt,
                "steps_per_s": n / dt,
                "median_step_s": statistics.median(cur["durs"]),
                "step_s": [round(d, 6) for d in cur["durs"]],
                "cpu_s": time.process_time() - cur["cpu0"],
                "collector_threads_cpu_s": sum(collector_threads_cpu().values()) - cur["bg0"],
                "collector_train_thread_s": (
                    (col.overhead_total_ns - cur["oh0"]) / 1e9 if col is not None else 0.0
                ),
                "rss_bytes": _rss_bytes(),
                "dropped": col.producer.dropped_records if col is not None else None,
                "errors": col.errors if col is not None else None,
            }
        )

    def finish(self) -> None:
        """After the last step, before the collectors shut down."""
        now = time.perf_counter()
        if self._cur is not None:
            self._cur["durs"].append(now - self._last)
        self._close(now)
        self.seconds = now - self._t_first if self.steps else 0.0
        self.collector = collector_figures()

    def write(self, rank: int, world: int, **extra: Any) -> None:
        """Rank ``rank``'s summary (steps, seconds, steps/s, collectors' figures, blocks) to
        ``OUT.rankR``, and rank 0's to ``OUT`` (``--out``; nothing without it)."""
        if not self.out:
            return
        summary = {
            "rank": rank,
            "world": world,
            "steps": self.steps,
            "seconds": self.seconds,
            "steps_per_s": self.steps / self.seconds if self.seconds else 0.0,
            "collector": self.collector,
            **extra,
            "blocks": self.blocks,
        }
        Path(f"{self.out}.rank{rank}").write_text(json.dumps(summary))
        if rank == 0:
            Path(self.out).write_text(json.dumps(summary))
