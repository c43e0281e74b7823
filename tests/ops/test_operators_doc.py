"""docs/operators.md: its subscription example runs against the real broker."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from argus.cli import main
from argus.config import Settings
from argus.detectors.findings import Finding, anomaly_key, to_anomaly
from argus.schemas.codec import Codec

DOC = Path(__file__).resolve().parents[2] / "docs" / "operators.md"


def _follow() -> Any:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code, "docs/operators.md lost its python example"
    ns: dict[str, Any] = {"__name__": "doc_example"}
    exec(compile(code.group(1), str(DOC), "exec"), ns)
    return ns["follow"]


def _finding(job: str, group_id: str, step: int) -> Finding:
    return Finding(
        job=job, level="L2", kind="straggler", group_kind="dp", group_id=group_id, ranks=(7,),
        phase="mlp", window_start_step=step, window_end_step=step + 9, window_start_ns=1,
        window_end_ns=2, score=3.0, threshold=1.0, baseline=1.0, observed=3.0, unit="ms",
    )  # fmt: skip


@pytest.mark.kafka
def test_follow_filters_and_dedupes(kafka: Settings, topic_prefix: str) -> None:
    from confluent_kafka import Producer

    codec = Codec()
    prod = Producer(kafka.kafka_config())
    wanted = _finding("jobA", "pp0.tp1", 0)
    for f in (wanted, wanted, _finding("jobA", "pp1.tp0", 0), _finding("jobB", "pp0.tp1", 0)):
        rec = to_anomaly(f, detected_ns=2)
        prod.produce(f"{topic_prefix}.anomalies", codec.encode("anomaly", rec), anomaly_key(f))
    alert = {
        "dedup_key": "jobA/dp/pp0.tp1/7/mlp", "action": "trigger", "severity": "error",
        "summary": "rank 7 slow in mlp", "job": "jobA", "group_kind": "dp",
        "group_id": "pp0.tp1", "ranks": [7], "phase": "mlp", "kernels": [], "levels": ["L2"],
        "first_seen_ns": 1, "last_seen_ns": 2, "persistence": 2, "confidence": 0.9,
        "anomaly_ids": [wanted.id], "details": {},
    }  # fmt: skip
    prod.produce(f"{topic_prefix}.alerts", codec.encode("alert", alert), str(alert["dedup_key"]))
    assert prod.flush(10) == 0
    got = list(
        _follow()(kafka.bootstrap_servers, prefix=topic_prefix, job="jobA", group="dp/pp0.tp1",
                  group_id=f"g-{topic_prefix}", idle_s=4)
    )  # fmt: skip
    topics = sorted(t.rsplit(".", 1)[-1] for t, _r in got)
    assert topics == ["alerts", "anomalies"]  # the duplicate and the other job/group dropped
    rec = next(r for t, r in got if t.endswith("anomalies"))
    assert rec["id"] == wanted.id and rec["job"] == "jobA"


def test_replay_refuses_live_topics() -> None:
    rc = main(
        ["replay", "--job", "j", "--from", "0", "--to", "1", "--publish-topic", "argus.alerts"]
    )
    assert rc == 2
