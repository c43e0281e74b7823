"""The compressor on its own confluent-kafka consumer and producer, no faust (issue 21).

One thread: ``consume`` into a :class:`Lookahead` (partitions merged by broker time) -> 256
records at a time through the role (:class:`~argus.streams.roles.compressor.Compressor`, the
rules the faust agent of :mod:`argus.streams.agents.kernels` drives too) -> produce, while
librdkafka fetches, decompresses and sends in its own C threads: a third less CPU a raw
record than the faust agent (BENCHMARKS.md, "The compressor's own loop").
``streams.compressor_runtime = "kafka"`` (the default) runs it; what the faust worker gives
its agents, it does itself:

* **Durable commits.** Every :data:`COMMIT_INTERVAL_S` the producer is flushed (every
  summary, L3 item and DLQ record sent so far acknowledged), then each partition is
  committed after its last record taken, never past a split window's part still held
  (:class:`~argus.streams.held.HeldOffsets`): a restart re-reads an open window from its
  first part. A record the broker did not take (:class:`DeliveryFailed`) stops the loop
  before it commits anything more: the restarted worker reads the records again. One the
  broker refuses for good (too large) sends its raw record to the DLQ instead.
* **Rebalances** (``roundrobin``, eager: a revoke takes every partition). On revoke, flush and
  commit what is done, then drop the open split windows (their next owner re-reads them from
  the held offset); lost partitions are dropped without a commit. A partition without a
  committed offset in ``<prefix>-compressor`` starts where ``legacy_group`` (the faust app
  that compressed for the same worker's roles) committed it: switching runtimes neither
  skips nor repeats input.
* **Membership**: static (``group.instance.id``,
  :func:`argus.streams.static_membership.resolve`); a clean stop leaves the group
  (:func:`argus.streams.static_membership.leave`), a crash keeps the member for the restart.
* DLQ records as the faust workers write them (:func:`argus.streams.dlq.dlq_record`), the
  same metrics (records in/out, DLQ, poll size, compression ratio, lag in records and s).

A faust worker running the compressor alone reads in the same group with aiokafka's
``roundrobin`` assignor, this loop's too: during a rolling upgrade old and new members share
the partitions (docs/pipeline.md, "The compressor's runtime").
"""

from __future__ import annotations

import dataclasses
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

from argus.config import ConfigError, Settings
from argus.errors import ArgusError
from argus.malloc import keep_freed_blocks
from argus.routing import Routing
from argus.schemas import Codec
from argus.schemas.kernel_parts import Incomplete
from argus.streams import metrics, static_membership
from argus.streams.dlq import dlq_record
from argus.streams.fidelity import judge_samples
from argus.streams.groups import loop_group
from argus.streams.held import HeldOffsets
from argus.streams.limits import Limits
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.rekey import item_bytes, rekey_messages
from argus.streams.roles.compressor import Compressor, Made, Taken
from argus.streams.roles.context import partition_of
from argus.streams.roles.l3 import ROUTED_HEADER
from argus.streams.validate import Checker
from argus.summaries import summary_record
from argus.topics import topic_name

__all__ = ["COMMIT_INTERVAL_S", "CompressorLoop", "DeliveryFailed", "Lookahead", "LoopTopics"]

log = logging.getLogger("argus.streams")

POLL_MAX = 256
"""Raw records one ``consume`` hands over at most (one summarize call's worth)."""
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
PART_MAX_AGE_S = 120.0
"""A split window's parts leave their producer together (librdkafka retries a part for at
most ``message.timeout.ms``); one held longer than this will not complete."""
_EXPIRE_EVERY_S = 2.0
_LAG_EVERY_S = 5.0


class DeliveryFailed(ArgusError):
    """The broker did not take a record this loop produced (``message.timeout.ms`` passed,
    or an error librdkafka gave up on): the loop stops before its next commit, and the
    restarted worker reads the uncommitted input again."""


@dataclasses.dataclass(frozen=True)
class LoopTopics:
    """The loop's topics, prefixed: its input, its outputs, its DLQ."""

    raw: str
    summaries: str
    scopes: str
    dlq: str

    @classmethod
    def of(cls, prefix: str) -> LoopTopics:
        return cls(
            raw=topic_name("raw.kernels", prefix),
            summaries=topic_name("summary.kernels", prefix),
            scopes=topic_name("internal.l3-scopes", prefix),
            dlq=topic_name("dlq", prefix),
        )


class _HeldParts:
    """The role's part holder over :class:`HeldOffsets` (a token is the part's message)."""

    def __init__(self, held: HeldOffsets) -> None:
        self.held = held

    def hold(self, token: Any) -> None:
        self.held.hold(token.partition(), token.offset())

    def release(self, token: Any) -> None:
        self.held.release(token.partition(), token.offset())


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


