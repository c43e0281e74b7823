"""Group-wide faults through the engine's steps roles: each rank block reduces its own groups'
collectives to transfer times, the job tier compares every group of a kind per funnel window
(:mod:`argus.streams.roles.transfer`), whatever the block size."""

from __future__ import annotations

from typing import Any

import pytest

from argus.sim.simulate import SimRun, simulate
from argus.streams.memory import replay_stream
from argus.streams.pipeline_config import PipelineConfig


def _transfer(scenario: str, block_ranks: int) -> tuple[Any, list[tuple[str, str, int]]]:
    run = SimRun.make(scenario, ranks=64, steps=30, seed=3, kernels=False)
    recs = [r for t, _k, r in simulate(run) if t == "raw.steps"]
    res = replay_stream(recs, pcfg=PipelineConfig(steps_block_ranks=block_ranks))
    return run.truth, sorted(
        (a["group_kind"], a["group_id"], a["window_end_step"])
        for a in res.anomalies
        if a["evidence"].get("role") == "transfer"
    )


@pytest.mark.parametrize("block_ranks", [64, 24])
def test_a_slow_link_names_its_group_from_the_steps_alone(block_ranks: int) -> None:
    """``link-degradation``: one EDP group's expert-gradient collective 6x slower, every
    member equally (no rank stands out, L2 is blind; before, only L3's kernels named it)."""
    truth, found = _transfer("link-degradation", block_ranks)
    assert truth.group is not None
    assert found == [(*truth.group, 19), (*truth.group, 29)]  # every window after onset 7


def test_a_healthy_job_names_no_group() -> None:
    assert _transfer("healthy", 16)[1] == []


@pytest.mark.parametrize("block_ranks", [64, 24])
def test_a_slow_nic_its_pipeline_hides_names_its_host(block_ranks: int) -> None:
    """``mega-slow-nic`` on tp 8 x pp 4 x dp 4: the node's DP groups are all of its stage's
    and its pipelines' summed receives are bubbles; the blocks' receive rows (each rank's
    shortest receive a step) tell its links apart, so the host is named, not its stage
    (before: ``dp/pp<stage>``)."""
    run = SimRun.make("mega-slow-nic", layout="dp=4,tp=8,pp=4", steps=30, seed=3, kernels=False)
    recs = [r for t, _k, r in simulate(run) if t == "raw.steps"]
    res = replay_stream(recs, pcfg=PipelineConfig(steps_block_ranks=block_ranks))
    found = sorted(
        (a["group_kind"], a["group_id"], a["window_end_step"])
        for a in res.anomalies
        if a["evidence"].get("role") == "transfer"
    )
    host = run.truth.host
    assert host is not None and run.truth.onset_step == 7
    assert found == [("host", host, 19), ("host", host, 29)]
    members = {
        a["evidence"]["members"] for a in res.anomalies if a["evidence"].get("role") == "transfer"
    }
    assert members == {str(list(run.truth.ranks)).replace(" ", " ")}
