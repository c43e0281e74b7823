"""``argus kafka up --brokers 3``: a private three-node KRaft cluster (own ports and state dir;
the shared broker on 127.0.0.1:19092 is never touched), started once for this module.

* ``test_three_brokers_replicate_every_write``: the cluster's configuration (replication
  factor 3, ``min.insync.replicas`` 2, internal topics too), every argus topic created with
  three in-sync replicas, ``up`` idempotent and the node count fixed at format time.
* ``test_one_broker_killed_mid_job_loses_nothing`` (slow): a simulated job through the two
  worker processes (``harness.SPLIT``, internal topics replicated 3 times), fed by an
  idempotent ``acks=all`` producer; at step ``KILL_AT`` the node leading ``raw.steps``
  partition 0 is SIGKILLed and restarted 10 s later. Every acknowledged record is on the
  broker afterwards, both workers drain their input (none stuck, none crashed), nothing goes
  to the DLQ, and the alert triggers equal those of the in-memory engine that ``argus
  diagnose`` runs over the same records.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from argus.config import Settings, load_settings
from argus.kafka.admin import create_topics
from argus.kafka.local import PORT_STRIDE, BrokerError, LocalBroker
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher
from argus.topics import topic_specs
from tests.pipeline.test_differential import (
    _diff,
    _drained,
    _Live,
    _live,
    _offline,
    _produced,
    _read_all,
    _ready,
)

pytestmark = pytest.mark.kafka

NODES = 3
STEPS, RATE, KILL_AT, DOWN_S = 60, 2.0, 20, 10.0  # steps, steps/s, kill at step, s down


def _ports_free(base: int) -> bool:
    for i in range(NODES):
        for port in (base + PORT_STRIDE * i, base + 1 + PORT_STRIDE * i):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    return False
    return True


def _cluster_base() -> int:
    """A client port p with p + 10 i and p + 1 + 10 i free for every node i."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 60_000)
        if _ports_free(base):
            return base
    raise RuntimeError("no free ports for a 3-node cluster")


