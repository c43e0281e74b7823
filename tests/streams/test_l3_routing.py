"""The compressor sends each summary's L3 item to its scope itself (issue 21), and L3's
router routes only the summaries other producers wrote (real broker, real workers).

* compressor + L3 with ``streams.l3_route_summaries = false``: L3 never reads
  ``summary.kernels``, and still finds what ``argus diagnose`` finds on the same records;
  every summary the compressor wrote carries the header that says it was routed.
* the default (``true``) with the compressor: L3's router takes the marked summaries and
  skips them (no summary reaches its scope twice: no duplicates);
* an L3 worker alone, summaries written to ``summary.kernels`` by another producer (no
  header): routed and judged as before.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from argus.config import Settings
from argus.diagnose import batch_summaries, diagnose
from argus.sim.simulate import publish, simulate
from argus.streams.local_run import Watcher
from argus.streams.roles.l3 import ROUTED_HEADER
from argus.topics import topic_name
from tests.pipeline.harness import metric, worker

pytestmark = [pytest.mark.kafka]

SCENARIO = dict(ranks=64, steps=30, seed=3)  # 64: see tests/ops/test_replay.py
JOB = "sim-link-degradation"


def _records() -> list[tuple[str, str, dict[str, Any]]]:
    return list(simulate("link-degradation", **SCENARIO))  # type: ignore[arg-type]


def _offline_l3(recs: list[tuple[str, str, dict[str, Any]]]) -> set[str]:
    steps = [r for s, _k, r in recs if s == "raw.steps"]
    batches = [r for s, _k, r in recs if s == "raw.kernels"]
    found = diagnose(steps, kernel_batches=batches).to_json()["findings"]
    return {f["id"] for f in found if f["level"] == "L3"}


def _live_l3(w: Watcher) -> set[str]:
    return {a["id"] for a in w.get("anomalies") if a["job"] == JOB and a["level"] == "L3"}


def _headers(kafka: Settings, prefix: str, n: int) -> list[set[str]]:
    """The header keys of the first ``n`` records of ``summary.kernels``."""
    cons = Consumer(
        kafka.kafka_config(
            **{"group.id": f"t-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}
        )
    )
    cons.subscribe([topic_name("summary.kernels", prefix)])
    got: list[set[str]] = []
    for _ in range(60):
        for m in cons.consume(500, timeout=0.5):
            if m.error() is None:
                got.append({k for k, _v in m.headers() or ()})
        if len(got) >= n:
            break
    cons.close()
    return got


@pytest.mark.parametrize("route_summaries", ["false", "true"])
def test_the_compressor_routes_l3(
    kafka: Settings, topic_prefix: str, tmp_path: Path, route_summaries: str
) -> None:
    recs = _records()
    offline = _offline_l3(recs)
    assert offline, "the scenario must give L3 findings"
    n_batches = sum(1 for s, _k, _r in recs if s == "raw.kernels")
    w = worker(
        topic_prefix,
        tmp_path,
        ("compressor", "l3"),
        ARGUS_STREAMS__L3_ROUTE_SUMMARIES=route_summaries,
    ).start()
    watch = Watcher(kafka, ["anomalies", "dlq"], prefix=topic_prefix)
    try:
        publish(iter(recs), kafka, prefix=topic_prefix)
        assert watch.wait_for(lambda wt: _live_l3(wt) >= offline, timeout_s=180), w.log_tail()
        routed_in = metric(w, "argus_records_in_total", role="l3", topic="summary.kernels")
        dups = metric(w, "argus_duplicate_records_total", role="l3")
    finally:
        w.stop()
        watch.close()
    assert _live_l3(watch) == offline
    assert watch.get("dlq") == []
    assert dups == 0  # no summary reached its scope twice
    if route_summaries == "false":
        assert routed_in == 0  # summary.kernels not read by L3 at all
    else:
        assert routed_in > 0  # read, and skipped: the compressor had routed them
    headers = _headers(kafka, topic_prefix, n_batches)
    assert len(headers) == n_batches
    assert all(ROUTED_HEADER in h for h in headers)


def test_other_producers_summaries_are_routed(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    recs = _records()
    offline = _offline_l3(recs)
    summaries = [
        ("summary.kernels", k, batch_summaries(r)) for s, k, r in recs if s == "raw.kernels"
    ]
    w = worker(topic_prefix, tmp_path, ("l3",)).start()
    watch = Watcher(kafka, ["anomalies", "dlq"], prefix=topic_prefix)
    try:
        publish(iter(summaries), kafka, prefix=topic_prefix)
        assert watch.wait_for(lambda wt: _live_l3(wt) >= offline, timeout_s=180), w.log_tail()
        routed_in = metric(w, "argus_records_in_total", role="l3", topic="summary.kernels")
    finally:
        w.stop()
        watch.close()
    assert _live_l3(watch) == offline
    assert routed_in == len(summaries)
    assert watch.get("dlq") == []
