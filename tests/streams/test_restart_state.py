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
