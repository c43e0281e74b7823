"""The compressor's per-record work on a plain confluent-kafka consumer and producer, no
faust (``bench_compressor_clients.py``): a measuring prototype, not a role.

Per poll (``consume(256)``): decode, check and summarise the records as the faust
compressor does (``Checker.kernel_batch_columns``, one ``SummarizedBatches`` per run of
``CHUNK_EVENTS``), send each summary on the raw record's partition with the routed
header, its L3 item to its scope (``route_summary`` + ``rekey_messages``, as
``send_rekeyed``), then every second flush the producer and commit (the faust workers'
``broker_commit_interval``, outputs acknowledged first as ``DurableCommits`` does). Not
done here: split windows (the load has none), the fidelity sample, DLQ and metrics.

    python bench/_confluent_compressor.py BOOTSTRAP RAW_TOPIC OUT_TOPIC L3_TOPIC GROUP N

Prints ``cpu_us <CPU µs a record>`` (all threads, from its first record to its N-th).
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from typing import Any

from confluent_kafka import Consumer, Message, Producer

from argus.detectors.config import DetectorsConfig
from argus.routing import Routing
from argus.schemas import Codec
from argus.streams.app import item_bytes, rekey_messages
from argus.streams.limits import Limits
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.roles.l3 import ROUTED_HEADER, route_window
from argus.streams.validate import Checker
from argus.summaries import summary_record
from argus.summaries.summary_record import BatchColumns, NameAnnouncements, SummarizedBatches

Ready = list[tuple[Message, dict[str, Any], BatchColumns]]  # a run: (message, record, columns)

bootstrap, raw_topic, out_topic, l3_topic, group = sys.argv[1:6]
n = int(sys.argv[6])
L3_PARTITIONS = 4  # the bench's internal_partitions (a key's stable partition; nobody reads it)

codec = Codec()
check = Checker(Limits.from_pipeline(PipelineConfig()))
routing = Routing.from_config(DetectorsConfig().routing)
announced = NameAnnouncements()
consumer = Consumer(
    {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
)
producer = Producer(
    {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 10,
        "batch.size": 512 * 1024,
    }
)
consumer.subscribe([raw_topic])


def summarize(ready: Ready) -> None:
    done = SummarizedBatches([p for _, p, _ in ready], columns=[c for _, _, c in ready])
    routed: dict[str, list[tuple[Message, tuple[bytes, bytes | None]]]] = {}
    for i, (msg, piece, _) in enumerate(ready):
        who = f"{piece['job']}/{piece['rank']}"
        known = announced.known(who)
        data, named = done.encoded(i, codec, announced=known)
        known.update(named)
        part = msg.partition() or 0  # a consumed message always has one
        item = route_window(piece, data, done.names_of(i, named), routing, part)
        producer.produce(
            out_topic,
            value=data,
            key=who.encode(),
            partition=part,
            headers=[(ROUTED_HEADER, b"1")],
        )
        for key, it in item:
            routed.setdefault(key, []).append((msg, item_bytes(it)))
    for key, items in routed.items():
        part = zlib.crc32(key.encode()) % L3_PARTITIONS
        for _owners, value in rekey_messages(items, time.time()):
            producer.produce(l3_topic, value=value, key=key.encode(), partition=part)
    producer.poll(0)


got, t0, last_commit = 0, 0.0, time.monotonic()
while got < n:
    msgs = consumer.consume(256, 0.05)
    ready: Ready = []
    events = 0
    for msg in msgs:
        if msg.error():
            continue
        if got == 0:
            t0 = time.process_time()
        got += 1
        piece = codec.decode_as("kernel_batch", msg.value())
        cols = check.kernel_batch_columns(piece, broker_s=msg.timestamp()[1] / 1e3)
        ready.append((msg, piece, cols))
        events += len(piece.get("duration_ns") or b"") // 8
        if events > summary_record.CHUNK_EVENTS and len(ready) > 1:
            last = ready.pop()
            summarize(ready)
            ready, events = [last], len(last[1].get("duration_ns") or b"") // 8
    if ready:
        summarize(ready)
    if time.monotonic() - last_commit >= 1.0 or got >= n:
        producer.flush(30)
        consumer.commit(asynchronous=True)
        last_commit = time.monotonic()
spent = 1e6 * (time.process_time() - t0) / max(got - 1, 1)
os.write(1, f"cpu_us {spent:.1f}\n".encode())
consumer.close()
