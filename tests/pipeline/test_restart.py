"""A worker SIGKILLed mid-run and restarted resumes from its changelogs: the culprit's open
alert survives (it is not triggered anew as a fresh culprit), no alert record is sent twice,
and the steps after the restart are still diagnosed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from argus.config import Settings
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher

from .harness import SPLIT, metric, worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STEPS = 60


def _steps(run: SimRun, lo: int, hi: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for t, k, r in simulate(run):
        if lo <= int(r.get("step", r.get("window_id", 0))) < hi:
            yield t, k, r


def test_sigkill_mid_run_loses_and_duplicates_nothing(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    run = SimRun.make("compute-straggler", ranks=32, steps=STEPS, seed=5)
    truth = set(run.truth.ranks)
    steps_roles, kernel_roles = SPLIT
    kernels_w = worker(topic_prefix, tmp_path, kernel_roles).start()
    steps_w = worker(topic_prefix, tmp_path, steps_roles).start()
    watch = Watcher(kafka, ["alerts", "anomalies", "dlq"], prefix=topic_prefix)

    def culprit(w: Watcher) -> list[dict[str, Any]]:
        return [a for a in w.get("alerts") if a["action"] == "trigger" and set(a["ranks"]) == truth]

    try:
        publish(_steps(run, 0, 34), kafka, prefix=topic_prefix, step_rate=8.0)
        assert watch.wait_for(lambda w: bool(culprit(w)), timeout_s=180), steps_w.log_tail()
        steps_w.kill()  # SIGKILL: no clean shutdown, no final commit, mid-window
        steps_w = worker(topic_prefix, tmp_path, steps_roles).start()
        publish(_steps(run, 34, STEPS), kafka, prefix=topic_prefix, step_rate=8.0)
        assert watch.wait_for(
            lambda _: metric(steps_w, "argus_windows_closed_total", role="steps") >= STEPS - 34,
            timeout_s=180,
        ), steps_w.log_tail()
        watch.wait_for(lambda _: False, timeout_s=15)  # the funnel's last windows
    finally:
        steps_w.stop()
        kernels_w.stop()
        watch.close()
    alerts = watch.get("alerts")
    sent = Counter(
        (a["dedup_key"], a["action"], a["persistence"], a["last_seen_ns"]) for a in alerts
    )
    assert max(sent.values()) == 1, [k for k, n in sent.items() if n > 1]
    first_sightings = [a for a in culprit(watch) if a["persistence"] == 1]
    assert len(first_sightings) == 1, "the restarted funnel forgot the open alert"
    after = [a for a in watch.get("anomalies") if a["level"] == "L2" and a["window_end_step"] >= 40]
    assert any(a["ranks"] and set(a["ranks"]) <= truth for a in after), (
        "the restarted worker diagnosed nothing"
    )
    assert {r for a in alerts if a["action"] == "trigger" for r in a["ranks"]} <= truth
    assert watch.get("dlq") == []
