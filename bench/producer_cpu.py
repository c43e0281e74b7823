"""Background CPU of the phases channel per step record, without training around it.

    .venv/bin/python bench/producer_cpu.py --rate 22 --seconds 30

One :class:`argus.collectors.runtime.Collector` (phases on, kernels off, runtime control on,
as in the demo) on the configured broker; the main thread marks ``--rate`` steps per second
with the demo's 8 phase spans per step and sleeps in between. Printed: CPU of the collectors'
background threads (``argus-*`` Python threads by their CPU clocks, librdkafka's ``rdk:*``
threads from ``/proc``, 10 ms ticks) per second and per step record, per thread, plus the
training-thread self-time per step. The main thread is otherwise idle, so this isolates what
the delivery path costs per record (build, encode, hand-off, delivery reports, wake-ups).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.collectors.config import load_collector_config  # noqa: E402
from argus.collectors.runtime import Collector  # noqa: E402
from argus.collectors.topology import discover_topology  # noqa: E402
from argus.config import load_settings  # noqa: E402
from argus.kafka.admin import create_topics, delete_topics  # noqa: E402
from examples.threadcpu import collector_threads_cpu  # noqa: E402

PHASES = [("attention", 2), ("mlp", 2), ("forward", 1), ("backward", 1), ("optimizer", 1)]


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=22.0, help="steps per second")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warm-s", type=float, default=5.0)
    args = ap.parse_args()
    settings = load_settings()
    prefix = f"pcpu{uuid.uuid4().hex[:8]}.argus"
    created = create_topics(settings, prefix=prefix, partitions=1)
    settings = load_settings(env={**os.environ, "ARGUS_TOPIC_PREFIX": prefix})
    cfg = load_collector_config(settings, {}, job=f"pcpu-{uuid.uuid4().hex[:6]}", kernels=False)
    col = Collector(cfg, settings, discover_topology(rank=0, world_size=1, local_rank=0))
    try:
        period = 1.0 / args.rate
        t_end_warm = time.monotonic() + args.warm_s
        n = 0
        before: dict[str, float] = {}
        t0 = 0.0
        oh0 = 0
        next_t = time.monotonic()
        while True:
            now = time.monotonic()
            if not before and now >= t_end_warm:
                before, t0, n, oh0 = collector_threads_cpu(), now, 0, col.overhead_total_ns
            if before and now - t0 >= args.seconds:
                break
            col.step_begin()
            for name, reps in PHASES:
                for _ in range(reps):
                    a = col.mark()
                    col.add_phase(name, "compute", "sum", a, col.mark())
            a = col.mark()
            col.add_phase("dp_allreduce", "comm", "span", a, col.mark())
            next_t += period
            time.sleep(max(0.0, next_t - time.monotonic()))
            col.step_end()
            n += 1
        after = collector_threads_cpu()
        wall = time.monotonic() - t0
        self_ns = col.overhead_total_ns - oh0
    finally:
        col.close(2)
        delete_topics(settings, created)
    total = sum(after.values()) - sum(before.values())
    print(
        f"{n} step records in {wall:.1f} s ({n / wall:.1f}/s); delivered "
        f"{col.producer.delivered}, dropped {col.producer.dropped_records}, errors "
        f"{col.producer.errors}; load {Path('/proc/loadavg').read_text().split()[0]}"
    )
    print(f"  {'thread':20s} {'CPU ms/s':>9s} {'us/record':>10s}")
    for name in sorted(after, key=lambda k: -(after[k] - before.get(k, 0.0))):
        d = after[name] - before.get(name, 0.0)
        print(f"  {name:20s} {1e3 * d / wall:9.3f} {1e6 * d / max(n, 1):10.1f}")
    print(f"  {'background total':20s} {1e3 * total / wall:9.3f} {1e6 * total / max(n, 1):10.1f}")
    print(
        f"  {'training-thread self':20s} {1e3 * self_ns / 1e9 / wall:9.3f} {self_ns / 1e3 / n:10.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
