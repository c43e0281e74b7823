"""`argus demo` end to end (simulator source, small): culprit found, findings JSON written,
the demo's topics deleted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from argus.config import Settings
from argus.demo import run_demo

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_demo_names_the_culprit_and_cleans_up(kafka: Settings, tmp_path: Path) -> None:
    out = tmp_path / "findings.json"
    res = run_demo(kafka, source="simulator", ranks=32, steps=40, rate=8.0, out=out, timeout_s=180)
    doc = json.loads(out.read_text())
    assert res.found and doc["culprit_found"]
    assert set(doc["truth"]["ranks"]) >= {
        r for a in res.alerts if a["action"] == "trigger" for r in a["ranks"]
    }
    left = [
        t
        for t in AdminClient(kafka.kafka_config()).list_topics(timeout=10).topics
        if t.startswith(doc["topic_prefix"] + ".")
    ]
    assert left == []
