"""Shared setup of the pipeline benchmarks on the real local broker (``bench_pipeline.py``,
``soak.py``): topics and workers on a fresh prefix, and the load generator's producer.

* :func:`start_stack` - broker up, the prefix's topics, the workers (one process a role set);
* :func:`load_producer` - the batched, lz4 producer of the simulated ranks;
* :func:`publish_steps` - a step's step records (the simulator's, in step order);
* :func:`produce` - one record, waiting while the producer's queue is full.

Imported by path (``bench/`` is the scripts' own directory); ``SPLIT``, ``free_port`` and
``metric`` come from ``tests/pipeline/harness.py``.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from argus.config import Settings, load_settings
from argus.kafka.admin import create_topics, delete_prefixed
from argus.kafka.local import LocalBroker
from argus.schemas import Codec
from argus.schemas.avro_binary import avro_long
from argus.streams.local_run import WorkerProcess

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "pipeline"))
from harness import SPLIT, free_port, metric, scrape

__all__ = [
    "LOAD_ENV",
    "PERIOD_S",
    "SPLIT",
    "BatchTemplate",
    "Stack",
    "free_port",
    "load_producer",
    "metric",
    "produce",
    "publish_steps",
    "scrape",
    "split_roles",
    "start_stack",
]

PERIOD_S = 4.0  # 15 steps/min, the sustained-load rate
LOAD_ENV = {  # the workers' settings under sustained load
    "ARGUS_STREAMS__PRODUCER_LINGER_S": "0.01",  # batched sends (the default), as measured
    "ARGUS_STREAMS__INTERNAL_PARTITIONS": "4",
    "ARGUS_STREAMS__FUNNEL_GRACE_S": "5",
    "ARGUS_STREAMS__FUNNEL_IDLE_S": "10",
    "ARGUS_STREAMS__IDLE_CLOSE_S": "8",
    "ARGUS_STREAMS__INTERNAL_RETENTION_S": "180",  # re-key topics: 3 min (page cache, as below)
    # every summary comes from argus' compressor, which routes L3 itself: L3 does not read
    # summary.kernels (docs/pipeline.md, "The compressor routes L3 itself"); set it in the
    # environment to measure the default (true)
    "ARGUS_STREAMS__L3_ROUTE_SUMMARIES": os.environ.get(
        "ARGUS_STREAMS__L3_ROUTE_SUMMARIES", "false"
    ),
}

Step = tuple[str, str, dict[str, Any]]  # (record type, key, record) from argus.sim.simulate


class BatchTemplate:
    """One rank's ``kernel_batch`` encoded once; each window's bytes patch in its
    ``window_id``, ``window_start_ns`` and ``window_end_ns`` (consecutive longs in the schema).

    The load generator stands for the training cluster, which runs elsewhere: a copy of
    the bytes a window keeps it from taking the cores the pipeline is measured on (fastavro
    encoding 105 KB records took 14 % of a core at 2,048 ranks). Checked against
    ``Codec.encode`` when built.
    """

    def __init__(self, codec: Codec, rec: Mapping[str, Any]) -> None:
        zero = {**rec, "window_id": 0, "window_start_ns": 0, "window_end_ns": 0}
        a = codec.encode("kernel_batch", zero)
        b = codec.encode("kernel_batch", {**zero, "window_id": 1})
        at = next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)
        self._head, self._tail = a[:at], a[at + 3 :]  # three one-byte zeros between
        probe = {"window_id": 12_345, "window_start_ns": 10**18, "window_end_ns": 10**18 + 7}
        if self.encode(*probe.values()) != codec.encode("kernel_batch", {**rec, **probe}):
            raise AssertionError("kernel_batch's window fields are not where the template expects")

    def encode(self, window_id: int, start_ns: int, end_ns: int) -> bytes:
        """The record's bytes for one window (as ``Codec.encode`` would frame them)."""
        return b"".join(
            (self._head, avro_long(window_id), avro_long(start_ns), avro_long(end_ns), self._tail)
        )


@dataclass
class Stack:
    """A run's broker, topic prefix and started workers.

    Attributes
    ----------
    settings : Settings
    prefix : str
        ``<stem><unix seconds>``; delete with ``argus.kafka.admin.delete_prefixed``.
    workers : list of WorkerProcess
    broker_pid : int or None
        The local broker's pid (None when it is not ours to see).
    log_dir : Path
        The workers' logs (a fresh temporary directory).
    """

    settings: Settings
    prefix: str
    workers: list[WorkerProcess]
    broker_pid: int | None
    log_dir: Path


