"""A role on its own confluent-kafka consumer and producer, no faust: the loop's machinery.

:class:`KafkaLoop` is what a faust worker gives its agents, done on one thread over
librdkafka (whose own C threads fetch, decompress and send); a subclass says what a poll's
records become (:meth:`KafkaLoop.handle`) and what else is due (:meth:`KafkaLoop.chores`).
The compressor runs on it (:mod:`argus.streams.compressor_loop`).

* **Polls**: ``consume`` into a :class:`Lookahead` (partitions merged by broker time), then
  :data:`POLL_MAX` records at a time to :meth:`KafkaLoop.handle`.
* **Durable commits.** Every :data:`COMMIT_INTERVAL_S` the producer is flushed (every record
  sent so far acknowledged, DLQ records included), then each partition is committed after
  its last record taken, never past an offset held in :attr:`KafkaLoop.held`
  (:class:`~argus.streams.held.HeldOffsets`: input whose effect is still only in memory). A
  record the broker did not take (:class:`DeliveryFailed`) stops the loop before it commits
  anything more: the restarted worker reads the records again. One the broker refuses for
  good (too large) sends the records it came from to the DLQ instead.
* **Rebalances** (``roundrobin``, eager: a revoke takes every partition). On revoke, flush and
  commit what is done, then :meth:`KafkaLoop.forget` the partitions' open state (their next
  owner re-reads it from the held offsets); lost partitions are forgotten without a commit.
  A partition without a committed offset in the loop's group starts where ``legacy_group``
  (the faust app that ran the role for the same worker's roles) committed it: switching
  runtimes neither skips nor repeats input.
* **Membership**: static (``group.instance.id``,
  :func:`argus.streams.static_membership.resolve`); a clean stop leaves the group
  (:func:`argus.streams.static_membership.leave`), a crash keeps the member for the restart.
* DLQ records as the faust workers write them (:func:`argus.streams.dlq.dlq_record`), the
  same metrics (records in, DLQ, poll size, lag in records and s), labelled with the role.
"""

from __future__ import annotations

import functools
import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from argus.config import Settings
from argus.errors import ArgusError
from argus.malloc import keep_freed_blocks
from argus.schemas import Codec
from argus.streams import metrics, static_membership
from argus.streams.dlq import dlq_record
from argus.streams.held import HeldOffsets
from argus.streams.pipeline_config import PipelineConfig

__all__ = [
    "COMMIT_INTERVAL_S",
    "POLL_MAX",
    "DeliveryFailed",
    "KafkaLoop",
    "Lookahead",
    "start_beside",
]

log = logging.getLogger("argus.streams")

POLL_MAX = 256
"""Input records one ``consume`` (and one :meth:`KafkaLoop.handle`) takes at most."""
POLL_TIMEOUT_S = 0.5
"""How long one ``consume`` waits for a first record (s): the stop flag's reaction time."""
LOOKAHEAD_BYTES = 32 << 20
"""Fetched records the loop holds to merge its partitions by broker time (:class:`Lookahead`);
one fetch response brings at most this much (``fetch.max.bytes``), so all of a response's
partitions are merged. 256 KiB partition fetches instead of the merge (the first try)
capped a loaded compressor at ~400 records/s, a quarter of a core busy: a fetch then brings
one producer batch a partition, and the loop waited on round trips (2,048 ranks live)."""
FETCH_QUEUE_BACKOFF_MS = 10
"""How long librdkafka postpones a partition's next fetch once its prefetch queue is over
``queued.max.messages.kbytes`` (ms; librdkafka's default is 1,000). One fetch response fills
the queue (up to :data:`LOOKAHEAD_BYTES`), and the loop drains it in well under a second: with
the default the loop then waited for the next fetch half of its time, and a loaded
compressor took ~600 records/s at a third of a core while 100,000 records waited on the
broker (4,096 ranks live, BENCHMARKS.md)."""
COMMIT_INTERVAL_S = 1.0
"""Flush and commit this often (s): the faust workers' ``broker_commit_interval``."""
WARN_AFTER_S = 30.0
"""A flush still waiting after this long is logged, and again each time as long passes."""
_LAG_EVERY_S = 5.0


