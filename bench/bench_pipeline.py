"""Pipeline benchmarks on the real local broker (issue 5).

1. **Latency**: a simulated job published in real time (one step's records when the step
   ends), the workers running as in production (step roles | kernel roles, two processes).
   Latency of a step = arrival of its L2 anomaly on ``argus.anomalies`` minus the moment the
   step's records were published (the collectors publish at step end). L3: arrival of an
   L3 anomaly minus the publish time of the last step of its block.
2. **Sustained load** (``--load``): R ranks at 15 steps/min with 3,000 kernel events per
   rank-step for ``--minutes``; consumer lag sampled every 10 s must not grow.

    .venv/bin/python bench/bench_pipeline.py                      # latency, 64 ranks
    .venv/bin/python bench/bench_pipeline.py --load --ranks 1024 --minutes 5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from _loadgen import (
    LOAD_ENV,
    PERIOD_S,
    SPLIT,
    load_producer,
    metric,
    produce,
    publish_steps,
    split_roles,
    start_stack,
)

from argus.kafka.admin import delete_prefixed
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher, WorkerProcess

ENV = {
    "ARGUS_STREAMS__INTERNAL_PARTITIONS": "2",
    "ARGUS_STREAMS__FUNNEL_GRACE_S": "5",
    "ARGUS_STREAMS__FUNNEL_IDLE_S": "10",
    "ARGUS_STREAMS__IDLE_CLOSE_S": "8",
}


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def latency(ranks: int, steps: int, rate: float) -> None:
    st = start_stack("bench", partitions=2, env=ENV, roles=SPLIT)
    s, prefix, workers = st.settings, st.prefix, st.workers
    watch = Watcher(s, ["anomalies"], prefix=prefix)
    arrivals: dict[str, float] = {}
    lock = threading.Lock()

    def on_record(_suffix: str, _key: str, rec: dict[str, Any]) -> None:
        with lock:
            arrivals.setdefault(rec["id"], time.time())

    watch._on_record = on_record
    published: dict[int, float] = {}
    try:
        time.sleep(8)  # workers join their groups
        run = SimRun.make("compute-straggler", ranks=ranks, steps=steps, seed=11)
        publish(
            simulate(run),
            s,
            prefix=prefix,
            step_rate=rate,
            on_step=lambda st: published.__setitem__(st, time.time()),
        )
        watch.wait_for(
            lambda _: metric(workers[0], "argus_windows_closed_total", role="steps") >= steps, 120
        )
        time.sleep(25)
    finally:  # a failed run leaves no worker or topic behind
        for w in workers:
            w.stop()
        watch.close()
        delete_prefixed(s, prefix)  # wire, re-key and changelog topics
    l2, l3 = [], []
    first: dict[tuple[str, int], float] = {}
    for rec in watch.get("anomalies"):
        t = arrivals.get(rec["id"])
        end = int(rec["window_end_step"])
        if t is None or end not in published:
            continue
        key = (rec["level"], end)
        if key in first:
            continue
        first[key] = t
        if rec["level"] == "L2":
            l2.append(t - published[end])
        elif rec["level"] == "L3":
            l3.append(t - published[end])
    print(
        f"latency, {ranks} ranks, {steps} steps at {rate:g} steps/s (compute-straggler from step {run.truth.onset_step})"
    )
    print(
        f"  L2: n={len(l2)} p50={_pct(l2, 50):.2f} s p95={_pct(l2, 95):.2f} s max={max(l2, default=float('nan')):.2f} s"
    )
    print(
        f"  L3: n={len(l3)} p50={_pct(l3, 50):.2f} s p95={_pct(l3, 95):.2f} s max={max(l3, default=float('nan')):.2f} s"
    )


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _lag(workers: list[WorkerProcess], *roles: str) -> float:
    return sum(metric(w, "argus_consumer_lag", role=r) for w in workers for r in roles)


def load(
    ranks: int,
    minutes: float,
    events: int,
    profile: bool,
    split: int = 2,
    linger_s: float = 0.01,
    steps_workers: int = 0,
) -> None:
    """R ranks at 15 steps/min, ``events`` kernel events per rank-step; lag must not grow.

    ``linger_s``: the workers' producer linger, s (0.01: the default; 0: every record sent at once).
    ``steps_workers`` > 0: step records only, into that many step-role processes of one
    consumer group (how far one job's L1/L2 spreads over workers)."""
    from argus.schemas import Codec
    from argus.sim.layout import Layout
    from argus.streams import synth

    env = {**LOAD_ENV, "ARGUS_STREAMS__PRODUCER_LINGER_S": str(linger_s)}  # 4 partitions
    roles = [SPLIT[0]] * steps_workers if steps_workers else split_roles(split)
    st = start_stack("load", roles=roles, env=env)
    s, prefix, workers, broker_pid = st.settings, st.prefix, st.workers, st.broker_pid
    tmp = st.log_dir
    lay = Layout.for_ranks(ranks)
    run = SimRun.make(
        "healthy", layout=lay, steps=10_000, seed=3, job=f"load-{ranks}", kernels=False
    )
    steps_iter = simulate(run)
    mix = synth.default_mix(0)
    rng = np.random.default_rng(0)
    base = [
        synth.kernel_batch(
            rng, mix, job=run.job, rank=r, window_id=0, n_events=events, coords=lay.coords(r)
        )
        for r in range(0 if steps_workers else lay.world)
    ]
    codec = Codec()
    prod = load_producer(s)
    time.sleep(8)
    period = PERIOD_S  # 15 steps/min
    n_steps = int(minutes * 60 / period)
    samples: list[tuple[float, float, float]] = []  # (t, steps lag, kernels lag)
    cpu0 = [_cpu_s(w.proc.pid) for w in workers if w.proc]
    broker0 = _cpu_s(broker_pid) if broker_pid else 0.0
    self0 = sum(os.times()[:2])
    t_start = time.monotonic()
    bytes_k = 0
    pending: tuple[str, str, dict[str, Any]] | None = next(steps_iter)
    for step in range(n_steps):
        t_step = t_start + step * period
        pending, _, _ = publish_steps(prod, codec, prefix, steps_iter, pending, step)
        for r, b in enumerate(base):
            rec = dict(
                b,
                window_id=step,
                window_start_ns=time.time_ns() - 3_000_000_000,
                window_end_ns=time.time_ns(),
            )
            v = codec.encode("kernel_batch", rec)
            bytes_k += len(v)
            produce(prod, f"{prefix}.raw.kernels", f"{run.job}/{r}".encode(), v)
            prod.poll(0)
        if step % 3 == 0:
            if steps_workers:  # which processes close job steps and block steps
                closed = [
                    (
                        metric(w, "argus_windows_closed_total", role="steps"),
                        metric(w, "argus_windows_closed_total", role="steps-block"),
                    )
                    for w in workers
                ]
                print(f"  (job steps, block steps) closed per worker: {closed}", flush=True)
            samples.append(
                (
                    time.monotonic() - t_start,
                    _lag(workers, "steps"),
                    _lag(workers, "compressor", "l3"),
                )
            )
            print(
                f"  t={samples[-1][0]:6.0f} s step {step}: lag steps={samples[-1][1]:.0f} kernels={samples[-1][2]:.0f}",
                flush=True,
            )
        if profile and step == n_steps // 2:
            for w in workers:
                if w.proc is None:
                    continue
                subprocess.Popen(
                    [
                        str(Path(sys.executable).parent / "py-spy"),
                        "record",
                        "-p",
                        str(w.proc.pid),
                        "-d",
                        "20",
                        "-r",
                        "20",
                        "-f",
                        "raw",
                        "--nonblocking",
                        "-o",
                        str(tmp / f"{'-'.join(w.roles)}.prof"),
                    ]
                )
        while (left := t_step + period - time.monotonic()) > 0:
            prod.poll(min(left, 0.1))
    prod.flush(60)
    wall = time.monotonic() - t_start
    cpu = [_cpu_s(w.proc.pid) - c for w, c in zip(workers, cpu0, strict=True) if w.proc]
    broker_cpu = _cpu_s(broker_pid) - broker0 if broker_pid else float("nan")
    self_cpu = sum(os.times()[:2]) - self0
    time.sleep(10)
    final = (
        _lag(workers, "steps"),
        _lag(workers, "compressor", "l3"),
    )
    for w in workers:
        w.stop()
    delete_prefixed(s, prefix)  # wire, re-key and changelog topics
    n_ev = n_steps * lay.world * events
    print(
        f"load: {lay.world} ranks ({lay}), {n_steps} steps at 15/min, {events} kernel events/rank-step, "
        f"{wall:.0f} s; kernel batches {bytes_k / wall / 1e6:.1f} MB/s"
    )
    if not steps_workers:
        print(f"  kernel events/s offered: {n_ev / wall:,.0f}")
    print(f"  step records/s offered: {lay.world / period:,.0f}")
    for w, c in zip(workers, cpu, strict=True):
        print(f"  worker {' '.join(w.roles)}: CPU {c:.0f} s = {100 * c / wall:.0f}% of a core")
    print(f"  broker: CPU {broker_cpu:.0f} s = {100 * broker_cpu / wall:.0f}% of a core")
    print(f"  load generator (this process): CPU {self_cpu:.0f} s = {100 * self_cpu / wall:.0f}%")
    half = len(samples) // 2
    first = np.mean([x[1] + x[2] for x in samples[:half]]) if half else float("nan")
    last = np.mean([x[1] + x[2] for x in samples[half:]]) if samples else float("nan")
    print(
        f"  consumer lag (messages), mean first half {first:.0f}, second half {last:.0f}, "
        f"10 s after the end: steps {final[0]:.0f}, kernels {final[1]:.0f}"
    )
    if profile:
        print(f"  profiles: {tmp}/*.prof (py-spy raw)")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rate", type=float, default=1.0, help="steps/s")
    ap.add_argument("--load", action="store_true", help="the sustained-load benchmark")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--events", type=int, default=3000, help="kernel events per rank-step (--load)")
    ap.add_argument("--profile", action="store_true", help="py-spy the workers half-way (--load)")
    ap.add_argument(
        "--split",
        type=int,
        choices=(2, 3),
        default=2,
        help="worker processes (--load): 2 = steps | compressor+l3; 3 = steps | compressor | l3",
    )
    ap.add_argument(
        "--steps-workers",
        type=int,
        default=0,
        help="--load with step records only, into N step-role processes (one consumer group)",
    )
    ap.add_argument(
        "--linger",
        type=float,
        default=0.01,
        help="workers' producer linger, s (--load; 0.01 = the pipeline's default, 0 = send at once)",
    )
    args = ap.parse_args()
    if args.load:
        load(
            args.ranks,
            args.minutes,
            args.events,
            args.profile,
            args.split,
            args.linger,
            args.steps_workers,
        )
    else:
        latency(args.ranks, args.steps, args.rate)


if __name__ == "__main__":
    main()
