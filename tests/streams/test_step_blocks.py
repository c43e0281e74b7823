"""Steps in two tiers (per rank block, then per job): the same findings as one big block."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from argus.detectors.inputs import group_windows, merge_group_windows
from argus.sim.simulate import SimRun, simulate
from argus.streams.memory import replay_stream
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.step_digest import (
    block_key,
    block_of,
    block_size,
    blocks_in,
    window_from_json,
    window_to_json,
)


def _steps(scenario: str, ranks: int, steps: int, seed: int = 3) -> list[dict[str, Any]]:
    run = SimRun.make(scenario, ranks=ranks, steps=steps, seed=seed)
    return [r for topic, _k, r in simulate(run) if topic == "raw.steps"]


def test_block_arithmetic() -> None:
    assert [block_of(r, 4) for r in (0, 3, 4, 9)] == [0, 0, 1, 2]
    assert [blocks_in(w, 4) for w in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    assert [block_size(10, b, 4) for b in range(3)] == [4, 4, 2]  # the last block is short
    assert block_key("a|b7", 3) == "a|b7|b3"


def test_group_window_json_round_trip_keeps_nan_and_shapes() -> None:
    recs = _steps("compute-straggler", 32, 3)
    recs = [r for r in recs if not (r["step"] == 1 and r["rank"] == 3)]  # a NaN cell
    for w in group_windows(recs):
        back = window_from_json(w.job, window_to_json(w))
        assert (back.group_kind, back.group_id, back.phases, back.stream_kinds) == (
            w.group_kind,
            w.group_id,
            w.phases,
            w.stream_kinds,
        )
        assert (back.start_ns, back.end_ns) == (w.start_ns, w.end_ns)
        np.testing.assert_array_equal(back.ranks, w.ranks)
        np.testing.assert_array_equal(back.steps, w.steps)
        np.testing.assert_array_equal(back.durations_ns, w.durations_ns)  # NaN == NaN here
        np.testing.assert_array_equal(back.iter_ns, w.iter_ns)


def test_merging_rank_blocks_equals_building_the_whole_step() -> None:
    recs = [r for r in _steps("compute-straggler", 32, 2) if r["step"] == 1]
    whole = group_windows(recs)
    parts = [w for b in range(4) for w in group_windows([r for r in recs if r["rank"] // 8 == b])]
    merged = merge_group_windows(parts)
    assert [(w.group_kind, w.group_id) for w in merged] == [
        (w.group_kind, w.group_id) for w in whole
    ]
    for a, b in zip(merged, whole, strict=True):
        np.testing.assert_array_equal(a.ranks, b.ranks)
        np.testing.assert_array_equal(a.durations_ns, b.durations_ns)
        np.testing.assert_array_equal(a.iter_ns, b.iter_ns)


@pytest.mark.parametrize("scenario", ["compute-straggler", "pp-stage-straggler"])
def test_findings_do_not_depend_on_the_block_size(scenario: str) -> None:
    recs = _steps(scenario, 64, 24)
    one = replay_stream(recs, pcfg=PipelineConfig(steps_block_ranks=4096))
    many = replay_stream(recs, pcfg=PipelineConfig(steps_block_ranks=8))
    odd = replay_stream(recs, pcfg=PipelineConfig(steps_block_ranks=24))  # a short last block
    assert one.anomalies, "the scenario's fault was found"
    assert many.ids == one.ids == odd.ids
    assert any(a["level"] == "L2" for a in one.anomalies)


def test_missing_ranks_and_a_silent_block_are_named_on_event_time() -> None:
    """Rank 5 skips step 0 and block 3 (ranks 12-15) stops after step 0: block 1 closes step 0
    without rank 5 as soon as rank 5 reports step 1; the job tier names block 3's ranks once
    the other blocks passed a step by ``2 * lateness_steps + 1``; the last steps, which no
    watermark passed, close incomplete at the end of input and name nobody."""
    pcfg = PipelineConfig(steps_block_ranks=4, lateness_steps=3)  # the job tier waits 7
    recs = [
        r
        for r in _steps("healthy", 16, 20)
        if (r["rank"] < 12 or r["step"] == 0) and (r["rank"], r["step"]) != (5, 0)
    ]
    out = replay_stream(recs, pcfg=pcfg)
    missing = sorted(
        (a["window_end_step"], a["ranks"]) for a in out.anomalies if a["kind"] == "missing_rank"
    )
    assert missing == [(0, [5])] + [(s, [12, 13, 14, 15]) for s in range(1, 13)]
    assert all(
        a["evidence"]["expected"] == "16" for a in out.anomalies if a["kind"] == "missing_rank"
    )
    late = [a for a in out.anomalies if "incomplete_step" in a["evidence"]]
    assert all(int(a["evidence"]["incomplete_step"]) >= 13 for a in late)