#: A load run's kernel topics keep 3 minutes. The product's 6 h of ``raw.kernels`` at 4,096
#: ranks (~45 MB/s after lz4, ~66 MB/s with the other topics) filled this VM's disk 19
#: minutes into a 30-minute run; with 15 minutes the broker's files outgrew the page cache
#: (24 GiB shared with the workers and the generator) 9 minutes in: reads from disk and page
#: reclaim on a machine with no idle CPU (session 19, BENCHMARKS.md). 3 minutes keep them in
#: memory, as a broker with its own memory and disks keeps its recent hours; the consumers
#: here read within ~1 minute.
BENCH_RETENTION_MS = 3 * 60 * 1000


def _cap_retention(s: Settings, prefix: str) -> None:
    """Cap the retention of the run's ``raw.kernels`` and ``summary.kernels`` at
    :data:`BENCH_RETENTION_MS` (segments rolled every minute, so it applies)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in (("retention.ms", str(BENCH_RETENTION_MS)), ("segment.ms", "60000"))
    ]
    res = [
        ConfigResource(ResourceType.TOPIC, f"{prefix}.{t}", incremental_configs=entries)
        for t in ("raw.kernels", "summary.kernels")
    ]
    admin = AdminClient(s.kafka_config())  # held: its futures die with the handle
    for fut in admin.incremental_alter_configs(res).values():
        fut.result(timeout=30)


def split_roles(split: int) -> Sequence[tuple[str, ...]]:
    """Role sets of the worker processes: 2 = steps | compressor+l3; 3 = steps | compressor | l3;
    4 = steps | compressor | l3 | l3 (two L3 processes in one consumer group share the scopes)."""
    if split == 2:
        return SPLIT
    return (SPLIT[0], ("compressor",), *[("l3",)] * (split - 2))


def start_stack(
    stem: str,
    *,
    partitions: int = 4,
    env: Mapping[str, str] = LOAD_ENV,
    roles: Sequence[tuple[str, ...]] = SPLIT,
) -> Stack:
    """Broker up (the local one), the prefix's topics with ``partitions`` partitions, and one
    started worker a role set of ``roles`` with ``env`` (plus ``ARGUS_TOPIC_PREFIX``)."""
    s = load_settings()
    broker_pid = LocalBroker(s).up().pid
    prefix = f"{stem}{int(time.time())}"
    create_topics(s, prefix=prefix, partitions=partitions)
    _cap_retention(s, prefix)
    tmp = Path(tempfile.mkdtemp())
    workers = [
        WorkerProcess(
            r,
            env={"ARGUS_TOPIC_PREFIX": prefix, **env},
            log_path=tmp / f"{'-'.join(r)}.log",
            metrics_port=free_port(),
        ).start()
        for r in roles
    ]
    atexit.register(_clean_up, s, prefix, workers)  # a run that fails leaves nothing behind
    return Stack(s, prefix, workers, broker_pid, tmp)


def _clean_up(s: Settings, prefix: str, workers: Sequence[WorkerProcess]) -> None:
    """Stop the stack's workers still running and delete its topics (again: harmless)."""
    for w in workers:
        w.stop()
    delete_prefixed(s, prefix)


def load_producer(s: Settings) -> Any:
    """The load generator's ``confluent_kafka.Producer``: 20 ms linger, lz4, a 1 GiB queue."""
    from confluent_kafka import Producer

    return Producer(
        s.kafka_config(
            **{"linger.ms": 20, "compression.type": "lz4", "queue.buffering.max.kbytes": 1048576}
        )
    )


def produce(prod: Any, topic: str, key: bytes, value: bytes) -> None:
    """Produce one record; while the queue is full, serve delivery reports (50 ms) and retry."""
    while True:
        try:
            prod.produce(topic, key=key, value=value)
            return
        except BufferError:
            prod.poll(0.05)


def publish_steps(
    prod: Any, codec: Codec, prefix: str, steps: Iterator[Step], pending: Step | None, step: int
) -> tuple[Step | None, int, int]:
    """Produce the step records of ``step`` onto ``<prefix>.raw.steps``, starting with
    ``pending`` (the first record not produced yet) and drawing from ``steps``.

    Returns the next pending record (None when ``steps`` ended) and the step's event-time span
    (earliest ``start_ns``, latest ``end_ns``; ``2**63 - 1, 0`` when the step had no record).
    """
    w0, w1 = 2**63 - 1, 0
    while pending is not None and pending[2].get("step") == step:
        w0 = min(w0, int(pending[2]["start_ns"]))
        w1 = max(w1, int(pending[2]["end_ns"]))
        produce(
            prod,
            f"{prefix}.raw.steps",
            pending[1].encode(),
            codec.encode("step_record", pending[2]),
        )
        pending = next(steps, None)
    return pending, w0, w1