class DeliveryFailed(ArgusError):
    """The broker did not take a record this loop produced (``message.timeout.ms`` passed,
    or an error librdkafka gave up on): the loop stops before its next commit, and the
    restarted worker reads the uncommitted input again."""


def _permanent(err: KafkaError) -> bool:
    """A delivery error that no retry cures (the record is too large or malformed)."""
    return err.code() in (
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.INVALID_MSG,
        KafkaError.INVALID_RECORD,
        KafkaError.RECORD_LIST_TOO_LARGE,
    )


class Lookahead:
    """Records fetched but not taken yet, per partition, handed over merged by broker
    timestamp.

    librdkafka queues a fetch response's records partition after partition, and a
    producer's record batch (a whole one per fetch, KIP-74) can hold hundreds: taken in
    queue order, a consumer catching up (a late start, a restart) compressed 600 records
    of one partition (38 windows of its ranks) before the other partition's first, and
    L3 closed windows without the ranks not read yet (the differential ``late-l3`` run,
    96-448 records late). Merged by the time the broker logged them, the ranks of all
    partitions move on together, as their collectors wrote them; what no fetch brought yet
    cannot be waited for (L3's watermark, the lowest over input partitions, holds back for
    a partition it has seen). Each partition's records stay in offset order. Filled up to
    its ``max_bytes`` (:meth:`full`), at least one fetch response's worth."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.parts: dict[int, deque[Message]] = {}
        self.bytes = 0
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def full(self) -> bool:
        return self.bytes >= self.max_bytes

    def add(self, msg: Message) -> None:
        self.parts.setdefault(msg.partition() or 0, deque()).append(msg)
        self.bytes += len(msg.value() or b"")
        self._n += 1

    def take(self, n: int) -> list[Message]:
        """Up to ``n`` records, oldest broker timestamp first across partitions."""
        heads = [(_ts(q[0]), p) for p, q in self.parts.items() if q]
        heapq.heapify(heads)
        out: list[Message] = []
        while heads and len(out) < n:
            _, p = heapq.heappop(heads)
            q = self.parts[p]
            msg = q.popleft()
            out.append(msg)
            self.bytes -= len(msg.value() or b"")
            if q:
                heapq.heappush(heads, (_ts(q[0]), p))
        self._n -= len(out)
        return out

    def drop(self, parts: Iterable[int]) -> None:
        """Forget the records of ``parts`` (revoked: their next owner reads them)."""
        for p in parts:
            for msg in self.parts.pop(p, ()):
                self.bytes -= len(msg.value() or b"")
                self._n -= 1


def _ts(msg: Message) -> int:
    """A record's broker timestamp (ms; -1 when it has none: first)."""
    kind, ts = msg.timestamp()
    return int(ts) if kind != TIMESTAMP_NOT_AVAILABLE else -1


