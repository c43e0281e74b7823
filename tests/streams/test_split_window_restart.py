"""A split kernel window survives a compressor restart between its parts (issue 19).

The compressor holds a window's parts in memory until its last part; each held part's offset
stays uncommitted until the window is summarised or given up, so a restarted compressor
re-reads the window from its first part. Before: the held parts' offsets were committed with
their poll, a restart lost them, and the rest of the window went to the DLQ as
``incomplete-batch``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from argus.collectors.runtime import MESSAGE_SLACK_BYTES
from argus.config import Settings
from argus.schemas import Codec
from argus.schemas.kernel_parts import PartAssembler, split_batch
from argus.summaries.summary_record import summarize_batch
from argus.topics import MAX_MESSAGE_BYTES, topic_name
from tests.collectors.test_batch_split import _columns, _record, _wire

LIMIT = MAX_MESSAGE_BYTES - MESSAGE_SLACK_BYTES - 16


def _window(rank: int, w: int, n: int, seed: int, now: int) -> dict[str, Any]:
    return _record(
        _columns(n, seed=seed),
        job="restart",
        rank=rank,
        window_id=w,
        window_start_ns=now - 10**9,
        window_end_ns=now,
        coords={"dp_rank": rank, "dp_size": 4},
    )


def test_every_token_comes_back_once() -> None:
    """Each part's token is handed back exactly once: with its completed window
    (``take_released``), a replaced copy, a window given up, or one expired by age."""
    parts = split_batch(_record(_columns(120_000, seed=1)), LIMIT)
    assert len(parts) == 3
    a = PartAssembler()
    assert a.add(parts[0], "p0") == (None, []) and a.add(parts[1], "p1") == (None, [])
    assert a.add(parts[1], "p1-again") == (None, [])  # a replayed copy replaces the first
    assert a.take_released() == ["p1"]
    whole, gone = a.add(parts[2], "p2")
    assert whole is not None and gone == []
    assert a.take_released() == ["p0", "p1-again", "p2"] and a.take_released() == []
    # expired by age: the window's parts come back as Incomplete, not as released
    a.add(parts[0], "q0")
    t_open = time.monotonic()
    assert a.expire(60.0, now_s=t_open + 30) == []
    (old,) = a.expire(60.0, now_s=t_open + 61)
    assert old.tokens == ["q0"] and old.have == [0] and a.open_windows == 0
    assert old.error().reason == "incomplete-batch" and a.take_released() == []


@pytest.mark.kafka
def test_compressor_restart_between_parts_loses_nothing(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    """Parts 0-1 of a 3-part window reach a compressor, which is then killed (SIGKILL, after
    it committed what it may); a new compressor gets part 2: the window is summarised whole
    (equal to the unsplit window's summary), nothing goes to the DLQ. While the window is
    open, the group's committed offset on the partition does not pass the window's first part."""
    from confluent_kafka import Producer

    from argus.streams.local_run import Watcher
    from tests.pipeline.harness import group_id, worker

    now = time.time_ns()
    codec = Codec()
    split = _window(0, 0, 120_000, 1, now)
    other = _window(1, 0, 1_000, 2, now)  # another rank, whole, after the first two parts
    later = _window(0, 50, 1_000, 3, now)  # rank 0's next window, after the last part
    pieces = split_batch(split, LIMIT)
    assert len(pieces) == 3
    raw = topic_name("raw.kernels", topic_prefix)
    prod = Producer(kafka.kafka_config(**{"enable.idempotence": True, "linger.ms": 5}))

    def send(key: bytes, rec: dict[str, Any]) -> None:
        prod.produce(raw, codec.encode("kernel_batch", rec), key, partition=0)
        assert prod.flush(30) == 0

    watch = Watcher(kafka, ["dlq", "summary.kernels"], prefix=topic_prefix)
    w1 = worker(topic_prefix, tmp_path, ("compressor",)).start()
    w2 = None
    try:
        send(b"restart/0", pieces[0])
        send(b"restart/0", pieces[1])
        send(b"restart/1", {**other, "part": 0, "parts": 1})
        assert watch.wait_for(lambda wt: len(wt.get("summary.kernels")) >= 1, timeout_s=120), (
            w1.log_tail()
        )
        # the compressor commits every second: give it several, then read the commit
        time.sleep(4.0)
        committed = _committed(kafka, group_id(topic_prefix, ("compressor",)), raw)
        # nothing committed yet (-1001) or the first part's offset, 0; before: 3
        assert committed in (-1001, 0), f"committed {committed}, past the first part (0)"
        w1.kill()
        w2 = worker(topic_prefix, tmp_path, ("compressor",)).start()
        send(b"restart/0", pieces[2])
        send(b"restart/0", {**later, "part": 0, "parts": 1})

        def done(wt: Watcher) -> bool:
            got = {(r["rank"], r["window_id"]) for r in wt.get("summary.kernels")}
            return {(0, 0), (0, 50)} <= got or bool(wt.get("dlq"))

        assert watch.wait_for(done, timeout_s=120), w2.log_tail()
        time.sleep(1.0)
        assert watch.get("dlq") == [], [d["reason"] for d in watch.get("dlq")]
        sums = {(r["rank"], r["window_id"]): r for r in watch.get("summary.kernels")}
        assert set(sums) == {(0, 0), (1, 0), (0, 50)}  # rank 1's again after the re-read
        assert sums[(0, 0)] == summarize_batch(_wire(split))
        assert w2.alive, w2.log_tail()
    finally:
        w1.stop()
        if w2 is not None:
            w2.stop()
        watch.close()


def _committed(settings: Settings, group: str, topic: str) -> int:
    """The group's committed offset on ``topic``[0] (-1001: none yet)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(settings.kafka_config())
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    res = admin.list_consumer_group_offsets([req])[group].result(timeout=15)
    return int(res.topic_partitions[0].offset)
