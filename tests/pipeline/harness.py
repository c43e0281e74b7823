"""Test helpers: a worker subprocess on a private topic prefix, and its metrics."""

from __future__ import annotations

import os
import re
import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from argus.config import Settings, load_settings
from argus.kafka.local import LocalBroker
from argus.streams.groups import loop_group, steps_router_group, worker_groups
from argus.streams.local_run import WorkerProcess
from argus.streams.pipeline_config import PipelineConfig

FAST = {  # short windows so the tests run in seconds
    "ARGUS_STREAMS__INTERNAL_PARTITIONS": "2",
    "ARGUS_STREAMS__FUNNEL_GRACE_S": "4",
    # idle bounds are processing time: shorter ones close windows of a lagging worker on a
    # loaded 2-core machine (8 s closed L3 windows incomplete mid-job in test_e2e)
    "ARGUS_STREAMS__FUNNEL_IDLE_S": "40",
    "ARGUS_STREAMS__IDLE_CLOSE_S": "30",
}

TICK_SLACK = 3 * int(FAST["ARGUS_STREAMS__INTERNAL_PARTITIONS"])
"""Uncommitted records an internal topic may hold when idle: the ticks a timer sends each
partition every second, committed a second later."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# kernel work (heavy) and step work (latency-bound) in separate processes, as in production
SPLIT = (("l1", "l2", "funnel", "stacks"), ("compressor", "l3"))


def worker(prefix: str, tmp: Path, roles: tuple[str, ...] = ("all",), **env: str) -> WorkerProcess:
    return WorkerProcess(
        roles,
        env={"ARGUS_TOPIC_PREFIX": prefix, **FAST, **env},
        log_path=tmp / f"worker-{'-'.join(roles)}.log",
        metrics_port=free_port(),
    )


STEPS_ROUTER = PipelineConfig().steps_router_runtime
"""Where the workers' steps router runs unless a test says otherwise."""


def groups_of(prefix: str, roles: tuple[str, ...], steps_router: str = STEPS_ROUTER) -> list[str]:
    """Every consumer group a worker running ``roles`` reads in (the steps router on
    ``steps_router``: ``streams.steps_router_runtime``)."""
    return worker_groups(prefix, roles, steps_router=steps_router)


def workers(prefix: str, tmp: Path, **env: str) -> list[WorkerProcess]:
    return [worker(prefix, tmp, roles, **env).start() for roles in SPLIT]


def group_id(prefix: str, roles: tuple[str, ...]) -> str:
    """The consumer group (faust app id) of a worker running ``roles`` on ``prefix``."""
    return f"{prefix}-{'-'.join(sorted(roles))}"


def reader_group(prefix: str, roles: tuple[str, ...], raw: str) -> str:
    """The consumer group in which a worker running ``roles`` reads the raw topic ``raw``
    (``raw.kernels``: the compressor's own loop, ``<prefix>-compressor``; ``raw.steps``: the
    steps router's, ``<prefix>-steps-router``; else the app's)."""
    if raw == "raw.kernels":
        return loop_group(prefix)
    if raw == "raw.steps" and STEPS_ROUTER == "kafka":
        return steps_router_group(prefix)
    return group_id(prefix, roles)


def scrape(port: int) -> str:
    """The Prometheus text served on 127.0.0.1:``port`` ("" when nothing answers)."""
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        return str(urllib.request.urlopen(url, timeout=2).read().decode())
    except OSError:
        return ""


def has_metric(w: WorkerProcess, name: str, **labels: str) -> bool:
    """The worker serves a sample of ``name`` with ``labels`` (e.g. its lag gauge, set once
    it holds partitions)."""
    for line in scrape(w.metrics_port).splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} \S+$", line)
        if m and all(f'{k}="{v}"' in m.group(1) for k, v in labels.items()):
            return True
    return False


@contextmanager
def private_broker(tmp: Path) -> Iterator[tuple[LocalBroker, Settings, dict[str, str]]]:
    """A broker of this test alone (own ports, state dir under ``tmp``), for tests that stop
    it; the shared broker on 127.0.0.1:19092 is never touched. Yields the broker, its
    settings and the environment that points a worker at it (no ``ARGUS_TOPIC_PREFIX``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    if "ARGUS_CACHE_DIR" in os.environ:
        env["ARGUS_CACHE_DIR"] = os.environ["ARGUS_CACHE_DIR"]
    (tmp / "none.toml").write_text("")
    env |= {
        "ARGUS_STATE_DIR": str(tmp / "kafka"),
        "ARGUS_KAFKA_PORT": str(free_port()),
        "ARGUS_KAFKA_CONTROLLER_PORT": str(free_port()),
        "ARGUS_KAFKA_HEAP": "384m",
        "ARGUS_CONFIG": str(tmp / "none.toml"),
    }
    settings = load_settings(env=env)
    broker = LocalBroker(settings)
    try:  # a failed start stops what it left running too
        assert broker.up(timeout_s=120).running
        yield broker, settings, env
    finally:
        broker.down()


def metric(w: WorkerProcess, name: str, **labels: str) -> float:
    """Sum of a Prometheus metric's samples matching ``labels`` (0 when absent)."""
    total = 0.0
    for line in scrape(w.metrics_port).splitlines():
        m = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if not m:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def backlog(settings: Settings, group: str) -> dict[str, int]:
    """Records not yet committed by consumer group ``group``, per topic it has committed
    on: sum over its partitions of (high watermark - committed offset)."""
    admin = AdminClient(settings.kafka_config())
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    tps = [tp for tp in fut.result(timeout=15).topic_partitions if tp.offset >= 0]
    c = Consumer(settings.kafka_config(**{"group.id": f"{group}-probe"}))
    try:
        out: dict[str, int] = {}
        for tp in tps:
            hi = c.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)[1]
            out[tp.topic] = out.get(tp.topic, 0) + max(0, hi - tp.offset)
        return out
    finally:
        c.close()
