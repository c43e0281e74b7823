"""The steps router's own loop (:mod:`argus.streams.steps_router_loop`) against a real broker:
a switch of runtimes starts where the faust router's group committed, and every step record
reaches the block tier's topic once."""

from __future__ import annotations

import dataclasses
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from argus.config import Settings
from argus.schemas import Codec
from argus.sim.simulate import SimRun, simulate
from argus.streams.groups import steps_router_group
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.rekey import read_message
from argus.streams.steps_router_loop import StepsRouterLoop
from argus.topics import topic_name
from tests.streams.test_compressor_loop import _committed, _running

CODEC = Codec()
pytestmark = pytest.mark.kafka


def _steps(ranks: int, steps: int) -> list[tuple[bytes, bytes, int]]:
    """``(key, value, step)`` of a healthy job's step records, step by step."""
    run = SimRun.make("healthy", ranks=ranks, steps=steps, seed=5, kernels=False)
    out = [(k, CODEC.encode("step_record", r), int(r["step"])) for t, k, r in simulate(run)
           if t == "raw.steps"]  # fmt: skip
    return sorted(out, key=lambda x: x[2])


def _routed(s: Settings, want: int, timeout_s: float = 60.0) -> list[tuple[int, int]]:
    """``(rank, step)`` of every item on internal.steps-by-block, read until ``want`` items
    came and then 3 s more (anything more would have come by then)."""
    topic = topic_name("internal.steps-by-block", s.topic_prefix)
    c = Consumer(s.kafka_config(**{"group.id": "probe", "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got: list[tuple[int, int]] = []
    deadline, quiet = time.monotonic() + timeout_s, None
    try:
        while time.monotonic() < deadline and (quiet is None or time.monotonic() < quiet):
            msg = c.poll(0.5)
            if msg is None or msg.error() or not msg.value():
                continue
            for item in read_message(msg.value()).get("items") or ():
                got.append((int(item["rank"]), int(item["step"])))
            if len(got) >= want and quiet is None:
                quiet = time.monotonic() + 3.0
    finally:
        c.close()
    return sorted(got)


def test_the_router_loop_starts_where_the_faust_group_committed(
    kafka: Settings, topic_prefix: str
) -> None:
    """A deployment switching from the faust router: raw.steps[0] committed at offset 24 by
    the worker's faust app (``legacy_group``); the loop, whose own group never committed,
    routes records 24.. once each (none skipped, none repeated) and commits the end."""
    s = dataclasses.replace(kafka, topic_prefix=topic_prefix)
    raw = topic_name("raw.steps", topic_prefix)
    recs = _steps(ranks=16, steps=3)  # 48 records, 16 a step
    prod = Producer(s.kafka_config(**{"enable.idempotence": True}))
    for key, value, _step in recs:
        prod.produce(raw, value, key, partition=0)
    assert prod.flush(30) == 0
    legacy = f"{topic_prefix}-funnel-l1-l2-stacks"
    old = Consumer(s.kafka_config(**{"group.id": legacy, "enable.auto.commit": False}))
    tp = TopicPartition(raw, 0, 24)
    old.commit(offsets=[tp], asynchronous=False)
    old.close()
    pcfg = PipelineConfig(internal_partitions=1)  # the fixture made one partition a topic
    loop = StepsRouterLoop(s, pcfg, instance_id="off", legacy_group=legacy)
    with _running(loop):
        got = _routed(s, want=24)
        deadline = time.monotonic() + 20
        while (
            _committed(s, steps_router_group(topic_prefix), raw) != 48
            and time.monotonic() < deadline
        ):
            time.sleep(0.5)
    want = sorted((CODEC.decode_as("step_record", v)["rank"], step) for _k, v, step in recs[24:])
    assert got == want
    assert _committed(s, steps_router_group(topic_prefix), raw) == 48
