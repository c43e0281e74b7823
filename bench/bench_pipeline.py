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
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from argus.config import load_settings
from argus.kafka.admin import create_topics, delete_topics
from argus.kafka.local import LocalBroker
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher, WorkerProcess

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "pipeline"))
from harness import SPLIT, free_port, metric

ENV = {
    "ARGUS_STREAMS__INTERNAL_PARTITIONS": "2",
    "ARGUS_STREAMS__FUNNEL_GRACE_S": "5",
    "ARGUS_STREAMS__FUNNEL_IDLE_S": "10",
}


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def latency(ranks: int, steps: int, rate: float) -> None:
    s = load_settings()
    LocalBroker(s).up()
    prefix = f"bench{int(time.time())}"
    topics = create_topics(s, prefix=prefix, partitions=2)
    tmp = Path(tempfile.mkdtemp())
    workers = [
        WorkerProcess(
            r,
            env={"ARGUS_TOPIC_PREFIX": prefix, **ENV},
            log_path=tmp / f"{'-'.join(r)}.log",
            metrics_port=free_port(),
        ).start()
        for r in SPLIT
    ]
    watch = Watcher(s, ["anomalies"], prefix=prefix)
    arrivals: dict[str, float] = {}
    lock = threading.Lock()

    def on_record(_suffix: str, _key: str, rec: dict) -> None:  # type: ignore[type-arg]
        with lock:
            arrivals.setdefault(rec["id"], time.time())

    watch._on_record = on_record
    time.sleep(8)  # workers join their groups
    run = SimRun.make("compute-straggler", ranks=ranks, steps=steps, seed=11)
    published: dict[int, float] = {}
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
    for w in workers:
        w.stop()
    watch.close()
    delete_topics(s, list(topics))
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


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rate", type=float, default=1.0, help="steps/s")
    args = ap.parse_args()
    latency(args.ranks, args.steps, args.rate)


if __name__ == "__main__":
    main()
