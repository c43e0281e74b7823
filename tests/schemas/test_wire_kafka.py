"""Every record type through the real broker: confluent-kafka both ways, and a faust agent."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from argus.config import Settings
from argus.schemas import Codec, load_schemas
from argus.topics import TOPICS, topic_name

from .avro_strategies import sample

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).parents[2]


def _records(seed: int) -> dict[str, dict]:
    rnd = random.Random(seed)
    return {name: sample(s.raw, rnd) for name, s in load_schemas().items()}


def _consume(settings: Settings, topics: list[str], n: int, timeout_s: float) -> list:
    c = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"test-{time.time_ns()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
    )
    c.subscribe(topics)
    got = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
    finally:
        c.close()
    return got


def _produce_all(settings: Settings, prefix: str, codec: Codec, recs: dict[str, dict]) -> None:
    p = Producer(settings.kafka_config(**{"enable.idempotence": True, "acks": "all"}))
    for t in TOPICS:
        p.produce(
            topic_name(t.suffix, prefix),
            key=t.record.encode(),
            value=codec.encode(t.record, recs[t.record]),
        )
    assert p.flush(30) == 0


def test_every_record_type_through_confluent_kafka(kafka: Settings, topic_prefix: str) -> None:
    codec = Codec()
    recs = _records(1)
    _produce_all(kafka, topic_prefix, codec, recs)
    msgs = _consume(kafka, [topic_name(t.suffix, topic_prefix) for t in TOPICS], len(TOPICS), 60)
    assert len(msgs) == len(TOPICS)
    for m in msgs:
        name, rec = codec.decode(m.value())
        assert name == m.key().decode()
        assert rec == recs[name]


def test_every_record_type_through_a_faust_agent(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    AdminClient(kafka.kafka_config()).create_topics([NewTopic(f"{topic_prefix}.echo", 1, 1)])
    codec = Codec()
    recs = _records(2)
    _produce_all(kafka, topic_prefix, codec, recs)
    # one undecodable value: the agent must report it, not die
    p = Producer(kafka.kafka_config())
    p.produce(topic_name("dlq", topic_prefix), value=b"\x00garbage")
    p.flush(10)
    env = {
        **os.environ,
        "ARGUS_ECHO_PREFIX": topic_prefix,
        "ARGUS_KAFKA_BOOTSTRAP": kafka.bootstrap_servers,
        "PYTHONPATH": str(ROOT),
    }
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "faust",
            "-A",
            "tests.schemas.faust_echo_app",
            "--datadir",  # not ./echo-<prefix>-data in the checkout
            str(tmp_path / "echo-data"),
            "worker",
            "--without-web",
            "-l",
            "warn",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        msgs = _consume(kafka, [f"{topic_prefix}.echo"], len(TOPICS) + 1, 90)
    finally:
        worker.terminate()
        out = worker.communicate(timeout=30)[0].decode(errors="replace")
    assert len(msgs) == len(TOPICS) + 1, out[-3000:]
    seen = set()
    for m in msgs:
        if m.key() == b"error":
            assert b"unknown-schema-id" in m.value()
            continue
        name, rec = codec.decode(m.value())
        assert name == m.key().decode()
        assert rec == recs[name]
        seen.add(name)
    assert seen == {t.record for t in TOPICS}
