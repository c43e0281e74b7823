"""Worker metrics (issue 20): the ``argus_job`` label, unprefixed ``topic`` labels, lag in
seconds as well as records, and ``--metrics-addr`` (not loopback only)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest

from argus.config import Settings
from argus.errors import ConfigError
from argus.streams import metrics
from tests.pipeline.harness import free_port, scrape, worker


def test_no_metric_has_a_job_label() -> None:
    """Prometheus sets ``job`` to the scrape target's; ours would become ``exported_job``."""
    names = {}
    for fam in metrics.REGISTRY.collect():
        names[fam.name] = fam
    for m in (
        metrics.FIDELITY,
        metrics.FIDELITY_F1,
        metrics.COMPRESSION,
        metrics.COLLECTOR_DROPPED,
        metrics.COLLECTOR_ERRORS,
        metrics.COLLECTOR_OVERHEAD,
    ):
        assert m._labelnames == ("argus_job",)
    for m in vars(metrics).values():
        assert "job" not in getattr(m, "_labelnames", ())


def test_collector_gauges_keep_the_max_of_counts_and_the_latest_overhead() -> None:
    from argus.streams.roles.steps import collector_metrics

    def rec(dropped: int, errors: int, overhead_ns: int) -> dict[str, Any]:
        c = {"dropped_records": dropped, "errors": errors, "overhead_ns": overhead_ns}
        return {"start_ns": 0, "end_ns": 1_000_000, "collector": c}

    def value(gauge: Any, job: str) -> float:
        return float(gauge.labels(job)._value.get())

    collector_metrics("gauges-a", rec(5, 2, 10_000))
    collector_metrics("gauges-a", rec(3, 4, 20_000))  # another rank, behind on drops
    collector_metrics("gauges-b", rec(1, 0, 0))
    assert value(metrics.COLLECTOR_DROPPED, "gauges-a") == 5.0
    assert value(metrics.COLLECTOR_ERRORS, "gauges-a") == 4.0
    assert value(metrics.COLLECTOR_OVERHEAD, "gauges-a") == pytest.approx(0.02)
    assert value(metrics.COLLECTOR_DROPPED, "gauges-b") == 1.0
    collector_metrics("gauges-a", {"start_ns": 5, "end_ns": 5})  # no collector, no duration
    assert value(metrics.COLLECTOR_DROPPED, "gauges-a") == 5.0
    assert value(metrics.COLLECTOR_OVERHEAD, "gauges-a") == pytest.approx(0.02)


def test_topic_label_drops_the_prefix() -> None:
    assert metrics.topic_label("t1.argus.raw.steps", "t1.argus") == "raw.steps"
    assert metrics.topic_label("argus.internal.steps-by-job", "argus") == "internal.steps-by-job"
    assert metrics.topic_label("other.topic", "argus") == "other.topic"


def test_lag_seconds_bounds_the_oldest_waiting_record() -> None:
    # a backlog found at start: the last record consumed is an hour old
    assert metrics.lag_seconds(10_000.0, 6_400.0, None) == 3_600.0
    # idle for an hour, caught up 5 s ago, then one record arrived: 5 s, not an hour
    assert metrics.lag_seconds(10_000.0, 6_400.0, 9_995.0) == 5.0
    assert metrics.lag_seconds(10_000.0, None, 9_990.0) == 10.0
    assert math.isnan(metrics.lag_seconds(10_000.0, None, None))
    metrics.consumed("x.t", 3, 50.0)
    metrics.consumed("x.t", 3, 40.0)  # out of order: the newest stays
    assert metrics.last_consumed("x.t", 3) == 50.0 and metrics.last_consumed("x.t", 4) is None


def test_lag_counts_what_waits_in_the_stream_buffer() -> None:
    # fetched up to 500 (the position), taken up to offset 199: 300 wait in faust's buffer
    assert metrics.lag_records(1_000, 500, 199) == 800
    assert metrics.lag_records(1_000, 500, None) == 500  # nothing noted: the position
    assert metrics.lag_records(1_000, 1_000, 999) == 0
    assert metrics.lag_records(1_000, 500, 700) == 500  # noted ahead of the position: stale
    metrics.consumed("y.t", 1, None, 41)
    metrics.consumed("y.t", 1, None, 40)  # out of order: the highest stays
    assert metrics.last_offset("y.t", 1) == 41 and metrics.last_offset("y.t", 2) is None
    metrics.forget_offsets([("y.t", 1)])  # revoked
    assert metrics.last_offset("y.t", 1) is None


@pytest.mark.parametrize(
    ("addr", "want"),
    [
        ("9464", ("127.0.0.1", 9464)),
        (9464, ("127.0.0.1", 9464)),
        ("0.0.0.0:9464", ("0.0.0.0", 9464)),
        (":9464", ("0.0.0.0", 9464)),
        ("[::]:9464", ("::", 9464)),
        ("metrics.local:0", ("metrics.local", 0)),
    ],
)
def test_parse_addr(addr: str | int, want: tuple[str, int]) -> None:
    assert metrics.parse_addr(addr) == want


@pytest.mark.parametrize("addr", ["0.0.0.0:99999", "host:", "host:port", "::1:9464", ""])
def test_parse_addr_names_a_bad_value(addr: str) -> None:
    with pytest.raises(ConfigError, match="metrics address"):
        metrics.parse_addr(addr)


