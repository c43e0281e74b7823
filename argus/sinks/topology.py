"""Which host each rank of a job runs on, from the job topology on ``argus.jobs``.

The collectors publish a ``job_topology`` record per rank (key ``job/rank``, with its
``host``) when they start, on a compacted topic (docs/wire.md). The alert sinks read it to
name the culprit's hosts: :class:`JobHosts` folds records (pure), :class:`TopologyReader`
follows the topic from its beginning without a consumer group.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from argus.config import Settings
from argus.schemas import Codec, DecodeError
from argus.topics import topic_name

__all__ = ["JobHosts", "TopologyReader"]

log = logging.getLogger("argus.sinks.topology")


class JobHosts:
    """Rank -> host per job, folded from ``job_topology`` records (newest wins; ranks with
    an empty host, e.g. the layout record rank 0 writes for the others, are skipped). The
    ``max_jobs`` jobs least recently published are forgotten (the topic keeps every job)."""

    def __init__(self, max_jobs: int = 4096) -> None:
        self.max_jobs = max_jobs
        self._by_job: OrderedDict[str, dict[int, str]] = OrderedDict()

    def add(self, rec: Mapping[str, Any]) -> None:
        job = str(rec["job"])
        known = self._by_job.pop(job, {})
        for r in rec.get("ranks") or ():
            host = str(r.get("host") or "")
            if host:
                known[int(r["rank"])] = host
        if known:
            self._by_job[job] = known
            while len(self._by_job) > self.max_jobs:
                self._by_job.popitem(last=False)

    def hosts(self, job: str) -> dict[int, str]:
        """Rank -> host of ``job`` ({} when unknown)."""
        return dict(self._by_job.get(job, {}))


class TopologyReader:
    """Follows ``<prefix>.jobs`` from the beginning (no consumer group, nothing committed).

    :meth:`refresh` reads what arrived, without blocking, except the first time: then it
    reads up to the high watermarks seen at start (at most ``first_wait_s``), so the first
    alert already knows every job that started before the sink. A record that does not decode
    is counted in :attr:`errors` and logged with its offset (the topic is compacted and
    re-read at every start: a DLQ record per start would repeat it).
    """

    def __init__(self, settings: Settings, codec: Codec, *, first_wait_s: float = 10.0) -> None:
        self.hosts = JobHosts()
        self.codec = codec
        self.errors = 0
        self.topic = topic_name("jobs", settings.topic_prefix)
        self.first_wait_s = first_wait_s
        self._ends: dict[int, int] | None = None
        self.consumer = Consumer(
            settings.kafka_config(
                **{
                    "group.id": f"argus-topology-{time.time_ns()}",  # never committed
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "client.id": "argus-topology",
                }
            )
        )
        try:
            meta = self.consumer.list_topics(self.topic, timeout=10)
            parts = sorted(meta.topics[self.topic].partitions) if self.topic in meta.topics else []
        except KafkaException as exc:
            log.warning("%s unreadable (%s): alerts will name no hosts", self.topic, exc)
            parts = []
        if not parts:
            log.warning("%s has no partitions: alerts will name no hosts", self.topic)
        self.parts = parts
        ends = {}
        for p in parts:
            try:
                lo, hi = self.consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=10
                )
            except KafkaException:
                lo, hi = 0, 0
            if hi > lo:
                ends[p] = hi
        self._ends = ends
        self.consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])

    def refresh(self) -> None:
        """Fold the records that arrived since the last call into :attr:`hosts`."""
        if not self.parts:
            return
        deadline = time.monotonic() + (self.first_wait_s if self._ends else 0.0)
        while True:
            msg = self.consumer.poll(0.1 if self._ends else 0.0)
            if msg is None:
                if not self._ends or time.monotonic() >= deadline:
                    self._ends = None
                    return
                continue
            if msg.error():
                continue
            part, off = int(msg.partition() or 0), int(msg.offset() or 0)
            if self._ends and off + 1 >= self._ends.get(part, 0):
                self._ends.pop(part, None)
            try:
                self.hosts.add(self.codec.decode_as("job_topology", msg.value() or b""))
            except (DecodeError, KeyError, TypeError, ValueError) as exc:
                self.errors += 1
                log.warning(
                    "%s[%d]@%d is not a job topology: %s",
                    self.topic,
                    part,
                    off,
                    exc,
                )

    def close(self) -> None:
        self.consumer.close()
