"""The compressor on its own confluent-kafka consumer and producer, no faust (issue 21).

One thread (:class:`~argus.streams.kafka_loop.KafkaLoop`: polls merged by broker time,
durable commits, rebalances, static membership, DLQ and metrics as the faust workers have
them) -> 256 records at a time through the role
(:class:`~argus.streams.roles.compressor.Compressor`, the rules the faust agent of
:mod:`argus.streams.agents.kernels` drives too) -> produce, while librdkafka fetches,
decompresses and sends in its own C threads: a third less CPU a raw record than the faust
agent (BENCHMARKS.md, "The compressor's own loop"). ``streams.compressor_runtime = "kafka"``
(the default) runs it. What it adds to the loop:

* **Held parts.** The commits never pass a split window's part still held (the loop's
  :class:`~argus.streams.held.HeldOffsets`): a restart re-reads an open window from its first
  part; on a revoke the open split windows are dropped (their next owner re-reads them).
* **Outputs**: each window's summary on ``summary.kernels`` (the raw record's partition
  number), its L3 items on ``l3-scopes`` (one message per scope and run); a window that fails
  sends its raw record to the DLQ with the reason; the fidelity check of sampled windows.
* **Its group** is ``<prefix>-compressor``. A partition without a committed offset there
  starts where ``legacy_group`` (the faust app that compressed for the same worker's roles)
  committed it.

A faust worker running the compressor alone reads in the same group with aiokafka's
``roundrobin`` assignor, this loop's too: during a rolling upgrade old and new members share
the partitions (docs/pipeline.md, "The compressor's runtime").
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaException, Message

from argus.config import ConfigError, Settings
from argus.routing import Routing
from argus.schemas.kernel_parts import Incomplete
from argus.streams import metrics
from argus.streams.fidelity import judge_samples
from argus.streams.groups import loop_group
from argus.streams.held import HeldOffsets
from argus.streams.kafka_loop import (
    COMMIT_INTERVAL_S,
    DeliveryFailed,
    KafkaLoop,
    Lookahead,
)
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

PART_MAX_AGE_S = 120.0
"""A split window's parts leave their producer together (librdkafka retries a part for at
most ``message.timeout.ms``); one held longer than this will not complete."""
_EXPIRE_EVERY_S = 2.0


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


class CompressorLoop(KafkaLoop):
    """The compressor role on a :class:`~argus.streams.kafka_loop.KafkaLoop` (module
    docstring)."""

    def __init__(
        self,
        settings: Settings,
        pcfg: PipelineConfig,
        *,
        instance_id: str | None = None,
        legacy_group: str | None = None,
    ) -> None:
        from argus.detectors.config import DetectorsConfig

        self.topics = LoopTopics.of(settings.topic_prefix)
        super().__init__(
            settings,
            pcfg,
            role="compressor",
            group=loop_group(settings.topic_prefix),
            source=self.topics.raw,
            dlq=self.topics.dlq,
            instance_id=instance_id,
            legacy_group=legacy_group,
        )
        detectors = DetectorsConfig.from_settings(settings.section("detectors"))
        self.role = Compressor(
            self.codec,
            Checker(Limits.from_pipeline(pcfg)),
            Routing.from_config(detectors.routing),  # L3's: the same [detectors] config
            _HeldParts(self.held),
            fidelity_every=pcfg.fidelity_every,
            route_required=not pcfg.l3_route_summaries,
        )
        self._summary_parts: int | None = None  # partitions of summary.kernels (-1: unknown)
        self._ratio_of: dict[str, Any] = {}  # job -> compression-ratio gauge child
        self._records_out = metrics.RECORDS_OUT.labels("compressor", "summary.kernels")
        self._next_expire = time.monotonic() + _EXPIRE_EVERY_S

    def prepare(self) -> None:
        ensure_loop_topics(self.settings, self.pcfg)

    def chores(self) -> None:
        """The fidelity checks due, and split windows whose parts stopped coming."""
        judge_samples(self.role.due_samples(time.time()))
        now = time.monotonic()
        if now >= self._next_expire:
            self._next_expire = now + _EXPIRE_EVERY_S
            self._release(self.role.parts.expire(PART_MAX_AGE_S))

    def forget(self, gone: set[int]) -> None:
        """Every open split window (eager rebalancing revokes all partitions at once)."""
        self._release(self.role.parts.flush(), dlq=False)

    def handle(self, msgs: list[Message]) -> None:
        """The records of one poll, in runs of up to ``CHUNK_EVENTS`` kernel events: each
        run's complete windows compressed in one call, then sent in order (as the faust
        agent does)."""
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
        broker_s = self.taken(msg)
        try:
            taken, given_up = self.role.take(
                msg.value() or b"", msg, msg.partition() or 0, broker_s
            )
        except Exception as exc:
            self.dlq(msg, exc)
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
                self.dlq(msg, made.error)
                continue
            try:
                self._send(made)
            except Exception as exc:  # refused by the producer (too large): the reason
                log.exception("compressor: a summary was not sent")
                self.dlq(msg, exc, reason="handler-error")
                continue
            for key, it in made.items:
                routed.setdefault(key, []).append((msg, item_bytes(it)))
        sent, parts = time.time(), self.pcfg.internal_partitions
        for key, items in routed.items():
            for owners, value in rekey_messages(items, sent):
                try:
                    self.produce(
                        self.topics.scopes, value, key.encode(), partition_of(key, parts), owners
                    )
                except KafkaException as exc:  # too large to re-key: its records to the DLQ
                    for msg in owners:
                        self.dlq(msg, exc)

    def _send(self, made: Made) -> None:
        """One window's summary, on the raw record's partition number (L3's per-partition
        watermark sees the compressor's catch-up skew between raw partitions)."""
        msg, batch = made.taken.token, made.taken.whole
        headers = [(ROUTED_HEADER, b"1")] if made.items else None
        part = self._same_partition(made.taken.part)
        self.produce(self.topics.summaries, made.value, made.key, part, [msg], headers)
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

    def _release(self, given_up: list[Incomplete], dlq: bool = True) -> None:
        """DLQ the parts of windows given up (``dlq``), then release every part's offset."""
        for gone in given_up:
            err = gone.error()
            for msg in gone.tokens:
                if dlq:
                    self.dlq(msg, err)
                self.role.holder.release(msg)
        for msg in self.role.parts.take_released():
            self.role.holder.release(msg)


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