class KafkaLoop:
    """A role's loop on confluent-kafka clients (module docstring). :meth:`run` it on one
    thread; every other method is called from that thread (librdkafka calls the rebalance
    and delivery callbacks from within ``consume``, ``poll`` and ``flush``).

    ``role`` labels its metrics and logs; it reads ``source`` in consumer group ``group``
    and writes its DLQ records to ``dlq`` (topic names, prefixed)."""

    def __init__(
        self,
        settings: Settings,
        pcfg: PipelineConfig,
        *,
        role: str,
        group: str,
        source: str,
        dlq: str,
        instance_id: str | None = None,
        legacy_group: str | None = None,
    ) -> None:
        self.settings = settings
        self.pcfg = pcfg
        self.role_name = role
        self.group = group
        self.worker = group
        self.source = source
        self.dlq_topic = dlq
        self.legacy_group = legacy_group if legacy_group != group else None
        self.codec = Codec(registry_url=settings.schema_registry_url or None)
        self.held = HeldOffsets()  # partition (int) -> offsets no commit may pass
        self.member = static_membership.resolve(instance_id, group, settings.state_dir)
        log.info("consumer group %s: group.instance.id %s", group, self.member or "-")
        conf: dict[str, Any] = {
            "group.id": group,
            "client.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            # a faust app without tables (a compressor-only worker) assigns with aiokafka's
            # round-robin: the same protocol, so old and new share the group while upgrading
            "partition.assignment.strategy": "roundrobin",
            "max.partition.fetch.bytes": pcfg.fetch_bytes,
            "fetch.max.bytes": LOOKAHEAD_BYTES,
            "queued.max.messages.kbytes": LOOKAHEAD_BYTES >> 10,  # librdkafka's own prefetch
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            "error_cb": self._client_error,
        }
        if self.member:
            conf["group.instance.id"] = self.member
        self.consumer = Consumer(settings.kafka_config(**conf))
        self.producer = Producer(
            settings.kafka_config(
                **{
                    "client.id": group,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": pcfg.producer_linger_s * 1e3,
                    "batch.size": pcfg.producer_batch_bytes,
                    "partitioner": "murmur2_random",  # the Java client's (and faust's) hashing
                    "error_cb": self._client_error,
                }
            )
        )
        self.ahead = Lookahead(LOOKAHEAD_BYTES)
        self.assigned: set[int] = set()
        self.done: dict[int, int] = {}  # partition -> offset after its last record taken
        self.committed: dict[int, int] = {}  # partition -> offset this loop committed
        self.failed: list[str] = []  # deliveries the broker did not take
        self._seeded: set[int] = set()  # partitions looked up in legacy_group
        self._caught_up: dict[tuple[str, int], float] = {}
        suffix = metrics.topic_label(source, settings.topic_prefix)
        self._records_in = metrics.RECORDS_IN.labels(role, suffix)
        self._poll_size = metrics.ROUTER_POLL.labels(role)
        now = time.monotonic()
        self._next_commit = now + COMMIT_INTERVAL_S
        self._next_lag = now

    # -- what a role adds ----------------------------------------------------------------------

    def handle(self, msgs: list[Message]) -> None:
        """One poll's records (``msgs``, merged by broker time); :meth:`taken` each."""
        raise NotImplementedError

    def chores(self) -> None:
        """What else is due after each poll (the producer's delivery reports come next)."""

    def forget(self, gone: set[int]) -> None:
        """Drop what is open in memory for the input partitions ``gone`` (revoked or lost)
        and release its held offsets: their next owner reads it again."""

    def prepare(self) -> None:
        """Before subscribing (e.g. create the topics the loop writes)."""

    # -- the loop ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set, then commit what is done and leave the group.

        Raises
        ------
        DeliveryFailed
            A record was not taken by the broker (nothing after it was committed).
        KafkaException
            A fatal client error (e.g. fenced by another member with the same instance id).
        """
        keep_freed_blocks()  # a poll's numpy temporaries reuse heap pages (argus.malloc)
        self.prepare()
        self.consumer.subscribe(
            [self.source],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        clean = False
        try:
            while not stop.is_set():
                self.step(POLL_TIMEOUT_S)
            clean = True
        finally:
            self.close(commit=clean)

    def step(self, timeout_s: float) -> int:
        """One poll: :meth:`handle` what ``consume`` gives; then the due chores (the role's,
        lag, commit). Returns the records consumed."""
        n = self._fill(timeout_s)
        msgs = self.ahead.take(POLL_MAX)
        if msgs:
            self._poll_size.observe(len(msgs))
            self.handle(msgs)
        self.chores()
        self.producer.poll(0)  # delivery reports
        now = time.monotonic()
        if now >= self._next_lag:
            self._next_lag = now + _LAG_EVERY_S
            self._note_lag()
        if now >= self._next_commit:
            self.commit()
            self._next_commit = time.monotonic() + COMMIT_INTERVAL_S
        return n

    def taken(self, msg: Message) -> float | None:
        """Count ``msg`` as taken (metrics; the offset the next commit may pass); returns its
        broker time (s since the epoch; None when it has none)."""
        self._records_in.inc()
        part, offset = msg.partition() or 0, msg.offset() or 0
        kind, ts_ms = msg.timestamp()
        broker_s = ts_ms / 1e3 if kind != TIMESTAMP_NOT_AVAILABLE else None
        metrics.consumed(self.source, part, broker_s, offset)
        self.done[part] = offset + 1
        return broker_s

    def _fill(self, timeout_s: float) -> int:
        """Move what librdkafka fetched into the lookahead (waiting up to ``timeout_s`` only
        while the lookahead is empty); returns the records moved."""
        n = 0
        wait = 0.0 if len(self.ahead) else timeout_s
        while not self.ahead.full():
            msgs = self.consumer.consume(POLL_MAX, wait)
            if not msgs:
                break
            wait = 0.0
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise KafkaException(err)
                    log.warning("%s: consumer: %s", self.role_name, err)
                    continue
                self.ahead.add(msg)
                n += 1
        return n

    def close(self, *, commit: bool = True) -> None:
        """Flush (``WARN_AFTER_S`` at most) and commit what is done, close the consumer, and
        leave the group as a static member does not by itself."""
        member_id = None
        try:
            if commit:
                self.commit(wait_s=WARN_AFTER_S)
            member_id = self.consumer.memberid()
        except Exception as exc:  # broker gone: the uncommitted input is read again
            log.warning("%s: last commit failed: %s", self.role_name, exc)
        finally:
            self.producer.flush(5.0)
            self.consumer.close()
        if commit and self.member and member_id:
            static_membership.leave(self.settings, self.group, member_id, self.member)

    def produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        partition: int | None,
        owners: list[Message],
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Hand one record to librdkafka, waiting while its queue is full; ``owners``: the
        input records it came from (their DLQ, should the broker refuse it for good)."""
        on_delivery = functools.partial(self._delivered, owners)
        kw: dict[str, Any] = {"headers": headers} if headers else {}
        if partition is not None:
            kw["partition"] = partition
        while True:
            try:
                self.producer.produce(topic, value, key, on_delivery=on_delivery, **kw)
                return
            except BufferError:  # queue.buffering.max.* reached: let deliveries drain
                self.producer.poll(0.05)

    def _delivered(self, owners: list[Message], err: KafkaError | None, msg: Message) -> None:
        if err is None:
            return
        if _permanent(err) and owners:
            for raw in owners:
                self.dlq(raw, KafkaException(err), reason="handler-error")
            return
        self.failed.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def dlq(self, msg: Message, exc: BaseException, reason: str | None = None) -> None:
        """The input record's bytes and the reason to ``argus.dlq`` (its delivery is awaited
        by the next commit, as every output's)."""
        why, rec = dlq_record(
            topic=msg.topic() or self.source,
            partition=msg.partition() or 0,
            offset=msg.offset() or 0,
            key=msg.key(),
            value=msg.value() or b"",
            exc=exc,
            worker=self.worker,
            max_value_bytes=self.pcfg.dlq_max_value_bytes,
            reason=reason,
        )
        self.produce(self.dlq_topic, self.codec.encode("dlq_record", rec), rec["key"], None, [])
        metrics.DLQ.labels(self.role_name, why).inc()
        log.warning(
            "%s[%s]@%s -> dlq: %s",
            rec["source_topic"],
            rec["partition"],
            rec["offset"],
            rec["reason"][:300],
        )

    # -- commits -------------------------------------------------------------------------------

    def commit(self, parts: Iterable[int] | None = None, *, wait_s: float | None = None) -> None:
        """Flush the producer, then commit each partition of ``parts`` (None: all assigned)
        after its last record taken, but not past its lowest held offset.

        Raises
        ------
        DeliveryFailed
            A record was not taken by the broker; or (``wait_s``) not acknowledged in time.
        """
        self._flush(wait_s)
        offsets = []
        for p in sorted(self.assigned if parts is None else parts):
            nxt = self.done.get(p)
            if nxt is None:
                continue
            low = self.held.lowest(p)
            at = nxt if low is None else min(nxt, low)
            if self.committed.get(p) != at:
                offsets.append(TopicPartition(self.source, p, at))
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:  # a rebalance under way: the next commit tries again
            log.warning("%s: commit of %s failed: %s", self.role_name, self.source, exc)
            return
        for tp in offsets:
            self.committed[tp.partition] = tp.offset

    def _flush(self, wait_s: float | None) -> None:
        t0 = time.monotonic()
        while True:
            left = self.producer.flush(WARN_AFTER_S if wait_s is None else wait_s)
            if self.failed:
                raise DeliveryFailed(
                    f"{len(self.failed)} records not taken by the broker, first: {self.failed[0]}"
                )
            if left == 0:
                return
            waited = time.monotonic() - t0
            if wait_s is not None:
                raise DeliveryFailed(f"{left} records not acknowledged after {waited:.0f} s")
            log.warning(
                "%s: %d records not acknowledged by the broker after %.0f s",
                self.role_name,
                left,
                waited,
            )

    # -- rebalances ----------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned = {tp.partition for tp in parts}
        log.info("%s: assigned %s", self.role_name, sorted(self.assigned))
        fresh = [tp for tp in parts if tp.partition not in self._seeded]
        if not self.legacy_group or not fresh:
            return
        self._seeded.update(tp.partition for tp in fresh)
        try:
            mine = consumer.committed(fresh, timeout=10)
            start = _committed(
                self.settings, self.legacy_group, [tp for tp in mine if tp.offset < 0]
            )
        except KafkaException as exc:
            log.warning("%s: offsets of %s unread: %s", self.role_name, self.legacy_group, exc)
            return
        if not start:
            return
        for tp in parts:
            if tp.partition in start:
                tp.offset = start[tp.partition]
        log.info(
            "%s: %s starts where %s committed: %s",
            self.role_name,
            self.group,
            self.legacy_group,
            start,
        )
        consumer.assign(parts)

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in parts}
        try:
            self.commit(gone)
        except DeliveryFailed:
            raise
        except Exception as exc:  # the uncommitted input is read again by the next owner
            log.warning("%s: commit on revoke failed: %s", self.role_name, exc)
        self._drop(gone)

    def _on_lost(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self._drop({tp.partition for tp in parts})

    def _drop(self, gone: set[int]) -> None:
        """Forget the partitions ``gone`` (:meth:`forget` first); their next owner re-reads
        them from the held offsets."""
        self.forget(gone)
        self.ahead.drop(gone)
        for p in gone:
            self.done.pop(p, None)
            self.committed.pop(p, None)
        self.assigned -= gone
        metrics.forget_offsets((self.source, p) for p in gone)

    # -- lag -----------------------------------------------------------------------------------

    def _note_lag(self) -> None:
        """Lag of each assigned partition: records not taken yet and seconds."""
        tps = [TopicPartition(self.source, p) for p in sorted(self.assigned)]
        try:
            positions = self.consumer.position(tps)
        except KafkaException:  # partitions moving during a rebalance
            return
        for tp in positions:
            try:
                _lo, high = self.consumer.get_watermark_offsets(tp, timeout=2)
            except KafkaException:
                continue
            pos = tp.offset if tp.offset >= 0 else self.done.get(tp.partition, high)
            metrics.note_lag(
                self.role_name,
                tp.topic,
                tp.partition,
                self.settings.topic_prefix,
                high=high,
                position=pos,
                caught_up=self._caught_up,
                now_s=time.time(),
            )

    def _client_error(self, err: KafkaError) -> None:
        """librdkafka's client-level errors (broker down, refused join): logged; fatal ones
        surface in ``consume`` and stop the loop."""
        log.warning("%s: kafka: %s", self.role_name, err)


def _committed(settings: Settings, group: str, tps: list[TopicPartition]) -> dict[int, int]:
    """``{partition: offset}`` committed by consumer group ``group`` (none: left out)."""
    if not tps:
        return {}
    probe = Consumer(settings.kafka_config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        got = probe.committed(tps, timeout=10)
    finally:
        probe.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def start_beside(
    loop: KafkaLoop, name: str
) -> tuple[threading.Thread, threading.Event, list[BaseException]]:
    """``loop`` on a thread of its own beside a faust worker (whose app runs the process's
    other roles): ``(thread, stop flag, errors)``. Should the loop fail, it sends the process
    SIGTERM (the faust worker stops cleanly) and leaves its error in ``errors`` for the
    caller's exit status."""
    import os
    import signal

    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            loop.run(stop)
        except BaseException as exc:
            log.critical("%s stopped: %s", name, exc, exc_info=True)
            errors.append(exc)
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread, stop, errors
