"""`argus status` / `argus jobs` against the real broker: jobs from the topics, workers'
liveness and lag from their consumer groups."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from argus.cli import main
from argus.config import Settings
from argus.drill.status import RoleRow, job_rows, open_alerts, render, role_rows
from argus.drill.window import iso
from argus.sim.simulate import T0_NS, publish, simulate

JOB = "sim-compute-straggler"


def _alert(key: str, action: str, job: str = JOB, t: int = T0_NS) -> dict[str, Any]:
    return {"dedup_key": key, "action": action, "job": job, "severity": "error",
            "summary": f"s {key}", "first_seen_ns": t}  # fmt: skip


def test_rows_pure() -> None:
    alerts = [_alert("a", "trigger"), _alert("b", "trigger"), _alert("a", "resolve"),
              _alert("c", "trigger", job="other")]  # fmt: skip
    assert {j: [a["dedup_key"] for a in v] for j, v in open_alerts(alerts).items()} == {
        JOB: ["b"],
        "other": ["c"],
    }
    steps = [({"job": JOB, "rank": r, "step": s, "start_ns": T0_NS + s, "end_ns": T0_NS + s + 1}, 1000)
             for r in range(4) for s in range(3)]  # fmt: skip
    rows = job_rows(steps, alerts)
    assert [r.job for r in rows] == [JOB, "other"]
    assert rows[0].extent.last_step == 2 and len(rows[0].extent.ranks) == 4
    groups = [
        {"group": "p-l1-l2", "state": "stable", "members": 1, "topics": {"p.raw.steps": {"lag": 5, "lag_s": 2.0, "committed": 1, "end": 6}}},
        {"group": "p-compressor", "state": "empty", "members": 0, "topics": {}},
        # a mixed worker's faust group: its compressor reads in p-compressor (the loop) ...
        {"group": "p-compressor-l3", "state": "stable", "members": 1, "topics": {"p.internal.l3-scopes": {"lag": 0, "lag_s": 0.0, "committed": 1, "end": 1}}},
        # ... or in the group itself (the faust runtime)
        {"group": "p-compressor-stacks", "state": "stable", "members": 1, "topics": {"p.raw.kernels": {"lag": 0, "lag_s": 0.0, "committed": 1, "end": 1}}},
        {"group": "p-drill-123", "state": "empty", "members": 0, "topics": {}},
        {"group": "p-steps-router", "state": "stable", "members": 1, "topics": {"p.raw.steps": {"lag": 0, "lag_s": 0.0, "committed": 1, "end": 1}}},
        {"group": "p.pagerduty", "state": "stable", "members": 1, "topics": {}},
    ]  # fmt: skip
    rr = role_rows(groups, "p")
    assert [(w.group, w.roles, w.liveness) for w in rr] == [
        ("p-compressor", ("compressor",), "down"),
        ("p-compressor-l3", ("l3",), "up"),
        ("p-compressor-stacks", ("compressor", "stacks"), "up"),
        ("p-l1-l2", ("l1", "l2"), "up"),
        ("p-steps-router", ("steps-router",), "up"),
        ("p.pagerduty", ("pagerduty",), "up"),
    ]
    assert rr[3].lag == 5 and rr[3].lag_s == 2.0
    text = render(rows, rr, now_ms=3000)
    assert f"{JOB}: {iso(T0_NS)}" in text and "last step 2; 4 ranks; newest record 2 s ago" in text
    assert "argus report --around 'b'" in text
    assert "p-l1-l2 [l1+l2]: up (stable, 1 member(s)); lag 5 records, 2 s" in text
    assert "p-steps-router [steps-router]: up" in text
    assert isinstance(rr[0], RoleRow)


@pytest.mark.kafka
def test_status_reads_topics_and_groups(
    kafka: Settings, topic_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    from argus.schemas.codec import Codec

    recs = list(simulate("compute-straggler", ranks=32, steps=5, seed=1, kernels=False))
    publish(iter(recs), kafka, prefix=topic_prefix)
    prod = Producer(kafka.kafka_config())
    codec = Codec()
    for a in (_alert("k1", "trigger"), _alert("k2", "trigger"), _alert("k2", "resolve")):
        full = {**_alert("x", "trigger"), **a, "group_kind": "dp", "group_id": "g", "ranks": [1],
                "phase": None, "kernels": [], "levels": ["L2"], "last_seen_ns": T0_NS,
                "persistence": 1, "confidence": 0.9, "anomaly_ids": [], "details": {}}  # fmt: skip
        prod.produce(
            f"{topic_prefix}.alerts", key=a["dedup_key"].encode(), value=codec.encode("alert", full)
        )
    assert prod.flush(30) == 0
    steps_topic = f"{topic_prefix}.raw.steps"
    n = sum(1 for s, _k, _r in recs if s == "raw.steps")
    # the live group once read raw.kernels too (the compressor before its own group): that
    # offset, a record behind, is left behind and must not show as lag while it reads steps
    kernels_topic = f"{topic_prefix}.raw.kernels"
    prod.produce(kernels_topic, value=b"x")
    assert prod.flush(30) == 0
    stale = Consumer(kafka.kafka_config(**{"group.id": f"{topic_prefix}-funnel"}))
    stale.commit(offsets=[TopicPartition(kernels_topic, 0, 0)], asynchronous=False)
    stale.close()
    # a stopped worker group 30 records behind, and a live one (a member, committed at the end)
    dead = Consumer(kafka.kafka_config(**{"group.id": f"{topic_prefix}-l1-l2"}))
    dead.commit(offsets=[TopicPartition(steps_topic, 0, n - 30)], asynchronous=False)
    dead.close()
    live = Consumer(
        kafka.kafka_config(
            **{"group.id": f"{topic_prefix}-funnel", "auto.offset.reset": "earliest"}
        )
    )
    live.subscribe([steps_topic])
    deadline = time.monotonic() + 60
    while not live.assignment() and time.monotonic() < deadline:
        live.poll(0.5)
    live.commit(offsets=[TopicPartition(steps_topic, 0, n)], asynchronous=False)
    try:
        time.sleep(1.0)
        assert main(["status", "--prefix", topic_prefix, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
    finally:
        live.close()
    (job,) = doc["jobs"]
    assert job["job"] == JOB and job["last_step"] == 4 and job["ranks"] == 32
    assert job["first_ns"] == T0_NS and [a["dedup_key"] for a in job["open_alerts"]] == ["k1"]
    w = {x["group"]: x for x in doc["workers"]}
    l12 = w[f"{topic_prefix}-l1-l2"]
    assert (l12["liveness"], l12["roles"], l12["lag_records"]) == ("down", ["l1", "l2"], 30)
    assert l12["lag_s"] is not None and l12["lag_s"] >= 0
    fun = w[f"{topic_prefix}-funnel"]
    assert (fun["liveness"], fun["members"], fun["lag_records"]) == ("up", 1, 0)
    assert kernels_topic not in str(fun)  # its members read only raw.steps now
    assert main(["jobs", "--prefix", topic_prefix]) == 0
    text = capsys.readouterr().out
    assert f"{JOB}: {iso(T0_NS)}" in text and "1 open alert(s)" in text and "WORKERS" not in text