def test_worker_rejects_a_bad_metrics_addr_before_any_work() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "argus.cli", "worker", "l1", "--metrics-addr", "0.0.0.0:x"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "ARGUS_KAFKA_BOOTSTRAP": "127.0.0.1:1"},
    )
    assert r.returncode == 2, r.stderr
    assert "--metrics-addr" in r.stderr and "0.0.0.0:x" in r.stderr


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of each sample of ``name`` in a Prometheus text exposition."""
    out = []
    for m in re.finditer(rf"^{name}\{{(.*)\}} (\S+)$", text, re.M):
        out.append((dict(re.findall(r'(\w+)="([^"]*)"', m.group(1))), float(m.group(2))))
    return out


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) listening on ``port``."""
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            host, _, p = local.rpartition(":")
            if state == "0A" and int(p, 16) == port:
                out.add(host)
    return out


@pytest.mark.kafka
def test_worker_serves_on_metrics_addr_with_lag_in_records_and_seconds(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    port = free_port()
    w = worker(topic_prefix, tmp_path, ("funnel",), ARGUS_METRICS_ADDR=f"0.0.0.0:{port}")
    w.metrics_port = 0  # the flag's port is the one served
    w.start()
    try:
        # the worker's own ticks (one a second to each internal partition, ~17 ms in flight)
        # read as a record waiting when a gauge is taken just then: the gauges must read 0
        # in a sample taken while nothing waits, not in every sample
        text, deadline = "", time.monotonic() + 120
        while time.monotonic() < deadline:
            text = scrape(port)
            secs = _samples(text, "argus_consumer_lag_seconds")
            if any(lb.get("topic") == "anomalies" for lb, _ in secs) and all(
                v == 0.0 for _, v in secs
            ):
                break
            time.sleep(0.5)
        else:
            pytest.fail(
                f"no lag gauges at 0; worker log:\n{w.log_tail()}\nmetrics:\n{text[-2000:]}"
            )
        assert _listening(port) & {"00000000"}, _listening(port)  # all interfaces, not loopback
        lag = _samples(text, "argus_consumer_lag")
        topics = {lb["topic"] for lb, _ in lag if lb["role"] == "funnel"}
        assert {"anomalies", "internal.funnel-jobs"} <= topics, topics  # all unprefixed
        assert {lb["topic"] for lb, _ in secs} == topics
    finally:
        w.stop()


def _tiny_kernel_batches(n: int, ranks: int = 8) -> list[tuple[bytes, bytes]]:
    """``n`` encoded ``kernel_batch`` records (key, value) of one kernel and 8 events each
    (~300 bytes: cheap to write, yet each one summarised by the compressor), window ids
    0..n-1 spread over ``ranks`` ranks."""
    import numpy as np

    from argus.schemas import Codec
    from argus.streams import synth

    gemm = synth.GroupSpec("gemm", 7, "compute", "stationary", 1.0, ((1.0, 1e5, 0.1),))
    rec = synth.kernel_batch(
        np.random.default_rng(3), synth.Mix((gemm,)), job="lag", rank=0, window_id=0, n_events=8
    )
    codec, t0 = Codec(), rec["window_start_ns"]
    return [
        (
            f"lag/{w % ranks}".encode(),
            codec.encode(
                "kernel_batch",
                {**rec, "rank": w % ranks, "window_id": w, "window_start_ns": t0 + w * 10**9},
            ),
        )
        for w in range(n)
    ]


def test_assigned_partitions_are_the_consumers_not_the_faust_assignors() -> None:
    from types import SimpleNamespace

    from faust.types import TP

    from argus.streams.app import assigned_partitions

    held = {TP("p.raw.kernels", 1), TP("p.raw.kernels", 0), TP("p-compressor-__assignor", 0)}
    app = SimpleNamespace(  # faust 0.15 without tables: round robin, its assignor knows nothing
        consumer=SimpleNamespace(assignment=lambda: held),
        assignor=SimpleNamespace(assigned_actives=set),
    )
    got = assigned_partitions(cast(Any, app), {"p.raw.kernels"})
    assert got == [TP("p.raw.kernels", 0), TP("p.raw.kernels", 1)]


@pytest.mark.kafka
def test_compressor_only_worker_publishes_its_lag_and_reads_a_backlog_as_lag(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    """A compressor-only worker (no tables: faust 0.15 assigns its partitions round robin,
    outside faust's assignor) publishes its raw.kernels lag; a backlog written before it
    starts reads as lag > 0 in records and seconds. 50,000 tiny batches: ~45 s of
    summarising on a loaded 2-core machine, far more than the gauge's first 5 s tick."""
    from confluent_kafka import Producer

    from argus.topics import topic_name

    prod = Producer(kafka.kafka_config(**{"linger.ms": 20}))
    topic = topic_name("raw.kernels", topic_prefix)
    for key, value in _tiny_kernel_batches(50_000):
        prod.produce(topic, value, key)
        prod.poll(0)
    assert prod.flush(60) == 0
    w = worker(topic_prefix, tmp_path, ("compressor",))
    w.start()
    try:
        text, deadline = "", time.monotonic() + 120
        lag: list[tuple[dict[str, str], float]] = []
        secs: list[tuple[dict[str, str], float]] = []
        while time.monotonic() < deadline:
            text = scrape(w.metrics_port)
            lag = [s for s in _samples(text, "argus_consumer_lag") if s[0]["role"] == "compressor"]
            secs = [
                s
                for s in _samples(text, "argus_consumer_lag_seconds")
                if s[0]["role"] == "compressor"
            ]
            if any(v > 0 for _, v in lag) and any(v > 0 for _, v in secs):
                break
            time.sleep(0.5)
        else:
            pytest.fail(
                f"no compressor lag > 0 ({lag}, {secs}); worker log:\n{w.log_tail()}\n"
                f"metrics:\n{text[-2000:]}"
            )
        want = {"role": "compressor", "topic": "raw.kernels", "partition": "0"}
        assert [lb for lb, _ in lag] == [want] and [lb for lb, _ in secs] == [want]
    finally:
        w.stop()
