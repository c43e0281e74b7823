"""The roles' persisted state is all they need: restarting them after any record, with their
tables and states as a changelog restores them (JSON) and their process memory lost, finds
what an uninterrupted run finds (the in-memory driver's ``restart_every``)."""

from __future__ import annotations

from typing import Any

import pytest

from argus.sim.simulate import SimRun, simulate
from argus.streams.memory import run_engine
from argus.streams.pipeline_config import PipelineConfig


def _job(scenario: str, ranks: int, steps: int) -> tuple[list[Any], list[Any]]:
    run = SimRun.make(scenario, ranks=ranks, steps=steps, seed=5)
    recs = list(simulate(run))
    return (
        [r for t, _k, r in recs if t == "raw.steps"],
        [r for t, _k, r in recs if t == "raw.kernels"],
    )


def _alerts(res: Any) -> list[tuple[str, str, str]]:
    return sorted((a["dedup_key"], a["action"], a["id"]) for a in res.alerts)


@pytest.mark.parametrize("every", [1, 13])
def test_restarts_at_any_record_find_the_same(every: int) -> None:
    steps, kernels = _job("compute-straggler", 32, 40)
    pcfg = PipelineConfig(steps_block_ranks=16)  # two blocks: both tiers hold state
    once = run_engine(steps, kernel_batches=kernels, pcfg=pcfg)
    again = run_engine(steps, kernel_batches=kernels, pcfg=pcfg, restart_every=every)
    assert once.alerts, "the fault pages"
    assert {a["level"] for a in once.anomalies} >= {"L2", "L3", "funnel"}
    assert sorted(a["id"] for a in again.anomalies) == sorted(a["id"] for a in once.anomalies)
    assert _alerts(again) == _alerts(once)


def test_a_step_closed_again_after_a_restart_is_judged_once() -> None:
    """The history table's changelog can be ahead of the window state's at a crash: the
    restored tier closes a step again and its history names the step twice (once as a tuple,
    once restored as a list); L2 joins that step's windows once (before: "parts share steps
    of the same ranks", every later digest to the DLQ)."""
    from argus.detectors.config import DetectorsConfig
    from argus.detectors.inputs import group_windows
    from argus.routing import Routing
    from argus.streams.memory import _MemoryCtx
    from argus.streams.roles.steps import _L2Steps
    from argus.streams.step_digest import window_to_json

    steps, _ = _job("compute-straggler", 32, 12)
    ctx = _MemoryCtx(DetectorsConfig(), PipelineConfig())
    l2 = _L2Steps(ctx, "steps-digests")  # type: ignore[arg-type]
    recent: list[Any] = []
    for s in range(12):
        recs = [r for r in steps if r["step"] == s]
        wins = group_windows(recs, Routing(), job=recs[0]["job"])
        l2.store(recs[0]["job"], s, 0, [window_to_json(w) for w in wins])
        recent.append((s, [0]))
    job = steps[0]["job"]
    once = l2.run(job, job, {"recent": list(recent), "emitted": []})
    l2.cache.clear()  # a restart: windows joined again from the table
    twice = l2.run(job, job, {"recent": [*recent, [11, [0]], [10, [0]]], "emitted": []})
    assert [f.id for f in twice] == [f.id for f in once]
