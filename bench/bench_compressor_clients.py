"""The live compressor's CPU on faust against the same work on a plain confluent-kafka
loop, side by side on one load (issue 21: where the compressor's time outside the
numerics goes).

One load generator (``--ranks`` simulated ranks, one 3,000-event kernel batch a rank every
4 s, lz4, as ``bench_pipeline.py --load``) feeds ``raw.kernels``; two consumer groups read
it at once: ``argus worker compressor`` (faust, the product) and
``bench/_confluent_compressor.py`` (the same decode, check, summarise, encode, routing and
sends on confluent-kafka, no faust). Each process's CPU (all threads, from /proc) over the
same interval, from the first step to both having read every record, per record.

    .venv/bin/python bench/bench_compressor_clients.py --ranks 1024 --minutes 2
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from _loadgen import PERIOD_S, BatchTemplate, load_producer, metric, produce, start_stack
from bench_pipeline import _cpu_s

from argus.schemas import Codec
from argus.sim.layout import Layout
from argus.streams import synth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--minutes", type=float, default=2.0)
    args = ap.parse_args()

    stack = start_stack("bcc", roles=[("compressor",)])
    s, prefix, (worker,) = stack.settings, stack.prefix, stack.workers
    out, l3 = f"{prefix}.proto.summary", f"{prefix}.proto.l3"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(s.kafka_config())
    for f in admin.create_topics([NewTopic(out, 4, 1), NewTopic(l3, 4, 1)]).values():
        f.result()

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
    proto = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("_confluent_compressor.py")),
            s.bootstrap_servers,
            raw,
            out,
            l3,
            f"{prefix}-proto",
            str(total),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    proto_line: list[str] = []
    threading.Thread(target=lambda: proto_line.extend(proto.stdout or []), daemon=True).start()
    prod = load_producer(s)
    time.sleep(8)  # both consumers joined
    faust_pid = worker.proc.pid if worker.proc else 0
    c0 = (_cpu_s(faust_pid), _cpu_s(proto.pid))
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
        faust_done = metric(worker, "argus_records_in_total", role="compressor") >= total
        if faust_done and proto_line:
            break
        time.sleep(0.5)
    wall = time.monotonic() - t0
    c1 = (_cpu_s(faust_pid), _cpu_s(proto.pid))
    proto.kill()
    print(
        f"{args.ranks} ranks, {n_steps} steps at 15/min, {total} kernel batches of 3,000 events;"
        f" {wall:.0f} s from the first step to both done"
    )
    for name, a, b in zip(("faust compressor", "confluent loop"), c0, c1, strict=True):
        print(f"  {name}: CPU {b - a:.1f} s = {1e6 * (b - a) / total:.0f} us a record")
    print(f"  confluent loop, its own figure from its first record: {''.join(proto_line).strip()}")


if __name__ == "__main__":
    main()
