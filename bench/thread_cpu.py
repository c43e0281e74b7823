"""Where a collector's background CPU goes: per-thread CPU of the CPU DDP demo's ranks.

    .venv/bin/python bench/thread_cpu.py --world-size 2 --modes off,phases --measure-s 60

For each mode, one demo job (``examples/ddp_transformer.py``, ``--schedule MODE:N``) runs on
the configured broker; after ``--warm-s`` seconds the tool maps every rank's thread ids to
names (Python thread names from one ``py-spy dump``, else the kernel's ``comm``: librdkafka's
``rdk:*``, torch's and gloo's threads), reads ``/proc/<pid>/task/<tid>/stat`` (user + system
ticks), waits ``--measure-s`` seconds and reads them again. Printed per thread name, summed
over ranks: CPU ms per second of wall time and the share of the ranks' CPU; plus the
training steps done (from the step records' count on the raw steps topic is not needed: the
main thread's share is the training). Modes run one after another, not interleaved: compare
them on a quiet machine, and run it under ``flock /tmp/argus-bench.lock``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.collectors.stacks import find_py_spy  # noqa: E402
from argus.config import load_settings  # noqa: E402
from argus.kafka.admin import create_topics, delete_topics  # noqa: E402
from examples.threadcpu import TICK, thread_ticks  # noqa: E402

_THREAD_RE = re.compile(r'^Thread (\d+) \([^)]*\): "(.*)"', re.M)


def children(pid: int) -> list[int]:
    """Direct child pids of ``pid``."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            out += [int(k) for k in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
        except OSError:
            continue
    return out


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def python_thread_names(pid: int, py_spy: str | None) -> dict[int, str]:
    """``{tid: Python thread name}`` from one non-blocking py-spy dump (empty without py-spy)."""
    if py_spy is None:
        return {}
    try:
        txt = subprocess.run(
            [py_spy, "dump", "--nonblocking", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(t): n for t, n in _THREAD_RE.findall(txt)}


def measure(mode: str, args: argparse.Namespace, prefix: str) -> dict[str, float]:
    """Run one demo job in ``mode``; returns CPU seconds per thread name (all ranks) and
    ``_wall`` (measured seconds)."""
    env = {**os.environ, "ARGUS_TOPIC_PREFIX": prefix}
    steps = 100_000
    cmd = [
        sys.executable,
        "-m",
        "examples.ddp_transformer",
        "--world-size",
        str(args.world_size),
        "--schedule",
        f"{mode}:{steps}",
        "--job",
        f"tcpu-{mode}-{uuid.uuid4().hex[:6]}",
        "--log-every",
        "0",
        "--flush-s",
        "1",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        time.sleep(args.warm_s)
        ranks = [c for c in children(proc.pid) if b"spawn_main" in _cmdline(c)]
        names: dict[int, str] = {}
        for r in ranks:
            names.update(python_thread_names(r, find_py_spy()))
        t0 = time.monotonic()
        before = {r: thread_ticks(r) for r in ranks}
        time.sleep(args.measure_s)
        after = {r: thread_ticks(r) for r in ranks}
        wall = time.monotonic() - t0
    finally:
        proc.kill()
        for r in children(proc.pid):
            os.kill(r, 9)
        proc.wait()
    cpu: dict[str, float] = defaultdict(float)
    for r in ranks:
        for tid, (comm, ticks) in after[r].items():
            name = "MainThread" if tid == r else names.get(tid, comm)
            name = re.sub(r"\d+$", "N", name) if name.startswith("rdk:broker") else name
            cpu[name] += (ticks - before[r].get(tid, (comm, 0))[1]) / TICK
    cpu["_wall"] = wall
    return dict(cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--modes", default="off,phases", help="comma-separated demo modes")
    ap.add_argument("--warm-s", type=float, default=15.0)
    ap.add_argument("--measure-s", type=float, default=60.0)
    args = ap.parse_args()
    settings = load_settings()
    prefix = f"tcpu{uuid.uuid4().hex[:8]}.argus"
    created = create_topics(settings, prefix=prefix, partitions=1)
    try:
        for mode in args.modes.split(","):
            load0 = Path("/proc/loadavg").read_text().split()[0]
            cpu = measure(mode, args, prefix)
            wall = cpu.pop("_wall")
            total = sum(cpu.values())
            load1 = Path("/proc/loadavg").read_text().split()[0]
            print(
                f"\n[{mode}] {args.world_size} ranks, {wall:.0f} s, ranks' CPU {total / wall:.3f} "
                f"cores, load {load0} -> {load1}"
            )
            print(f"  {'thread':28s} {'CPU ms/s':>9s} {'share':>8s}")
            for name, s in sorted(cpu.items(), key=lambda kv: -kv[1]):
                if s > 0:
                    print(f"  {name:28s} {1e3 * s / wall:9.2f} {100 * s / total:7.2f}%")
    finally:
        delete_topics(settings, created)
    return 0


if __name__ == "__main__":
    sys.exit(main())
