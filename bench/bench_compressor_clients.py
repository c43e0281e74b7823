"""The live compressor's CPU on its two runtimes, side by side on one load (issue 21).

One load generator (``--ranks`` simulated ranks, one 3,000-event kernel batch a rank every
4 s, lz4, as ``bench_pipeline.py --load``) feeds ``raw.kernels``; two workers read it at
once, in two consumer groups: ``argus worker compressor`` on the default runtime (its own
confluent-kafka loop, :mod:`argus.streams.compressor_loop`) and ``argus worker compressor
stacks`` with ``streams.compressor_runtime = "faust"`` (the faust agent; the stacks role
idles). Each process's CPU (all threads, from /proc) over the same interval, from the first
step to both having taken every record, per record.

    .venv/bin/python bench/bench_compressor_clients.py --ranks 1024 --minutes 2
"""

from __future__ import annotations

import argparse
import atexit
import time

import numpy as np
from _loadgen import (
    LOAD_ENV,
    PERIOD_S,
    BatchTemplate,
    free_port,
    load_producer,
    metric,
    produce,
    start_stack,
)
from bench_pipeline import _cpu_s

from argus.schemas import Codec
from argus.sim.layout import Layout
from argus.streams import synth
from argus.streams.local_run import WorkerProcess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--minutes", type=float, default=2.0)
    args = ap.parse_args()

    # the product's default runtime (its own loop, group <prefix>-compressor) and the faust
    # agent beside an idle stacks role (group <prefix>-compressor-stacks): two groups, one load
    stack = start_stack("bcc", roles=[("compressor",)])
    s, prefix, (loop_w,) = stack.settings, stack.prefix, stack.workers
    faust_w = WorkerProcess(
        ("compressor", "stacks"),
        env={
            "ARGUS_TOPIC_PREFIX": prefix,
            **LOAD_ENV,
            "ARGUS_STREAMS__COMPRESSOR_RUNTIME": "faust",
        },
        log_path=stack.log_dir / "faust-compressor.log",
        metrics_port=free_port(),
    ).start()
    atexit.register(faust_w.stop)
    lay = Layout.for_ranks(args.ranks)
    rng, mix, codec = np.random.default_rng(0), synth.default_mix(0), Codec()
    templates = [
        BatchTemplate(
            codec,
            synth.kernel_batch(
                rng, mix, job="j", rank=r, window_id=0, n_events=3000, coords=lay.coords(r)
            ),
        )
        for r in range(args.ranks)
    ]
    n_steps = int(args.minutes * 60 / PERIOD_S)
    total = n_steps * args.ranks
    raw = f"{prefix}.raw.kernels"
    prod = load_producer(s)
    time.sleep(8)  # both consumers joined
    pids = [w.proc.pid if w.proc else 0 for w in (faust_w, loop_w)]
    c0 = [_cpu_s(p) for p in pids]
    t0 = time.monotonic()
    for step in range(n_steps):
        t_step = time.monotonic()
        start = 1_700_000_000_000_000_000 + step * int(PERIOD_S * 1e9)
        for r, tpl in enumerate(templates):
            produce(prod, raw, f"j/{r}".encode(), tpl.encode(step, start, start + 500_000_000))
            prod.poll(0)
        while (left := t_step + PERIOD_S - time.monotonic()) > 0:
            prod.poll(min(left, 0.1))
    prod.flush(60)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if all(
            metric(w, "argus_records_in_total", role="compressor") >= total
            for w in (faust_w, loop_w)
        ):
            break
        time.sleep(0.5)
    wall = time.monotonic() - t0
    c1 = [_cpu_s(p) for p in pids]
    print(
        f"{args.ranks} ranks, {n_steps} steps at 15/min, {total} kernel batches of 3,000 events;"
        f" {wall:.0f} s from the first step to both done"
    )
    names = ("faust agent (runtime faust)", "own loop (runtime kafka)")
    for name, a, b in zip(names, c0, c1, strict=True):
        print(f"  {name}: CPU {b - a:.1f} s = {1e6 * (b - a) / total:.0f} us a record")
    print(f"  own loop / faust: {(c1[1] - c0[1]) / max(c1[0] - c0[0], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
