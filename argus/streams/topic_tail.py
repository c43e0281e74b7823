"""What a topic already holds: the identities of its recent records of some keys.

The funnel's outbox asks this after a restart, before it sends records a crashed process
may already have sent (:mod:`argus.streams.outbox`). Blocking (confluent-kafka); call it
from an executor, never on the event loop.

Every partition is read from the first record with a timestamp at or after ``since_ms``
(``offsets_for_times``) to the high watermark the read began with; only records whose key is
one of ``keys`` are decoded. Kafka timestamps are the producer's create times, so ``since_ms``
taken on the clock of the process that sent (less a margin for clock steps) covers its sends.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any

from argus.errors import ArgusError
from argus.schemas import Codec

__all__ = ["TailError", "identities_since"]

log = logging.getLogger("argus.streams")


class TailError(ArgusError):
    """The topic's tail could not be read (no such topic, broker down, read timed out)."""


def identities_since(
    settings: Any,
    codec: Codec,
    topic: str,
    keys: Collection[str],
    since_ms: int,
    identity: Callable[[Mapping[str, Any]], str],
    *,
    timeout_s: float = 30.0,
) -> set[str]:
    """``identity(record)`` of every record of ``topic`` keyed by one of ``keys`` and
    timestamped at or after ``since_ms`` (ms since epoch).

    Parameters
    ----------
    settings : argus.config.Settings
        Brokers and security (``kafka_config``).
    codec : Codec
    topic : str
        Full topic name.
    keys : collection of str
        Record keys (UTF-8) to look at; others are skipped undecoded.
    since_ms : int
    identity : callable
        Decoded record -> its identity (e.g. the anomaly ``id``).
    timeout_s : float
        Give up (:class:`TailError`) when the range was not read by then (s).

    Raises
    ------
    TailError
        No such topic, the broker did not answer, or the read timed out. (A record of one
        of ``keys`` that does not decode is logged and skipped: a record argus wrote decodes.)
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    want = {k.encode() for k in keys}
    out: set[str] = set()
    if not want:
        return out
    deadline = time.monotonic() + timeout_s
    cons = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"argus-tail-{uuid.uuid4().hex[:12]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            }
        )
    )
    try:
        try:
            md = cons.list_topics(topic, timeout=10)
            tmd = md.topics.get(topic)
            if tmd is None or tmd.error is not None or not tmd.partitions:
                raise TailError(f"topic {topic} does not exist")
            parts = sorted(tmd.partitions)
            starts = cons.offsets_for_times(
                [TopicPartition(topic, p, max(0, since_ms)) for p in parts], 10
            )
            ranges: dict[int, tuple[int, int]] = {}
            for tp in starts:
                low, high = cons.get_watermark_offsets(TopicPartition(topic, tp.partition), 10)
                start = max(tp.offset if tp.offset >= 0 else high, low)
                if high > start:
                    ranges[tp.partition] = (start, high)
        except KafkaException as exc:
            raise TailError(f"{topic}: broker did not answer ({exc})") from exc
        if not ranges:
            return out
        cons.assign([TopicPartition(topic, p, s) for p, (s, _) in ranges.items()])
        while ranges:
            if time.monotonic() > deadline:
                left = {p: f"{s}..{e}" for p, (s, e) in ranges.items()}
                raise TailError(f"{topic}: tail not read within {timeout_s:.0f} s ({left} left)")
            for m in cons.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    continue
                p, off = m.partition(), m.offset()
                if p is None or off is None or p not in ranges:
                    continue
                end = ranges[p][1]
                if off + 1 >= end:
                    del ranges[p]
                if off >= end or m.key() not in want:
                    continue
                try:
                    _, rec = codec.decode(m.value())
                except ArgusError as exc:
                    log.warning("%s[%s]@%s: undecodable, skipped (%s)", topic, p, off, exc)
                    continue
                out.add(identity(rec))
    finally:
        cons.close()
    return out
