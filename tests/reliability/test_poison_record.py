"""One wall-clock-stamped record among a backfilled job's records changes no finding (issue 17).

On the real broker: a simulated faulty job (the simulator's fixed 2026 epoch, published faster
than real time: a backfill) with one step record of it sent a second time re-stamped to the
wall clock, and a second job stamped as it is published (live). The poison record alone goes
to the DLQ, with its reason naming the rank; the backfill's anomalies are those of
``argus replay`` of the same job's records without it, and its fault is alerted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from argus.config import Settings
from argus.replay import TimeRange, replay
from argus.schemas import Codec
from argus.sim.simulate import T0_NS, SimRun, publish, simulate
from argus.streams.local_run import Watcher
from argus.topics import topic_name
from tests.pipeline.harness import workers

pytestmark = [pytest.mark.kafka]

RANKS, STEPS = 32, 48
POISON_RANK, POISON_STEP, AFTER_STEP = 5, 20, 30


def _shifted(rec: dict[str, Any], d: int) -> dict[str, Any]:
    """``rec`` moved by ``d`` ns of event time (spans kept: a valid record)."""
    phases = [{**p, "start_ns": p["start_ns"] + d} for p in rec["phases"]]
    return {**rec, "start_ns": rec["start_ns"] + d, "end_ns": rec["end_ns"] + d, "phases": phases}


def test_one_wall_clock_stamped_record_changes_no_finding(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    backfill = SimRun.make("compute-straggler", ranks=RANKS, steps=STEPS, seed=3)
    live = SimRun.make("compute-straggler", ranks=RANKS, steps=STEPS, seed=4, job="live-job")
    old = list(simulate(backfill))
    now_job = [r for r in simulate(live) if r[0] == "raw.steps"]  # steps only (no re-packing)
    poison: list[dict[str, Any]] = []

    def records() -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Both jobs step by step; the poison is built when it is sent."""
        by_step: dict[int, list[tuple[str, str, dict[str, Any]]]] = {}
        for r in now_job:
            by_step.setdefault(int(r[2]["step"]), []).append(r)
        last = -1
        for suffix, key, rec in old:
            s = int(rec.get("step", rec.get("window_id", 0)))
            if s != last:
                for lsuffix, lkey, lrec in by_step.pop(s, []):  # live: ends as it is sent
                    yield lsuffix, lkey, _shifted(lrec, time.time_ns() - lrec["end_ns"])
                if s == AFTER_STEP + 1:
                    (orig,) = [
                        r
                        for x, _k, r in old
                        if x == "raw.steps"
                        and r["rank"] == POISON_RANK
                        and r["step"] == POISON_STEP
                    ]
                    poison.append(_shifted(orig, time.time_ns() - orig["end_ns"]))
                    yield "raw.steps", f"{backfill.job}/{POISON_RANK}", poison[0]
                last = s
            yield suffix, key, rec

    steps_w, kernels_w = workers(topic_prefix, tmp_path)
    watch = Watcher(kafka, ["alerts", "anomalies", "dlq"], prefix=topic_prefix)
    try:
        publish(records(), kafka, prefix=topic_prefix, step_rate=12.0)  # ~3x real time
        end = max(r["end_ns"] for s, _k, r in old if s == "raw.steps")
        want = {  # the detectors' findings; the funnel's verdicts are the funnel tests'
            a["id"]
            for a in replay(
                kafka, backfill.job, TimeRange(T0_NS, end), prefix=topic_prefix
            ).stream_anomalies
            if a["level"] != "funnel"
        }
        assert want, "the faulty job yields anomalies"

        def got(w: Watcher) -> set[str]:  # the detectors' findings (L1-L3), as replay's
            return {
                a["id"]
                for a in w.get("anomalies")
                if a["job"] == backfill.job and a["level"] != "funnel"
            }

        def alerted(w: Watcher) -> bool:
            return any(
                a["job"] == backfill.job and a["action"] == "trigger" for a in w.get("alerts")
            )

        ok = watch.wait_for(lambda w: got(w) >= want and alerted(w), timeout_s=240)
        assert ok, (sorted(want - got(watch)), steps_w.log_tail() + kernels_w.log_tail())
        watch.wait_for(lambda _: False, timeout_s=10)  # idle closes: anything more comes now
        assert got(watch) == want
    finally:
        for w in (steps_w, kernels_w):
            w.stop()
        watch.close()
    (dlq,) = watch.get("dlq")  # the poison, and nothing of the backfill or the live job
    assert dlq["source_topic"] == topic_name("raw.steps", topic_prefix)
    assert dlq["value"] == Codec().encode("step_record", poison[0])
    who = f"{backfill.job} rank {POISON_RANK} step {POISON_STEP}"
    assert dlq["reason"].startswith(f"time-skew: step_record of {who}: event time "), dlq
    assert "further ahead of the broker's clock" in dlq["reason"], dlq["reason"]
