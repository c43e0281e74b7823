"""A worker SIGKILLed mid-run and restarted resumes from its changelogs: the culprit is still
alerted, and no alert is sent twice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from argus.config import Settings
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher

from .harness import SPLIT, metric, worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STEPS = 48


def _steps(run: SimRun, lo: int, hi: int):  # type: ignore[no-untyped-def]
    for t, k, r in simulate(run):
        s = int(r.get("step", r.get("window_id", 0)))
        if lo <= s < hi:
            yield t, k, r


def test_sigkill_mid_window_loses_and_duplicates_nothing(kafka: Settings, topic_prefix: str, tmp_path: Path) -> None:
    run = SimRun.make("compute-straggler", ranks=32, steps=STEPS, seed=5)
    steps_roles, kernel_roles = SPLIT
    kernels_w = worker(topic_prefix, tmp_path, kernel_roles).start()
    steps_w = worker(topic_prefix, tmp_path, steps_roles).start()
    watch = Watcher(kafka, ["alerts", "anomalies", "dlq"], prefix=topic_prefix)
    try:
        publish(_steps(run, 0, 24), kafka, prefix=topic_prefix, step_rate=8.0)
        assert watch.wait_for(lambda _: metric(steps_w, "argus_windows_closed_total", role="steps") >= 16,
                              timeout_s=120), steps_w.log_tail()
        steps_w.kill()  # SIGKILL: no clean shutdown, no final commit
        steps_w = worker(topic_prefix, tmp_path, steps_roles).start()
        publish(_steps(run, 24, STEPS), kafka, prefix=topic_prefix, step_rate=8.0)
        truth = set(run.truth.ranks)
        assert watch.wait_for(
            lambda w: any(a["action"] == "trigger" and set(a["ranks"]) == truth and a["persistence"] >= 3
                          for a in w.get("alerts")), timeout_s=180), steps_w.log_tail()
        watch.wait_for(lambda _: False, timeout_s=8)
    finally:
        steps_w.stop()
        kernels_w.stop()
        watch.close()
    alerts = watch.get("alerts")
    sent = Counter((a["dedup_key"], a["action"], a["persistence"], a["last_seen_ns"]) for a in alerts)
    assert max(sent.values()) == 1, [k for k, n in sent.items() if n > 1]
    assert {r for a in alerts if a["action"] == "trigger" for r in a["ranks"]} <= truth
    assert watch.get("dlq") == []
