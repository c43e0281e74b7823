"""The compressor's own confluent-kafka loop against the real broker (issue 21).

The restart, split-window, DLQ and end-to-end tests run it through ``argus worker`` (the
default runtime); these drive :class:`~argus.streams.compressor_loop.CompressorLoop` in a
thread to check what only it does: commits after acknowledgement, the static member's leave
on a clean stop, the start from the faust group's offsets, a summary the broker refuses.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    ConsumerGroupTopicPartitions,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from argus.config import Settings
from argus.schemas import Codec
from argus.streams.compressor_loop import CompressorLoop, Lookahead, LoopTopics
from argus.streams.groups import loop_group
from argus.streams.kafka_loop import KafkaLoop
from argus.streams.local_run import Watcher
from argus.streams.pipeline_config import PipelineConfig
from argus.summaries.summary_record import summarize_batch
from tests.collectors.test_batch_split import _columns, _record, _wire

CODEC = Codec()


def test_the_lookahead_merges_partitions_by_broker_time() -> None:
    """Records come out oldest broker timestamp first across partitions (a partition's own
    in offset order, whatever its timestamps), up to ``n`` at a time; a dropped partition's
    records are gone, and the bytes held add up."""

    def msg(p: int, off: int, ts: int) -> Message:
        return Message(
            topic="t",
            partition=p,
            offset=off,
            value=b"x" * 10,
            timestamp=(TIMESTAMP_CREATE_TIME, ts),
        )

    ahead = Lookahead(max_bytes=60)
    for m in [
        msg(0, 0, 10),
        msg(0, 1, 20),
        msg(0, 2, 30),
        msg(1, 0, 15),
        msg(1, 1, 5),
        msg(2, 0, 25),
    ]:
        ahead.add(m)
    assert len(ahead) == 6 and ahead.bytes == 60 and ahead.full()
    got = [(m.partition(), m.offset()) for m in ahead.take(4)]
    assert got == [(0, 0), (1, 0), (1, 1), (0, 1)]  # 10, 15, then 5 (after 15 in p1), 20
    assert len(ahead) == 2 and not ahead.full()
    ahead.drop([2])
    assert [(m.partition(), m.offset()) for m in ahead.take(10)] == [(0, 2)]
    assert len(ahead) == 0 and ahead.bytes == 0 and ahead.take(5) == []


def _window(rank: int, w: int = 0, n: int = 2_000) -> dict[str, Any]:
    now = time.time_ns()
    return _record(
        _columns(n, seed=rank + 10 * w),
        job="loop",
        rank=rank,
        window_id=w,
        window_start_ns=now - 10**9,
        window_end_ns=now,
        coords={"dp_rank": rank, "dp_size": 8},
    )


def _publish(s: Settings, values: list[tuple[bytes, bytes]], partitions: int = 1) -> None:
    """Records to raw.kernels, the i-th on partition ``i % partitions``."""
    prod = Producer(s.kafka_config(**{"enable.idempotence": True}))
    for i, (key, value) in enumerate(values):
        prod.produce(LoopTopics.of(s.topic_prefix).raw, value, key, partition=i % partitions)
    assert prod.flush(30) == 0


def _committed(s: Settings, group: str, topic: str | None = None) -> int:
    """``group``'s committed offset on ``topic``[0] (default raw.kernels; -1001: none)."""
    tp = TopicPartition(topic or LoopTopics.of(s.topic_prefix).raw, 0)
    admin = AdminClient(s.kafka_config())
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [tp])])
    return int(res[group].result(timeout=15).topic_partitions[0].offset)


def _records(s: Settings, topic: str) -> int:
    """Records on every partition of ``topic`` (sum of high watermarks)."""
    c = Consumer(s.kafka_config(**{"group.id": "probe"}))
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts)
    finally:
        c.close()


def _members(s: Settings, group: str) -> int:
    admin = AdminClient(s.kafka_config())
    return len(admin.describe_consumer_groups([group])[group].result(timeout=15).members)


