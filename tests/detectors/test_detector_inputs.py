"""Adapters: step records -> L1 series and L2 group windows."""

from __future__ import annotations

import numpy as np
import pytest

from argus.detectors.inputs import group_windows, job_series, nested_waits, route_record
from argus.errors import DetectorInputError
from argus.sim.layout import Layout

LAY = Layout(dp=4, tp=2)


def _rec(
    rank: int, step: int, mlp: float = 10e6, it: float = 50e6, job: str = "j", extra=()
) -> dict:
    t = 1_000_000_000 + step * 100_000_000
    phases = [
        {"name": "mlp", "stream_kind": "compute", "start_ns": t, "duration_ns": int(mlp)},
        {
            "name": "tp_allreduce",
            "stream_kind": "comm",
            "start_ns": t + int(mlp),
            "duration_ns": 1_000_000,
        },
        *extra,
    ]
    return {
        "job": job,
        "rank": rank,
        "step": step,
        "start_ns": t,
        "end_ns": t + int(it),
        "coords": LAY.coords(rank),
        "phases": phases,
    }


def test_job_series_is_max_over_ranks_with_missing_ranks() -> None:
    recs = [
        _rec(r, s, it=50e6 + r * 1e6) for s in range(3) for r in range(8) if not (s == 1 and r == 7)
    ]
    js = job_series(recs)
    assert js.steps.tolist() == [0, 1, 2]
    assert js.iter_ns.tolist() == [57e6, 56e6, 57e6]
    assert js.n_ranks.tolist() == [8, 7, 8]
    assert np.isnan(js.per_rank[7, 1])


def test_route_record_uses_coords_only() -> None:
    parts = {(k, g): [p["name"] for p in ph] for k, g, ph in route_record(_rec(5, 0))}
    assert parts == {("dp", "tp1"): ["mlp"], ("tp", "dp2"): ["tp_allreduce"]}


def test_group_windows_shape_and_missing_steps() -> None:
    recs = [_rec(r, s) for s in range(4) for r in range(8) if not (r == 3 and s == 2)]
    wins = {(w.group_kind, w.group_id): w for w in group_windows(recs)}
    assert set(wins) == {("dp", "tp0"), ("dp", "tp1"), *{("tp", f"dp{i}") for i in range(4)}}
    w = wins[("dp", "tp1")]
    assert w.ranks.tolist() == [1, 3, 5, 7] and w.steps.tolist() == [0, 1, 2, 3]
    assert w.durations_ns.shape == (4, 4, 1) and np.isnan(w.durations_ns[1, 2, 0])
    assert w.iter_ns is not None and w.iter_ns.shape == (4, 4)


def test_repeated_phases_in_a_step_are_summed() -> None:
    extra = [{"name": "mlp", "stream_kind": "compute", "start_ns": 0, "duration_ns": 5_000_000}]
    (w, *_rest) = group_windows([_rec(0, 0, extra=extra)], kinds=["dp"])
    assert w.durations_ns[0, 0, 0] == 15e6


def test_nested_p2p_waits_are_subtracted_from_compute() -> None:
    wait = {
        "name": "pp_p2p",
        "stream_kind": "p2p",
        "start_ns": 1_000_000_000 + 6_000_000,
        "duration_ns": 3_000_000,
    }
    rec = _rec(0, 0, extra=[wait])
    assert list(nested_waits(rec["phases"]).values()) == [3_000_000.0]
    (w,) = group_windows([rec], kinds=["dp"])
    assert w.durations_ns[0, 0, 0] == 7e6
    (w2,) = group_windows([rec], kinds=["dp"], self_time=False)
    assert w2.durations_ns[0, 0, 0] == 10e6


def test_bad_records_raise_typed_errors() -> None:
    bad = _rec(0, 0)
    bad["end_ns"] = bad["start_ns"] - 1
    with pytest.raises(DetectorInputError, match="end_ns"):
        job_series([bad])
    neg = _rec(0, 0)
    neg["phases"][0]["duration_ns"] = -5
    with pytest.raises(DetectorInputError, match="duration_ns"):
        group_windows([neg])
    with pytest.raises(DetectorInputError, match="several jobs"):
        job_series([_rec(0, 0), _rec(1, 0, job="k")])
    with pytest.raises(DetectorInputError, match="no step records"):
        job_series([])
    missing = _rec(0, 0)
    del missing["phases"]
    with pytest.raises(DetectorInputError, match="phases"):
        group_windows([missing])


def test_merging_per_step_windows_equals_building_the_whole_window() -> None:
    from argus.detectors.inputs import merge_group_windows
    from argus.sim.simulate import SimRun, simulate

    run = SimRun.make("compute-straggler", layout="dp=4,tp=2,pp=2,ep=2", steps=6, seed=2)
    recs = [r for topic, _k, r in simulate(run) if topic == "raw.steps"]
    recs = [r for r in recs if not (r["step"] == 3 and r["rank"] == 5)]  # one missing cell
    whole = group_windows(recs)
    parts = [w for s in range(6) for w in group_windows([r for r in recs if r["step"] == s])]
    merged = merge_group_windows(parts)
    assert [(w.group_kind, w.group_id) for w in merged] == [
        (w.group_kind, w.group_id) for w in whole
    ]
    for a, b in zip(merged, whole, strict=True):
        assert (a.phases, a.stream_kinds, a.start_ns, a.end_ns) == (
            b.phases,
            b.stream_kinds,
            b.start_ns,
            b.end_ns,
        )
        np.testing.assert_array_equal(a.ranks, b.ranks)
        np.testing.assert_array_equal(a.steps, b.steps)
        np.testing.assert_array_equal(a.durations_ns, b.durations_ns)
        np.testing.assert_array_equal(a.iter_ns, b.iter_ns)
    with pytest.raises(DetectorInputError, match="share steps"):
        merge_group_windows(parts + parts[:1])
