"""A worker SIGKILLed mid-run and restarted resumes from its changelogs: the culprit's open
alert survives (it is not triggered anew as a fresh culprit), no alert record is sent twice,
the steps after the restart are still diagnosed, and no finding is lost (every anomaly the
live agents would have produced without the crash, i.e. the offline replay's, is there).

Both worker processes are killed in turn: the step roles (l1, l2, funnel, stacks) and the
kernel roles (compressor, l3)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from argus.config import Settings
from argus.replay import TimeRange, replay
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher

from .harness import SPLIT, backlog, metric, reader_group, worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STEPS = 60


def _steps(run: SimRun, lo: int, hi: int) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for t, k, r in simulate(run):
        if lo <= int(r.get("step", r.get("window_id", 0))) < hi:
            yield t, k, r


@pytest.mark.parametrize("victim", ["steps", "kernels"])
def test_sigkill_mid_run_loses_and_duplicates_nothing(
    kafka: Settings, topic_prefix: str, tmp_path: Path, victim: str
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
        # SIGKILL: no clean shutdown, no final commit, mid-window
        if victim == "steps":
            steps_w.kill()
            steps_w = worker(topic_prefix, tmp_path, steps_roles).start()
        else:
            kernels_w.kill()
            kernels_w = worker(topic_prefix, tmp_path, kernel_roles).start()
        publish(_steps(run, 34, STEPS), kafka, prefix=topic_prefix, step_rate=8.0)
        closed = STEPS - 34 if victim == "steps" else STEPS
        assert watch.wait_for(
            lambda _: metric(steps_w, "argus_windows_closed_total", role="steps") >= closed,
            timeout_s=180,
        ), steps_w.log_tail()
        assert watch.wait_for(  # the last L3 block (windows 50-59) was judged
            lambda w: any(
                a["level"] == "L3" and a["window_end_step"] >= STEPS - 1 for a in w.get("anomalies")
            ),
            timeout_s=120,
        ), kernels_w.log_tail()
        watch.wait_for(lambda _: False, timeout_s=15)  # the funnel's last windows
        # every input record was taken and committed: none stranded behind a dropped batch
        inputs = {
            reader_group(topic_prefix, steps_roles, "raw.steps"): f"{topic_prefix}.raw.steps",
            reader_group(topic_prefix, kernel_roles, "raw.kernels"): f"{topic_prefix}.raw.kernels",
        }
        left: dict[str, int] = {}

        def drained(_: Watcher) -> bool:
            left.update({t: backlog(kafka, g).get(t, -1) for g, t in inputs.items()})
            return all(n == 0 for n in left.values())

        assert watch.wait_for(drained, timeout_s=30, poll_s=2.0), (left, steps_w.log_tail())
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

    # nothing lost: every finding of a crash-free run (the live agents run offline) was sent.
    # Compared per culprit, not per window: when the input pauses (the publisher waits for the
    # restart), an L3 block is judged in two parts live and in one offline.
    def culprits(anoms: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
        return {
            (a["level"], a["kind"], a["group_kind"], a["group_id"], tuple(a["ranks"]), a["kernel"])
            for a in anoms
            if a["kind"] != "missing_rank"
        }

    offline = replay(kafka, run.job, TimeRange(0, 2**62), prefix=topic_prefix).stream_anomalies
    lost = culprits(offline) - culprits(watch.get("anomalies"))
    assert offline and not lost, sorted(lost)[:10]