@contextmanager
def _running(loop: KafkaLoop) -> Iterator[threading.Thread]:
    """``loop`` running on a thread until the block ends."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            loop.run(stop)
        except BaseException as exc:  # the test's assertion names it
            errors.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    try:
        yield t
    finally:
        stop.set()
        t.join(60)
        assert not t.is_alive(), "the loop did not stop"
        assert not errors, errors


@pytest.mark.kafka
def test_the_loop_compresses_routes_commits_and_leaves(kafka: Settings, topic_prefix: str) -> None:
    """Whole windows become their summaries (equal to the offline ones) with the routed
    header and their L3 items; a record that does not decode goes to the DLQ with the reason;
    every offset is committed once acknowledged, and the static member leaves on a clean stop
    (the group is empty at once, not after the session timeout)."""
    s = dataclasses.replace(kafka, topic_prefix=topic_prefix)
    wins = [_window(r) for r in range(3)]
    values = [(f"loop/{w['rank']}".encode(), CODEC.encode("kernel_batch", w)) for w in wins]
    _publish(s, [*values[:2], (b"loop/9", b"not avro"), values[2]])
    watch = Watcher(s, ["dlq", "summary.kernels"], prefix=topic_prefix)
    loop = CompressorLoop(s, PipelineConfig(), instance_id="test-loop-a")
    group = loop_group(topic_prefix)
    try:
        with _running(loop):
            assert watch.wait_for(
                lambda w: len(w.get("summary.kernels")) >= 3 and len(w.get("dlq")) >= 1,
                timeout_s=60,
            )
            deadline = time.monotonic() + 20
            while _committed(s, group) != 4 and time.monotonic() < deadline:
                time.sleep(0.5)
            assert _committed(s, group) == 4  # after the last record, once acknowledged
            assert _members(s, group) == 1
        assert _members(s, group) == 0  # left on the clean stop (a static member)
        sums = {r["rank"]: r for r in watch.get("summary.kernels")}
        assert sums == {w["rank"]: summarize_batch(_wire(w)) for w in wins}
        (dlq,) = watch.get("dlq")
        assert dlq["offset"] == 2 and dlq["value"] == b"not avro", dlq
        assert dlq["reason"].startswith("bad-magic"), dlq["reason"]
        assert dlq["worker"] == group
        assert _records(s, LoopTopics.of(topic_prefix).scopes) >= 1, "no L3 items routed"
    finally:
        watch.close()


@pytest.mark.kafka
def test_the_loop_starts_where_the_faust_group_committed(
    kafka: Settings, topic_prefix: str
) -> None:
    """A partition the loop's group never committed starts at the offset the faust app
    that compressed before (``legacy_group``) committed: nothing read twice or skipped."""
    s = dataclasses.replace(kafka, topic_prefix=topic_prefix)
    wins = [_window(r) for r in range(4)]
    _publish(s, [(f"loop/{w['rank']}".encode(), CODEC.encode("kernel_batch", w)) for w in wins])
    legacy = f"{topic_prefix}-compressor-l3"
    old = Consumer(s.kafka_config(**{"group.id": legacy, "enable.auto.commit": False}))
    old.commit(offsets=[TopicPartition(LoopTopics.of(topic_prefix).raw, 0, 2)], asynchronous=False)
    old.close()
    watch = Watcher(s, ["summary.kernels"], prefix=topic_prefix)
    loop = CompressorLoop(s, PipelineConfig(), instance_id="off", legacy_group=legacy)
    try:
        with _running(loop):
            assert watch.wait_for(lambda w: len(w.get("summary.kernels")) >= 2, timeout_s=60)
            time.sleep(3.0)  # anything more would have come by now
        assert sorted(r["rank"] for r in watch.get("summary.kernels")) == [2, 3]
        assert _committed(s, loop_group(topic_prefix)) == 4
    finally:
        watch.close()


@pytest.mark.kafka
def test_a_summary_the_broker_refuses_sends_its_raw_record_to_the_dlq(
    kafka: Settings, topic_prefix: str
) -> None:
    """``summary.kernels`` takes no record over 200 bytes: the broker refuses each summary
    for good, so its raw record goes to the DLQ with the broker's reason; the loop goes on
    and commits past it (nothing retried for ever, nothing lost silently)."""
    s = dataclasses.replace(kafka, topic_prefix=topic_prefix)
    topic = LoopTopics.of(topic_prefix).summaries
    admin = AdminClient(s.kafka_config())
    res = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "200", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(timeout=15)
    _publish(s, [(b"loop/0", CODEC.encode("kernel_batch", _window(0)))])
    watch = Watcher(s, ["dlq", "summary.kernels"], prefix=topic_prefix)
    loop = CompressorLoop(s, PipelineConfig(), instance_id="off")
    try:
        with _running(loop):
            assert watch.wait_for(lambda w: len(w.get("dlq")) >= 1, timeout_s=60)
            deadline = time.monotonic() + 20
            while _committed(s, loop_group(topic_prefix)) != 1 and time.monotonic() < deadline:
                time.sleep(0.5)
            assert _committed(s, loop_group(topic_prefix)) == 1
        (dlq,) = watch.get("dlq")
        assert dlq["offset"] == 0 and dlq["reason"].startswith("handler-error"), dlq
        assert "too large" in dlq["reason"].lower() or "SIZE" in dlq["reason"], dlq["reason"]
        assert watch.get("summary.kernels") == []
    finally:
        watch.close()


@pytest.mark.kafka
def test_faust_compressors_and_loops_share_one_group_while_upgrading(
    kafka: Settings, tmp_path: Path
) -> None:
    """A faust worker running the compressor alone and the loop join ``<prefix>-compressor``
    together (both assign with ``roundrobin``): each takes a partition, every window is
    summarised once; once the faust worker stopped, the loop takes every partition."""
    from argus.kafka.admin import create_topics, delete_prefixed
    from tests.pipeline.harness import FAST, worker

    prefix = f"u{uuid.uuid4().hex[:10]}.argus"
    create_topics(kafka, prefix=prefix, partitions=2)
    s = dataclasses.replace(kafka, topic_prefix=prefix)
    group = loop_group(prefix)
    old = worker(prefix, tmp_path, ("compressor",), ARGUS_STREAMS__COMPRESSOR_RUNTIME="faust")
    watch = Watcher(s, ["dlq", "summary.kernels"], prefix=prefix)
    try:
        old.start()
        deadline = time.monotonic() + 60
        while _members(s, group) < 1 and time.monotonic() < deadline:
            time.sleep(1.0)
        pcfg = PipelineConfig(internal_partitions=int(FAST["ARGUS_STREAMS__INTERNAL_PARTITIONS"]))
        with _running(CompressorLoop(s, pcfg, instance_id="off")):
            deadline = time.monotonic() + 60
            while _assigned(s, group) != [1, 1] and time.monotonic() < deadline:
                time.sleep(1.0)
            assert _assigned(s, group) == [1, 1], old.log_tail()  # a partition each
            first = [_window(r) for r in range(8)]
            _publish(
                s,
                [(f"loop/{w['rank']}".encode(), CODEC.encode("kernel_batch", w)) for w in first],
                partitions=2,
            )
            assert watch.wait_for(lambda w: len(w.get("summary.kernels")) >= 8, timeout_s=60), (
                sorted(r["rank"] for r in watch.get("summary.kernels")),
                old.log_tail(),
            )
            old.stop()
            deadline = time.monotonic() + 60
            while _assigned(s, group) != [2] and time.monotonic() < deadline:
                time.sleep(1.0)
            assert _assigned(s, group) == [2]  # the loop alone, both partitions
            later = [_window(r, w=1) for r in range(8)]
            _publish(
                s,
                [(f"loop/{w['rank']}".encode(), CODEC.encode("kernel_batch", w)) for w in later],
                partitions=2,
            )
            assert watch.wait_for(lambda w: len(w.get("summary.kernels")) >= 16, timeout_s=60)
            time.sleep(2.0)
        got = sorted((r["rank"], r["window_id"]) for r in watch.get("summary.kernels"))
        assert got == sorted((r, w) for r in range(8) for w in (0, 1))  # each once
        assert watch.get("dlq") == []
    finally:
        old.stop()
        watch.close()
        delete_prefixed(kafka, prefix)


def _assigned(s: Settings, group: str) -> list[int]:
    """Partitions of raw.kernels each member of ``group`` holds, sorted (members without any
    left out; a faust member also holds its app's ``__assignor-__leader`` topic)."""
    raw = LoopTopics.of(s.topic_prefix).raw
    admin = AdminClient(s.kafka_config())
    desc = admin.describe_consumer_groups([group])[group].result(timeout=15)
    held = [sum(tp.topic == raw for tp in m.assignment.topic_partitions) for m in desc.members]
    return sorted(n for n in held if n)
