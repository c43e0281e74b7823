"""What the Kafka client costs the compressor: aiokafka (faust's client) against
confluent-kafka (librdkafka), side by side on the real local broker (issue 21).

The live compressor spends ~1.3 ms of CPU a 3,000-event kernel batch against ~0.3 ms for the
same decode, check, summarise and encode in ``bench_compressor_batch.py``; this measures the
part of the difference that is the client alone, with nothing else in the process:

* **consume**: ``--records`` kernel batches (~105 KB each, lz4 as the collectors send
  them) on a fresh topic of ``--partitions`` partitions, read from the start with 8 MiB
  fetches (the workers' ``fetch_bytes``): aiokafka's ``getmany`` against confluent-kafka's
  ``consume(500)``;
* **consume in faust**: a faust agent that only iterates the same records' events
  (``_faust_null.py``, the workers' fetch size): what faust adds to aiokafka per record, as
  faust 0.15 delivers them and with the workers' :mod:`argus.streams.fast_delivery`;
* **produce**: the same number of summary-sized values (6.5 KB) sent with a 10 ms linger
  and 512 KiB batches (the workers' ``producer_linger_s``, ``producer_batch_bytes``),
  idempotent, and awaited: aiokafka's ``send`` against
  confluent-kafka's ``produce`` + ``poll``.

CPU is the process's (all threads: librdkafka's and aiokafka's own), µs a record; rounds
alternate the clients. ::

    .venv/bin/python bench/bench_kafka_clients.py --records 2000 --rounds 3
    .venv/bin/python bench/bench_kafka_clients.py --records 20000 --rounds 3 --step-sized
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from argus.config import load_settings
from argus.kafka.admin import create_topics, delete_prefixed
from argus.schemas import Codec
from argus.sim.layout import Layout
from argus.streams import synth
from argus.topics import topic_name

FETCH_BYTES = 8 << 20  # the workers' fetch_bytes
BATCH_BYTES = 1 << 19  # the workers' producer_batch_bytes


def _cpu() -> float:
    return time.process_time()


def _values(n: int) -> list[bytes]:
    """``n`` kernel batches of 3,000 events (16 ranks' templates, repeated)."""
    codec, mix, rng = Codec(), synth.default_mix(0), np.random.default_rng(0)
    lay = Layout.for_ranks(64)
    tpl = [
        codec.encode(
            "kernel_batch",
            synth.kernel_batch(
                rng, mix, job="j", rank=r, window_id=0, n_events=3000, coords=lay.coords(r)
            ),
        )
        for r in range(16)
    ]
    return [tpl[i % len(tpl)] for i in range(n)]


def _fill(conf: dict[str, Any], topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    p = Producer({**conf, "linger.ms": 20, "compression.type": "lz4"})
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, key=f"j/{i % 64}".encode(), value=v)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    p.flush(60)


def _consume_confluent(conf: dict[str, Any], topic: str, n: int) -> float:
    from confluent_kafka import Consumer

    c = Consumer(
        {
            **conf,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "max.partition.fetch.bytes": FETCH_BYTES,
            "fetch.max.bytes": 4 * FETCH_BYTES,
        }
    )
    c.subscribe([topic])
    got = 0
    t0 = None
    while got < n:
        msgs = c.consume(500, timeout=1.0)
        if t0 is None and msgs:
            t0 = _cpu()
        got += sum(1 for m in msgs if m.error() is None and m.value() is not None)
    spent = _cpu() - (t0 or _cpu())
    c.close()
    return spent


async def _consume_aiokafka(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer

    c = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"bench-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=4 * FETCH_BYTES,
    )
    await c.start()
    got = 0
    t0 = None
    while got < n:
        batches = await c.getmany(timeout_ms=1000, max_records=500)
        if t0 is None and batches:
            t0 = _cpu()
        got += sum(len(v) for v in batches.values())
    spent = _cpu() - (t0 or _cpu())
    await c.stop()
    return spent


def _consume_faust(bootstrap: str, topic: str, n: int, fast: bool = False) -> float:
    """CPU s of a faust agent that only iterates ``n`` events (``_faust_null.py``);
    ``fast``: with :mod:`argus.streams.fast_delivery` installed."""
    script = Path(__file__).with_name("_faust_null.py")
    out = subprocess.run(
        [sys.executable, str(script), bootstrap, topic, str(n)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ARGUS_BENCH_FAST_DELIVERY": "1" if fast else "0"},
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("cpu_us ")]
    if not lines:
        raise RuntimeError(f"faust null agent failed: {out.stderr[-2000:]}")
    return float(lines[-1].split()[1]) * n / 1e6


def _produce_confluent(conf: dict[str, Any], topic: str, values: list[bytes]) -> float:
    from confluent_kafka import Producer

    p = Producer(
        {
            **conf,
            "linger.ms": 10,
            "enable.idempotence": True,
            "acks": "all",
            "batch.size": BATCH_BYTES,
        }
    )
    t0 = _cpu()
    for i, v in enumerate(values):
        p.produce(topic, key=f"j/{i % 64}".encode(), value=v)
        p.poll(0)
    p.flush(60)
    spent = _cpu() - t0
    return spent


async def _produce_aiokafka(bootstrap: str, topic: str, values: list[bytes]) -> float:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=10,
        enable_idempotence=True,
        acks="all",
        max_batch_size=BATCH_BYTES,  # the workers' producer_batch_bytes
    )
    await p.start()
    t0 = _cpu()
    futs = [await p.send(topic, key=f"j/{i % 64}".encode(), value=v) for i, v in enumerate(values)]
    await asyncio.gather(*futs)
    spent = _cpu() - t0
    await p.stop()
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument(
        "--step-sized", action="store_true", help="consume 450-byte values (a step record's size)"
    )
    args = ap.parse_args()
    s = load_settings()
    conf = s.kafka_config()
    bootstrap = str(conf["bootstrap.servers"])
    prefix = f"bench-clients-{uuid.uuid4().hex[:6]}"
    create_topics(s, prefix=prefix, partitions=args.partitions)
    raw, out = topic_name("raw.kernels", prefix), topic_name("summary.kernels", prefix)
    values = [bytes(450)] * args.records if args.step_sized else _values(args.records)
    small = [(v * 15)[:6500] for v in values]
    try:
        _fill(conf, raw, values)
        rows: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for name, run in (
                (
                    "consume, aiokafka",
                    lambda: asyncio.run(_consume_aiokafka(bootstrap, raw, len(values))),
                ),
                ("consume, confluent-kafka", lambda: _consume_confluent(conf, raw, len(values))),
                (
                    "consume, faust agent (no work)",
                    lambda: _consume_faust(bootstrap, raw, len(values)),
                ),
                (
                    "consume, faust agent, argus delivery",
                    lambda: _consume_faust(bootstrap, raw, len(values), fast=True),
                ),
                (
                    "produce 6.5 KB, aiokafka",
                    lambda: asyncio.run(_produce_aiokafka(bootstrap, out, small)),
                ),
                ("produce 6.5 KB, confluent-kafka", lambda: _produce_confluent(conf, out, small)),
            ):
                rows.setdefault(name, []).append(1e6 * run() / len(values))
        what = "450-byte values" if args.step_sized else "105 KB kernel batches"
        print(
            f"{len(values)} records ({what}, lz4), "
            f"{args.partitions} partitions, {args.rounds} alternated rounds; load {os.getloadavg()[0]:.2f}"
        )
        print(f"{'client':34s} {'CPU us/record, per round':>30s}   median")
        for name, vals in rows.items():
            print(f"{name:34s} {' '.join(f'{v:8.1f}' for v in vals):>30s}   {np.median(vals):7.1f}")
    finally:
        delete_prefixed(s, prefix)


if __name__ == "__main__":
    main()