@dataclass
class Cluster:
    broker: LocalBroker
    env: dict[str, str]  # a client's (or worker's) environment: every node as bootstrap
    settings: Settings  # the same as settings
    tmp: Path

    def leader_of(self, topic: str, partition: int = 0) -> int:
        md = AdminClient(self.settings.kafka_config()).list_topics(topic, timeout=20)
        return int(md.topics[topic].partitions[partition].leader)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("cluster")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    if "ARGUS_CACHE_DIR" in os.environ:
        env["ARGUS_CACHE_DIR"] = os.environ["ARGUS_CACHE_DIR"]
    (tmp / "none.toml").write_text("")
    base = _cluster_base()
    env |= {
        "ARGUS_STATE_DIR": str(tmp / "state"),
        "ARGUS_KAFKA_PORT": str(base),
        "ARGUS_KAFKA_CONTROLLER_PORT": str(base + 1),
        "ARGUS_KAFKA_HEAP": "320m",  # three JVMs on a shared 2-core, 24 GiB host
        "ARGUS_CONFIG": str(tmp / "none.toml"),
    }
    broker = LocalBroker(load_settings(env=env))
    try:
        t0 = time.monotonic()
        up = subprocess.run(
            [
                sys.executable,
                "-m",
                "argus.cli",
                "kafka",
                "up",
                "--brokers",
                "3",
                "--timeout",
                "240",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert up.returncode == 0, up.stdout + up.stderr
        print(f"3-node cluster up in {time.monotonic() - t0:.0f} s")
        client = env | {
            "ARGUS_KAFKA_BOOTSTRAP": broker.bootstrap,
            "ARGUS_STREAMS__REPLICATION": "3",
        }
        yield Cluster(broker, client, load_settings(env=client), tmp)
    finally:
        broker.down()  # every node, even after a failure
        stopped = all(broker.node_pid(n) is None for n in broker.nodes())
        shutil.rmtree(tmp / "state", ignore_errors=True)  # three nodes' data and logs
        assert stopped


def test_three_brokers_replicate_every_write(cluster: Cluster) -> None:
    b = cluster.broker
    st = b.status()
    assert st.running and b.brokers == NODES, st
    assert st.bootstrap == ",".join(f"127.0.0.1:{b.settings.kafka_port + 10 * i}" for i in range(3))
    for n in b.nodes():
        props = dict(
            ln.split("=", 1)
            for ln in n.props.read_text().splitlines()
            if "=" in ln and ln[0] != "#"
        )
        assert props["node.id"] == str(n.id)
        assert len(props["controller.quorum.voters"].split(",")) == NODES
        for key, want in (
            ("default.replication.factor", "3"),
            ("min.insync.replicas", "2"),
            ("offsets.topic.replication.factor", "3"),
            ("transaction.state.log.replication.factor", "3"),
            ("transaction.state.log.min.isr", "2"),
        ):
            assert props[key] == want, (n.id, key)
    # every node registered: a broker's metadata can lag the others' a moment (a node seen
    # by one broker and not yet by the one answering, on a loaded host), so ask until 60 s
    probe = AdminClient(cluster.settings.kafka_config())
    deadline = time.monotonic() + 60
    while sorted(probe.list_topics(timeout=20).brokers) != [1, 2, 3]:
        assert time.monotonic() < deadline, probe.list_topics(timeout=20).brokers
        time.sleep(0.5)
    prefix = "c1.argus"
    create_topics(cluster.settings, prefix=prefix, partitions=2, replication=3)
    admin = AdminClient(cluster.settings.kafka_config())

    def replicas() -> dict[str, list[tuple[int, int]]]:  # topic -> (replicas, in sync) each
        md = admin.list_topics(timeout=20)
        return {
            name: [(len(p.replicas), len(p.isrs)) for p in md.topics[name].partitions.values()]
            for name in topic_specs(prefix)
            if name in md.topics
        }

    expect = {name: [(3, 3), (3, 3)] for name in topic_specs(prefix)}
    deadline = time.monotonic() + 60  # metadata reaches every broker within a moment
    while (got := replicas()) != expect and time.monotonic() < deadline:
        time.sleep(1)
    assert got == expect
    # idempotent, and the node count is fixed when the storage is formatted
    assert b.up(timeout_s=30).running
    with pytest.raises(BrokerError, match="formatted with 3 broker"):
        b.up(brokers=1)


def _on_the_broker(settings: Settings, topics: list[str]) -> int:
    """Records held by ``topics`` (sum over partitions of high - low watermark)."""
    c = Consumer(settings.kafka_config(**{"group.id": "cluster-count"}))
    try:
        n = 0
        for t in topics:
            for p in c.list_topics(t, timeout=20).topics[t].partitions:
                lo, hi = c.get_watermark_offsets(TopicPartition(t, p), timeout=20)
                n += hi - lo
        return n
    finally:
        c.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_one_broker_killed_mid_job_loses_nothing(cluster: Cluster) -> None:
    settings, tmp = cluster.settings, cluster.tmp
    run = SimRun.make("compute-straggler", ranks=32, steps=STEPS, seed=5)
    records = list(simulate(run))
    off = _offline(records)  # what `argus diagnose` finds in the job
    assert off.triggers, "the offline engine alerts on the job"
    prefix = "k1.argus"
    create_topics(settings, prefix=prefix, partitions=2, replication=3)
    live = _Live(prefix, tmp, cluster.env)
    watch = Watcher(settings, ["alerts", "dlq"], prefix=prefix)
    acked, failed = [0], []
    notes: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            acked[0] += 1
        else:
            failed.append(err)

    producer = Producer(
        settings.kafka_config(
            **{
                "linger.ms": 20,
                "compression.type": "lz4",
                "enable.idempotence": True,  # as the collectors' producer
                "acks": "all",
                "message.timeout.ms": 120_000,
                "on_delivery": on_delivery,
                "log_level": 2,
            }
        )
    )
    killed: dict[str, Any] = {}

    def kill_and_restart() -> None:
        victim = cluster.leader_of(f"{prefix}.raw.steps")
        node = cluster.broker.node(victim)
        pid = cluster.broker.node_pid(node)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed.update(node=victim, t=time.monotonic())
        time.sleep(DOWN_S)
        t_up = time.monotonic()
        for attempt in range(3):  # a JVM start on a loaded 2-core host may fail; retry
            try:
                killed["up"] = cluster.broker.up(timeout_s=180).running
                break
            except BrokerError:
                if attempt == 2:
                    raise
                time.sleep(5)
        notes.append(f"node {victim} SIGKILLed, back {time.monotonic() - t_up:.0f} s after restart")

    fault = threading.Thread(target=kill_and_restart)
    try:
        for which, role in (("steps", "steps"), ("kernels", "compressor")):
            w = live.start(which)
            assert w is not None and _ready(w, role), live.logs()
        t_job = time.monotonic()

        def on_step(step: int) -> None:
            if step == KILL_AT and not fault.is_alive() and not killed:
                fault.start()

        counts = publish(
            iter(records), settings, prefix=prefix, step_rate=RATE, producer=producer,
            on_step=on_step,
        )  # fmt: skip
        fault.join(300)
        assert killed.get("up"), (killed, notes)
        assert producer.flush(60) == 0
        assert sum(counts.values()) == len(records)
        left: dict[str, dict[str, int]] = {}
        n_seen = [-1]

        def settled(_w: Watcher) -> bool:  # drained twice, nothing new on the outputs between
            assert not live.dead(), f"worker(s) {live.dead()} exited:\n{live.logs()}"
            if not _drained(settings, prefix, left):
                return False
            n = _produced(settings, prefix)
            if n != n_seen[0]:
                n_seen[0] = n
                time.sleep(8)
                return False
            return True

        assert watch.wait_for(settled, timeout_s=420, poll_s=2.0), (left, live.logs())
        t_done = time.monotonic() - t_job
        raw = [f"{prefix}.raw.steps", f"{prefix}.raw.kernels"]
        on_broker = _on_the_broker(settings, raw)
        got = _live(settings, prefix, run.job)
        dlq = _read_all(settings, prefix, "dlq")
        alive = [w.alive for w in live.running()]
    finally:
        live.stop()
        if fault.is_alive():
            fault.join(200)
        watch.close()
    diff = _diff(got, off)
    print(
        f"3 brokers, node {killed.get('node')} SIGKILLed at step {KILL_AT}: {acked[0]} of "
        f"{len(records)} records acknowledged, {len(failed)} failed, {on_broker} on the broker; "
        f"triggers {len(got.triggers)}/{len(off.triggers)} (live/offline); other differences "
        f"{len(diff)}; settled {t_done:.0f} s after the job started; {'; '.join(notes)}"
    )
    assert failed == [] and acked[0] == len(records), (acked, failed[:3])
    assert on_broker == acked[0], "an acknowledged record was lost"
    assert all(alive), "a worker exited"
    assert dlq == [], dlq[:3]
    assert got.triggers == off.triggers, "\n".join(diff)
