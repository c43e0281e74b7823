"""The compressor role on a plain confluent-kafka consumer and producer, no faust
(``bench_compressor_clients.py``): a measuring driver, not the product's.

Per poll (``consume(256)``): the role (:class:`argus.streams.roles.compressor.Compressor`)
takes each record and summarises each run of ``CHUNK_EVENTS`` as the faust agent drives
it; each summary goes to the raw record's partition with the routed header, the L3 items
to their scopes (``rekey_messages``, as ``send_rekeyed``); every second the producer is
flushed and the offsets committed (the faust workers' ``broker_commit_interval``, outputs
acknowledged first as ``DurableCommits`` does). Not done here: holding split windows' parts
(the load has none), DLQ records, metrics and rebalances.

    python bench/_confluent_compressor.py BOOTSTRAP RAW_TOPIC OUT_TOPIC L3_TOPIC GROUP N

Prints ``cpu_us <CPU µs a record>`` (all threads, from its first record to its N-th).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from confluent_kafka import Consumer, Message, Producer

from argus.detectors.config import DetectorsConfig
from argus.routing import Routing
from argus.schemas import Codec
from argus.streams.app import item_bytes, rekey_messages
from argus.streams.fidelity import judge_samples
from argus.streams.limits import Limits
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.roles.compressor import Compressor, Taken
from argus.streams.roles.context import partition_of
from argus.streams.roles.l3 import ROUTED_HEADER
from argus.streams.validate import Checker
from argus.summaries import summary_record


class NoHold:
    """The load has no split windows: nothing to hold."""

    def hold(self, token: Any) -> None:
        pass

    def release(self, token: Any) -> None:
        pass


bootstrap, raw_topic, out_topic, l3_topic, group = sys.argv[1:6]
n = int(sys.argv[6])
L3_PARTITIONS = 4  # the bench's internal_partitions (a key's stable partition; nobody reads it)

codec = Codec()
role = Compressor(
    codec,
    Checker(Limits.from_pipeline(PipelineConfig())),
    Routing.from_config(DetectorsConfig().routing),
    NoHold(),
    fidelity_every=PipelineConfig().fidelity_every,
    route_required=False,
)
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


def summarize(ready: list[Taken]) -> None:
    """Send the run's summaries in order, then its L3 items (one message per scope)."""
    routed: dict[str, list[tuple[Message, tuple[bytes, bytes | None]]]] = {}
    for made in role.summarize(ready):
        if made.error is not None:
            raise made.error  # none in this load
        producer.produce(
            out_topic,
            value=made.value,
            key=made.key,
            partition=made.taken.part,
            headers=[(ROUTED_HEADER, b"1")],
        )
        for key, it in made.items:
            routed.setdefault(key, []).append((made.taken.token, item_bytes(it)))
    for key, items in routed.items():
        part = partition_of(key, L3_PARTITIONS)
        for _owners, value in rekey_messages(items, time.time()):
            producer.produce(l3_topic, value=value, key=key.encode(), partition=part)
    producer.poll(0)


got, t0, last_commit = 0, 0.0, time.monotonic()
while got < n:
    msgs = consumer.consume(256, 0.05)
    ready: list[Taken] = []
    events = 0
    for msg in msgs:
        if msg.error():
            continue
        if got == 0:
            t0 = time.process_time()
        got += 1
        taken, _ = role.take(
            msg.value() or b"", msg, msg.partition() or 0, broker_s=msg.timestamp()[1] / 1e3
        )
        if taken is None:
            continue
        ready.append(taken)
        events += taken.events
        if events > summary_record.CHUNK_EVENTS and len(ready) > 1:
            last = ready.pop()
            summarize(ready)
            ready, events = [last], last.events
    if ready:
        summarize(ready)
    judge_samples(role.due_samples(time.time()))
    if time.monotonic() - last_commit >= 1.0 or got >= n:
        producer.flush(30)
        consumer.commit(asynchronous=True)
        last_commit = time.monotonic()
spent = 1e6 * (time.process_time() - t0) / max(got - 1, 1)
os.write(1, f"cpu_us {spent:.1f}\n".encode())
while True:  # the bench reads this process's CPU, then kills it
    time.sleep(1)