class CompressorLoop:
    """The compressor role on confluent-kafka clients (module docstring). :meth:`run` it on
    one thread; every other method is called from that thread (librdkafka calls the
    rebalance and delivery callbacks from within ``consume``, ``poll`` and ``flush``)."""

    def __init__(
        self,
        settings: Settings,
        pcfg: PipelineConfig,
        *,
        instance_id: str | None = None,
        legacy_group: str | None = None,
    ) -> None:
        from argus.detectors.config import DetectorsConfig

        self.settings = settings
        self.pcfg = pcfg
        self.group = loop_group(settings.topic_prefix)
        self.worker = self.group
        self.legacy_group = legacy_group if legacy_group != self.group else None
        self.topics = LoopTopics.of(settings.topic_prefix)
        self.codec = Codec(registry_url=settings.schema_registry_url or None)
        self.held = HeldOffsets()  # partition (int) -> offsets of split windows' parts
        detectors = DetectorsConfig.from_settings(settings.section("detectors"))
        self.role = Compressor(
            self.codec,
            Checker(Limits.from_pipeline(pcfg)),
            Routing.from_config(detectors.routing),  # L3's: the same [detectors] config
            _HeldParts(self.held),
            fidelity_every=pcfg.fidelity_every,
            route_required=not pcfg.l3_route_summaries,
        )
        self.member = static_membership.resolve(instance_id, self.group, settings.state_dir)
        log.info("consumer group %s: group.instance.id %s", self.group, self.member or "-")
        conf: dict[str, Any] = {
            "group.id": self.group,
            "client.id": self.group,
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
                    "client.id": self.group,
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
        self._summary_parts: int | None = None  # partitions of summary.kernels (-1: unknown)
        self._caught_up: dict[tuple[str, int], float] = {}
        self._ratio_of: dict[str, Any] = {}  # job -> compression-ratio gauge child
        self._records_in = metrics.RECORDS_IN.labels("compressor", "raw.kernels")
        self._records_out = metrics.RECORDS_OUT.labels("compressor", "summary.kernels")
        self._poll_size = metrics.ROUTER_POLL.labels("compressor")
        now = time.monotonic()
        self._next_commit = now + COMMIT_INTERVAL_S
        self._next_expire = now + _EXPIRE_EVERY_S
        self._next_lag = now

    # -- the loop ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Compress until ``stop`` is set, then commit what is done and leave the group.

        Raises
        ------
        DeliveryFailed
            A record was not taken by the broker (nothing after it was committed).
        KafkaException
            A fatal client error (e.g. fenced by another member with the same instance id).
        """
        keep_freed_blocks()  # a poll's numpy temporaries reuse heap pages (argus.malloc)
        ensure_loop_topics(self.settings, self.pcfg)
        self.consumer.subscribe(
            [self.topics.raw],
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
        """One poll: take, summarise and send what ``consume`` gives; then the due chores
        (fidelity, expired parts, lag, commit). Returns the records consumed."""
        n = self._fill(timeout_s)
        msgs = self.ahead.take(POLL_MAX)
        if msgs:
            self._poll(msgs)
        judge_samples(self.role.due_samples(time.time()))
        self.producer.poll(0)  # delivery reports
        now = time.monotonic()
        if now >= self._next_expire:
            self._next_expire = now + _EXPIRE_EVERY_S
            self._release(self.role.parts.expire(PART_MAX_AGE_S))
        if now >= self._next_lag:
            self._next_lag = now + _LAG_EVERY_S
            self._note_lag()
        if now >= self._next_commit:
            self.commit()
            self._next_commit = time.monotonic() + COMMIT_INTERVAL_S
        return n

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
                    log.warning("compressor: consumer: %s", err)
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
            log.warning("compressor: last commit failed: %s", exc)
        finally:
            self.producer.flush(5.0)
            self.consumer.close()
        if commit and self.member and member_id:
            static_membership.leave(self.settings, self.group, member_id, self.member)

    def _poll(self, msgs: list[Message]) -> None:
        """The records of one poll, in runs of up to ``CHUNK_EVENTS`` kernel events: each
        run's complete windows compressed in one call, then sent in order (as the faust
        agent does)."""
        self._poll_size.observe(len(msgs))
        ready: list[Taken] = []
        n_events = 0
        for msg in msgs:
            taken = self._take(msg)
            if taken is None:
                continue
            ready.append(taken)
            n_events += taken.events
            if n_events > summary_record.CHUNK_EVENTS and len(ready) > 1:
                last = ready.pop()  # the window that made the run too long starts the next
                self._summarize(ready)
                ready, n_events = [last], last.events
        if ready:
            self._summarize(ready)

    def _take(self, msg: Message) -> Taken | None:
        """The role's take of one raw record; a bad one to the DLQ."""
        self._records_in.inc()
        part, offset = msg.partition() or 0, msg.offset() or 0
        kind, ts_ms = msg.timestamp()
        broker_s = ts_ms / 1e3 if kind != TIMESTAMP_NOT_AVAILABLE else None
        metrics.consumed(self.topics.raw, part, broker_s, offset)
        self.done[part] = offset + 1
        try:
            taken, given_up = self.role.take(msg.value() or b"", msg, part, broker_s)
        except Exception as exc:
            self._dlq(msg, exc)
            return None
        self._release(given_up)
        return taken

    def _summarize(self, ready: list[Taken]) -> None:
        """Compress ``ready``'s windows in one call; send their summaries in order, then
        their L3 items (one message per scope, :func:`~argus.streams.rekey.rekey_messages`)."""
        routed: dict[str, list[tuple[Message, tuple[bytes, bytes | None]]]] = {}
        for made in self.role.summarize(ready):
            msg = made.taken.token
            if made.error is not None:  # its summary or its L3 route failed: the reason
                log.warning("compressor: a window failed: %s", made.error)
                self._dlq(msg, made.error)
                continue
            try:
                self._send(made)
            except Exception as exc:  # refused by the producer (too large): the reason
                log.exception("compressor: a summary was not sent")
                self._dlq(msg, exc, reason="handler-error")
                continue
            for key, it in made.items:
                routed.setdefault(key, []).append((msg, item_bytes(it)))
        sent, parts = time.time(), self.pcfg.internal_partitions
        for key, items in routed.items():
            for owners, value in rekey_messages(items, sent):
                try:
                    self._produce(
                        self.topics.scopes, value, key.encode(), partition_of(key, parts), owners
                    )
                except KafkaException as exc:  # too large to re-key: its records to the DLQ
                    for msg in owners:
                        self._dlq(msg, exc)

    def _send(self, made: Made) -> None:
        """One window's summary, on the raw record's partition number (L3's per-partition
        watermark sees the compressor's catch-up skew between raw partitions)."""
        msg, batch = made.taken.token, made.taken.whole
        headers = [(ROUTED_HEADER, b"1")] if made.items else None
        part = self._same_partition(made.taken.part)
        self._produce(self.topics.summaries, made.value, made.key, part, [msg], headers)
        self._records_out.inc()
        raw_bytes = len(msg.value() or b"") * int(made.taken.piece.get("parts", 1))
        gauge = self._ratio_of.get(job := str(batch["job"]))  # ~: a window's parts near one size
        if gauge is None:
            gauge = self._ratio_of[job] = metrics.COMPRESSION.labels(job)
        gauge.set(raw_bytes / max(len(made.value), 1))

    def _same_partition(self, raw_partition: int) -> int | None:
        """The raw partition's number on summary.kernels when it has that many (else the
        key's hash)."""
        if self._summary_parts is None:
            try:
                md = self.consumer.list_topics(self.topics.summaries, timeout=10)
                self._summary_parts = len(md.topics[self.topics.summaries].partitions)
            except Exception:  # metadata unreadable: hash the key, as before
                self._summary_parts = -1
        return raw_partition if raw_partition < self._summary_parts else None

    def _produce(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        partition: int | None,
        owners: list[Message],
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Hand one record to librdkafka, waiting while its queue is full; ``owners``: the
        raw records it came from (their DLQ, should the broker refuse it for good)."""
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
                self._dlq(raw, KafkaException(err), reason="handler-error")
            return
        self.failed.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def _dlq(self, msg: Message, exc: BaseException, reason: str | None = None) -> None:
        """The raw record's bytes and the reason to ``argus.dlq`` (its delivery is awaited
        by the next commit, as every output's)."""
        why, rec = dlq_record(
            topic=msg.topic() or self.topics.raw,
            partition=msg.partition() or 0,
            offset=msg.offset() or 0,
            key=msg.key(),
            value=msg.value() or b"",
            exc=exc,
            worker=self.worker,
            max_value_bytes=self.pcfg.dlq_max_value_bytes,
            reason=reason,
        )
        self._produce(self.topics.dlq, self.codec.encode("dlq_record", rec), rec["key"], None, [])
        metrics.DLQ.labels("compressor", why).inc()
        log.warning(
            "%s[%s]@%s -> dlq: %s",
            rec["source_topic"],
            rec["partition"],
            rec["offset"],
            rec["reason"][:300],
        )

    def _release(self, given_up: list[Incomplete], dlq: bool = True) -> None:
        """DLQ the parts of windows given up (``dlq``), then release every part's offset."""
        for gone in given_up:
            err = gone.error()
            for msg in gone.tokens:
                if dlq:
                    self._dlq(msg, err)
                self.role.holder.release(msg)
        for msg in self.role.parts.take_released():
            self.role.holder.release(msg)

    # -- commits -------------------------------------------------------------------------------

    def commit(self, parts: Iterable[int] | None = None, *, wait_s: float | None = None) -> None:
        """Flush the producer, then commit each partition of ``parts`` (None: all assigned)
        after its last record taken, but not past its lowest held part.

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
                offsets.append(TopicPartition(self.topics.raw, p, at))
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:  # a rebalance under way: the next commit tries again
            log.warning("compressor: commit of %s failed: %s", self.topics.raw, exc)
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
                "compressor: %d records not acknowledged by the broker after %.0f s", left, waited
            )

    # -- rebalances ----------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.assigned = {tp.partition for tp in parts}
        log.info("compressor: assigned %s", sorted(self.assigned))
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
            log.warning("compressor: offsets of %s unread: %s", self.legacy_group, exc)
            return
        if not start:
            return
        for tp in parts:
            if tp.partition in start:
                tp.offset = start[tp.partition]
        log.info(
            "compressor: %s starts where %s committed: %s", self.group, self.legacy_group, start
        )
        consumer.assign(parts)

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        gone = {tp.partition for tp in parts}
        try:
            self.commit(gone)
        except DeliveryFailed:
            raise
        except Exception as exc:  # the uncommitted input is read again by the next owner
            log.warning("compressor: commit on revoke failed: %s", exc)
        self._drop(gone)

    def _on_lost(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self._drop({tp.partition for tp in parts})

    def _drop(self, gone: set[int]) -> None:
        """Forget the partitions ``gone`` and every open split window (eager rebalancing
        revokes all partitions at once); their next owner re-reads them from the held
        offsets."""
        self._release(self.role.parts.flush(), dlq=False)
        self.ahead.drop(gone)
        for p in gone:
            self.done.pop(p, None)
            self.committed.pop(p, None)
        self.assigned -= gone
        metrics.forget_offsets((self.topics.raw, p) for p in gone)

    # -- lag -----------------------------------------------------------------------------------

    def _note_lag(self) -> None:
        """Lag of each assigned partition: records not taken yet and seconds."""
        tps = [TopicPartition(self.topics.raw, p) for p in sorted(self.assigned)]
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
                "compressor",
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
        log.warning("compressor: kafka: %s", err)


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


def ensure_loop_topics(settings: Settings, pcfg: PipelineConfig) -> None:
    """Create the re-key topic the loop writes (``internal.l3-scopes``) when missing, as a
    faust worker creates its own (:mod:`argus.streams.worker_topics`).

    Raises
    ------
    ConfigError
        It exists with fewer partitions than ``streams.internal_partitions``: a scope's
        stable partition would not exist (and L3's cells would not be co-partitioned).
    """
    from argus.kafka.admin import ensure_topics, partition_count
    from argus.streams.worker_topics import rekey_config

    name = LoopTopics.of(settings.topic_prefix).scopes
    ensure_topics(
        settings,
        [name],
        partitions=pcfg.internal_partitions,
        replication=pcfg.replication,
        config=rekey_config(pcfg),
    )
    have = partition_count(settings, name)
    if have is not None and have < pcfg.internal_partitions:
        raise ConfigError(
            f"{name} has {have} partition(s), streams.internal_partitions is "
            f"{pcfg.internal_partitions}: give every worker the same setting (the topic was "
            "created with the first one)"
        )


def run_alone(settings: Settings, pcfg: PipelineConfig, instance_id: str | None) -> None:
    """``argus worker compressor`` on the loop: the main thread runs it until SIGTERM or
    SIGINT; SIGUSR1 prints every thread's stack to stderr (as mode's ``cry`` does for a
    faust worker)."""
    import faulthandler
    import signal

    from argus.malloc import no_numpy_hugepages

    no_numpy_hugepages()  # a worker's large arrays in 4 KB pages (argus.malloc)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    CompressorLoop(settings, pcfg, instance_id=instance_id).run(stop)


def start_beside(
    settings: Settings, pcfg: PipelineConfig, instance_id: str | None, legacy_group: str
) -> tuple[threading.Thread, threading.Event, list[BaseException]]:
    """The loop on a thread of its own beside a faust worker (whose app runs the process's
    other roles): ``(thread, stop flag, errors)``. Should the loop fail, it sends the process
    SIGTERM (the faust worker stops cleanly) and leaves its error in ``errors`` for the
    caller's exit status."""
    import os
    import signal

    loop = CompressorLoop(settings, pcfg, instance_id=instance_id, legacy_group=legacy_group)
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            loop.run(stop)
        except BaseException as exc:
            log.critical("compressor loop stopped: %s", exc, exc_info=True)
            errors.append(exc)
            os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=target, name="compressor-loop", daemon=True)
    thread.start()
    return thread, stop, errors
