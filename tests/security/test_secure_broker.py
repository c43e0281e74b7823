"""Every kind of argus client over SASL_SSL (SCRAM-SHA-512) with the ACL layout applied, on a
private secure broker (see conftest)."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from argus.config import Settings
from argus.kafka.security import KafkaAuthError, check_connection
from argus.schemas import Codec, load_schemas
from argus.topics import topic_name

from .conftest import SecureBroker, group

pytestmark = pytest.mark.kafka


def _poll(c: Consumer, want: int, timeout_s: float) -> tuple[list[Any], list[KafkaError]]:
    msgs, errs = [], []
    deadline = time.monotonic() + timeout_s
    while len(msgs) < want and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            errs.append(m.error())
            if m.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                break
            continue
        msgs.append(m)
    return msgs, errs


def _consumer(settings: Settings, user: str, topic: str) -> Consumer:
    c = Consumer(
        settings.kafka_config(
            **{
                "group.id": group(user),
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
    )
    c.subscribe([topic])
    return c


def _step_record(seed: int) -> dict[str, Any]:
    from tests.schemas.avro_strategies import sample

    return dict(sample(load_schemas()["step_record"].raw, random.Random(seed)))


def test_topics_create_through_the_cli_as_admin(secure_broker: SecureBroker) -> None:
    r = secure_broker.argus("topics", "create", "--partitions", "1", env=secure_broker.env("admin"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "argus.raw.steps" in r.stdout and "argus.alerts" in r.stdout
    # a role without CREATE rights cannot
    r = secure_broker.argus("topics", "create", env=secure_broker.env("collector"))
    assert r.returncode != 0


def test_collector_produces_and_ops_reads_over_sasl_ssl(
    secure_broker: SecureBroker, prefix_topics: str
) -> None:
    from argus.collectors.producer import RecordProducer

    col = secure_broker.settings("collector")
    assert col.security.protocol == "SASL_SSL" and col.security.username == "collector"
    topic = topic_name("raw.steps", prefix_topics)
    recs = [_step_record(i) for i in range(3)]
    p = RecordProducer(col.kafka_config(), message_timeout_ms=15_000)
    for i, rec in enumerate(recs):
        assert p.submit(topic, f"sec/{i}".encode(), "step_record", rec, 256)
    assert p.flush(20) == 0
    p.close()
    assert p.delivered == 3 and p.dropped_records == 0 and p.errors == 0

    ops = secure_broker.settings("ops")
    c = _consumer(ops, "ops", topic)
    try:
        msgs, errs = _poll(c, 3, 30)
    finally:
        c.close()
    assert not [e for e in errs if e.code() != KafkaError._PARTITION_EOF], errs
    got = {m.key(): Codec().decode(m.value())[1] for m in msgs}
    for i, rec in enumerate(recs):
        assert got.get(f"sec/{i}".encode()) == rec


def test_collector_identity_cannot_read_alerts_nor_write_them(
    secure_broker: SecureBroker, prefix_topics: str
) -> None:
    col = secure_broker.settings("collector")
    alerts = topic_name("alerts", prefix_topics)
    c = _consumer(col, "collector", alerts)
    try:
        _, errs = _poll(c, 1, 20)
    finally:
        c.close()
    assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errs), errs

    failures: list[KafkaError] = []
    p = Producer(col.kafka_config(**{"message.timeout.ms": 10_000}))
    p.produce(alerts, b"x", on_delivery=lambda err, _m: failures.append(err))
    p.flush(15)
    assert failures and failures[0] is not None
    assert failures[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_wrong_password_is_a_typed_error_within_seconds(
    secure_broker: SecureBroker, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.password"
    bad.write_text("not-the-password-4711\n")
    env = secure_broker.env("worker", ARGUS_KAFKA_PASSWORD_FILE=str(bad))
    from argus.config import load_settings

    t0 = time.monotonic()
    with pytest.raises(KafkaAuthError) as err:
        check_connection(load_settings(env=env), timeout_s=20)
    assert time.monotonic() - t0 < 8
    assert err.value.reason == "authentication"
    assert "'worker'" in str(err.value) and "not-the-password" not in str(err.value)

    for cmd in (("topics", "create"), ("worker", "l1")):
        t0 = time.monotonic()
        r = secure_broker.argus(*cmd, env=env, timeout=40)
        took = time.monotonic() - t0
        assert r.returncode == 1, (cmd, r.stdout, r.stderr)
        assert "authentication" in r.stderr and "SCRAM-SHA-512" in r.stderr, r.stderr
        assert "not-the-password" not in r.stdout + r.stderr
        assert took < 20, (cmd, took)


def test_a_faust_worker_consumes_and_produces_over_sasl_ssl(
    secure_broker: SecureBroker, prefix_topics: str, tmp_path: Path
) -> None:
    """``argus worker compressor`` as user ``worker`` reads raw.kernels, sends an undecodable
    record to the DLQ (internal topics created under its ACLs); ops reads the DLQ."""
    env = secure_broker.env("worker")
    password = Path(env["ARGUS_KAFKA_PASSWORD_FILE"]).read_text().strip()
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "argus.cli", "worker", "compressor", "--loglevel", "info"],
            env={**env, "ARGUS_METRICS_PORT": "0"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        col = secure_broker.settings("collector")
        p = Producer(col.kafka_config())
        marker = f"garbage-{time.time_ns()}".encode()
        p.produce(topic_name("raw.kernels", prefix_topics), marker, key=b"sec/0")
        assert p.flush(15) == 0
        ops = secure_broker.settings("ops")
        c = _consumer(ops, "ops", topic_name("dlq", prefix_topics))
        found = None
        deadline = time.monotonic() + 90
        try:
            while found is None and time.monotonic() < deadline and proc.poll() is None:
                msgs, _ = _poll(c, 1, 2)
                for m in msgs:
                    rec = Codec().decode(m.value())[1]
                    if rec["value"] == marker:
                        found = rec
        finally:
            c.close()
        assert found is not None, log.read_text()[-3000:]
        assert found["source_topic"] == topic_name("raw.kernels", prefix_topics)
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    text = log.read_text()
    assert password not in text


def test_the_password_never_shows(secure_broker: SecureBroker, caplog: Any) -> None:
    s = secure_broker.settings("ops")
    password = s.security.password.reveal() if s.security.password else ""
    assert len(password) >= 16
    assert password not in repr(s) and password not in str(s.security)
    assert password not in repr(s.security.faust_app_kwargs()["broker_credentials"])
    r = secure_broker.argus("config", "show", env=secure_broker.env("ops"))
    assert r.returncode == 0 and "********" in r.stdout and password not in r.stdout
    # librdkafka's own debug log of a SASL_SSL session
    logger = logging.getLogger("test.librdkafka")
    with caplog.at_level(logging.DEBUG, logger="test.librdkafka"):
        n = check_connection(s, timeout_s=20)
        admin_conf = s.kafka_config(**{"debug": "security,broker,conf", "logger": logger})
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(admin_conf)
        admin.list_topics(timeout=10)
        admin.poll(1.0)  # librdkafka hands its log lines to the logger on poll
    assert n == 1
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "SASL" in logged
    assert password not in logged


def test_pagerduty_sink_reads_alerts_as_its_own_identity(
    secure_broker: SecureBroker, prefix_topics: str
) -> None:
    """A worker identity writes an alert; the sink (user ``pagerduty``) consumes and posts it."""
    from argus.sinks.pagerduty.worker import HttpResult, run_pagerduty_sink
    from tests.sinks.test_pagerduty_worker import KEY, make_alert

    dedup = f"sec-{time.time_ns()}"
    w = secure_broker.settings("worker")
    p = Producer(w.kafka_config())
    p.produce(topic_name("alerts", prefix_topics), Codec().encode("alert", make_alert(dedup)))
    assert p.flush(15) == 0

    posted: list[dict[str, Any]] = []

    def post(url: str, body: bytes, timeout_s: float) -> HttpResult:
        posted.append(json.loads(body))
        return HttpResult(202, '{"status":"success"}')

    stop = threading.Event()
    timer = threading.Timer(45, stop.set)  # bound: never hang the suite
    timer.start()
    try:
        env = {"ARGUS_PAGERDUTY_ROUTING_KEY": KEY}
        stats = run_pagerduty_sink(
            secure_broker.settings("pagerduty"), stop_event=stop, env=env, post=post,
            max_messages=1,
        )  # fmt: skip
    finally:
        timer.cancel()
    assert [b["dedup_key"] for b in posted] == [dedup], stats
