"""Read offset ranges of a topic with a throwaway consumer: one loop for every bounded read.

The drill-downs (:func:`argus.drill.read.read_topic`), replay
(:func:`argus.replay.read_range`) and the outbox's look at what a topic already holds
(:func:`argus.streams.topic_tail.identities_since`) each pick per partition the offsets
``[start, end)`` they want (watermarks, a tail, ``offsets_for_times``), then read them here:
:func:`scratch_consumer` (manual assignment, nothing committed), :func:`partitions`,
:func:`consume_ranges`. Decoding, key filters and what to do with a bad record stay with the
caller. Blocking (confluent-kafka); never on an event loop.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["consume_ranges", "partitions", "scratch_consumer"]


@contextmanager
def scratch_consumer(settings: Any, purpose: str) -> Iterator[Any]:
    """A confluent-kafka ``Consumer`` of ``settings`` (``kafka_config``) in its own group
    ``argus-<purpose>-<random>``, auto-commit off, closed on exit. ``purpose`` names the group
    prefix the secure broker's ACLs grant (``replay``, ``drill``, ``tail``)."""
    from confluent_kafka import Consumer

    cons = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"argus-{purpose}-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                # librdkafka waits 1 s (its default) before fetching a partition again once
                # its prefetch queue was full: a reader slower than the broker then idles
                # (bench_read_backoff.py, kernel batches at 0.2 ms a record: 1,302-1,338 against
                # 2,851-3,360 records/s)
                "fetch.queue.backoff.ms": 10,
            }
        )
    )
    try:
        yield cons
    finally:
        cons.close()


def partitions(cons: Any, topic: str, timeout_s: float = 10.0, settle_s: float = 3.0) -> list[int]:
    """Partition ids of ``topic``, ascending; empty when the topic does not exist.

    A topic created a moment ago may be unknown to the broker answering, or have no leader
    yet: it is asked again for up to ``settle_s`` before it counts as missing.

    Raises
    ------
    confluent_kafka.KafkaException
        The broker did not answer within ``timeout_s``.
    """
    deadline = time.monotonic() + settle_s
    while True:
        tmd = cons.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if tmd is not None and tmd.error is None and tmd.partitions:
            return sorted(tmd.partitions)
        if time.monotonic() >= deadline:
            return []
        time.sleep(0.2)


def consume_ranges(
    cons: Any,
    topic: str,
    ranges: Mapping[int, tuple[int, int]],
    *,
    timeout_s: float,
    timed_out: Callable[[dict[int, tuple[int, int]]], Exception],
    on_progress: Callable[[int], None] | None = None,
) -> Iterator[Any]:
    """The messages of ``topic`` at offsets ``start <= offset < end`` of each partition.

    Parameters
    ----------
    cons : confluent_kafka.Consumer
        Assigned here (from :func:`scratch_consumer`).
    topic : str
    ranges : mapping
        ``{partition: (start, end)}`` offsets; empty ones are skipped.
    timeout_s : float
        Seconds to read them all.
    timed_out : callable
        ``{partition: (start, end)}`` still unread -> the exception to raise at the deadline.
    on_progress : callable, optional
        Offsets done so far (all partitions), after each non-empty fetch.

    Yields
    ------
    confluent_kafka.Message
        Without errors; per partition in offset order, partitions interleaved. A partition
        is done at its last offset or at the first offset past it (a compacted or
        transactional topic may have no record at ``end - 1``).
    """
    left = {p: (s, e) for p, (s, e) in ranges.items() if e > s}
    if not left:
        return
    done = dict.fromkeys(left, 0)
    cons.assign([_tp(topic, p, s) for p, (s, _e) in left.items()])
    deadline = time.monotonic() + timeout_s
    while left:
        if time.monotonic() > deadline:
            raise timed_out(left)
        msgs = cons.consume(num_messages=1000, timeout=0.5)
        for m in msgs:
            if m.error() is not None:
                continue
            p, off = m.partition(), m.offset()
            if p is None or off is None or p not in left:
                continue
            start, end = left[p]
            done[p] = min(off + 1, end) - start
            if off + 1 >= end:
                del left[p]
            if off < end:
                yield m
        if on_progress is not None and msgs:
            on_progress(sum(done.values()))


def _tp(topic: str, partition: int, offset: int) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition, offset)
