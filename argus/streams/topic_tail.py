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
from collections.abc import Callable, Collection, Mapping
from typing import Any

from argus.errors import ArgusError
from argus.kafka.read import consume_ranges, partitions, scratch_consumer
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
    from confluent_kafka import KafkaException, TopicPartition

    want = {k.encode() for k in keys}
    out: set[str] = set()
    if not want:
        return out
    deadline = time.monotonic() + timeout_s
    with scratch_consumer(settings, "tail") as cons:
        try:
            parts = partitions(cons, topic)
            if not parts:
                raise TailError(f"topic {topic} does not exist")
            starts = cons.offsets_for_times(
                [TopicPartition(topic, p, max(0, since_ms)) for p in parts], 10
            )
            ranges: dict[int, tuple[int, int]] = {}
            for tp in starts:
                low, high = cons.get_watermark_offsets(TopicPartition(topic, tp.partition), 10)
                ranges[tp.partition] = (max(tp.offset if tp.offset >= 0 else high, low), high)
        except KafkaException as exc:
            raise TailError(f"{topic}: broker did not answer ({exc})") from exc

        def timed_out(left: dict[int, tuple[int, int]]) -> TailError:
            unread = {p: f"{s}..{e}" for p, (s, e) in left.items()}
            return TailError(f"{topic}: tail not read within {timeout_s:.0f} s ({unread} left)")

        for m in consume_ranges(
            cons, topic, ranges, timeout_s=deadline - time.monotonic(), timed_out=timed_out
        ):
            if m.key() not in want:
                continue
            try:
                _, rec = codec.decode(m.value())
            except ArgusError as exc:
                log.warning(
                    "%s[%s]@%s: undecodable, skipped (%s)", topic, m.partition(), m.offset(), exc
                )
                continue
            out.add(identity(rec))
    return out
