"""How fast a bounded read (``argus.kafka.read``: replay, drill-downs) takes kernel batches
whose processing is slower than the broker: librdkafka's default ``fetch.queue.backoff.ms``
(1 s) against the 10 ms the scratch consumer sets, alternating in one run.

Produces N 105 KB ``kernel_batch`` records (lz4, 4 partitions) to a fresh topic on the local
broker, then reads them with ``consume_ranges`` doing ``--work-ms`` of busy work a record
(the reader's own processing); prints records/s per setting and round.

    .venv/bin/python bench/bench_read_backoff.py --work-ms 0.2 --records 6000 --rounds 3

The backoff shows when a full prefetch queue (``queued.max.messages.kbytes``, 64 MiB by
default: several hundred of these records) drains in under a second: at 1 ms a record it
lasts longer than the 1 s backoff, and the two settings read alike (830-870 records/s).
"""

from __future__ import annotations

import argparse
import time
import uuid

import numpy as np
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from argus.config import load_settings
from argus.kafka.read import consume_ranges
from argus.schemas import Codec
from argus.sim.layout import Layout
from argus.streams import synth


def _busy(ms: float) -> None:
    t = time.perf_counter()
    while time.perf_counter() - t < ms / 1e3:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--work-ms", type=float, default=1.0, help="busy work a record, ms")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    s = load_settings()
    topic = f"bench-read-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(s.kafka_config())
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    lay, rng, mix = Layout.for_ranks(64), np.random.default_rng(0), synth.default_mix(0)
    codec = Codec()
    vals = [
        codec.encode(
            "kernel_batch",
            synth.kernel_batch(
                rng, mix, job="j", rank=r, window_id=0, n_events=3000, coords=lay.coords(r)
            ),
        )
        for r in range(64)
    ]
    prod = Producer(s.kafka_config(**{"linger.ms": 20, "compression.type": "lz4"}))
    n = args.records - args.records % 4
    for i in range(n):
        prod.produce(topic, vals[i % 64], key=str(i % 64).encode(), partition=i % 4)
        prod.poll(0)
    prod.flush(60)
    ranges = {p: (0, n // 4) for p in range(4)}
    try:
        for rnd in range(args.rounds):
            for backoff in (None, 10):
                conf = {
                    "group.id": f"bench-read-{uuid.uuid4().hex[:6]}",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "enable.partition.eof": False,
                }
                if backoff is not None:
                    conf["fetch.queue.backoff.ms"] = backoff
                cons = Consumer(s.kafka_config(**conf))
                t0, got = time.perf_counter(), 0
                for _msg in consume_ranges(
                    cons, topic, ranges, timeout_s=120, timed_out=lambda left: RuntimeError(left)
                ):
                    got += 1
                    _busy(args.work_ms)
                dt = time.perf_counter() - t0
                cons.close()
                what = "librdkafka's default (1 s)" if backoff is None else f"{backoff} ms"
                print(
                    f"round {rnd + 1}, backoff {what}: {got} records in {dt:.2f} s = {got / dt:.0f}/s"
                )
    finally:
        admin.delete_topics([topic])


if __name__ == "__main__":
    main()
