"""Table changelogs are written once per key per commit, not once per write
(argus.streams.durable), and what they hold is the state the agent ended with."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from argus.config import Settings
from argus.sim.simulate import SimRun, publish, simulate

from .harness import metric, worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RANKS, STEPS = 32, 24
ROLES = ("l1", "l2", "funnel", "stacks")


def _changelog(kafka: Settings, topic: str) -> list[tuple[bytes, bytes | None]]:
    c = Consumer(
        kafka.kafka_config(**{"group.id": f"t-{time.time_ns()}", "enable.auto.commit": False})
    )
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        tps = [TopicPartition(topic, p, 0) for p in md.partitions]
        c.assign(tps)
        ends = {
            p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in md.partitions
        }
        out: list[tuple[bytes, bytes | None]] = []
        done = {p for p, hi in ends.items() if hi == 0}
        deadline = time.monotonic() + 30
        while len(done) < len(ends) and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            out.append((m.key() or b"", m.value()))
            if (m.offset() or 0) + 1 >= ends[m.partition()]:
                done.add(m.partition())
        return out
    finally:
        c.close()


def test_one_changelog_record_per_key_per_commit(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    run = SimRun.make("healthy", ranks=RANKS, steps=STEPS, seed=2)
    w = worker(topic_prefix, tmp_path, ROLES).start()
    try:
        steps = [(t, k, r) for t, k, r in simulate(run) if t == "raw.steps"]
        publish(iter(steps), kafka, prefix=topic_prefix, step_rate=8.0)
        deadline = time.monotonic() + 120
        while metric(w, "argus_windows_closed_total", role="steps") < STEPS:
            assert time.monotonic() < deadline, w.log_tail()
            time.sleep(0.5)
        time.sleep(3)  # a few more commits
    finally:
        w.stop()
    app_id = f"{topic_prefix}-{'-'.join(sorted(ROLES))}"
    records = _changelog(kafka, f"{app_id}-steps-windows-state-changelog")
    per_key = Counter(k for k, _ in records)
    job_key = json.dumps(run.job).encode()
    writes = RANKS * STEPS  # the job's window state is written once per step record
    assert 1 <= per_key[job_key] <= writes // 8, per_key
    last: dict[str, Any] = json.loads([v for k, v in records if k == job_key][-1] or b"{}")
    # the final state, not an intermediate one: every step's aggregate was folded and popped
    assert last["agg"] == {}, sorted(last["agg"])[:5]
    # the block tier's cells, one per step record, are taken out when their step closes:
    # one created and closed between two commits leaves nothing in the changelog
    cells = _changelog(kafka, f"{app_id}-steps-cells-changelog")
    assert len(cells) <= writes // 2, Counter(v is None for _, v in cells)
    final: dict[bytes, bytes | None] = dict(cells)
    assert all(v is None for v in final.values())  # no cell outlives its step
