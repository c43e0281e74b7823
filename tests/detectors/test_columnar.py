"""Columnar group windows (:mod:`argus.detectors.columnar`) equal the per-record ones."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from argus.detectors import l2
from argus.detectors.columnar import (
    Cell,
    Topology,
    batch_from_json,
    batch_to_json,
    cell_batches,
    cell_records,
    detect_batches,
    group_batches,
    join_blocks,
    join_steps,
)
from argus.detectors.config import L2Config
from argus.detectors.groupwide import cell_receive_rows, receive_rows
from argus.detectors.inputs import group_windows, merge_group_windows
from argus.errors import DetectorInputError
from argus.routing import Routing
from argus.sim.simulate import SimRun, simulate


def _steps(scenario: str, ranks: int, steps: int) -> list[dict[str, Any]]:
    run = SimRun.make(scenario, ranks=ranks, steps=steps, seed=2, kernels=False)
    return [r for topic, _k, r in simulate(run) if topic == "raw.steps"]


def _windows(batches: list[Any]) -> list[l2.GroupWindow]:
    return sorted(
        (w for b in batches for w in b.windows()), key=lambda w: (w.group_kind, w.group_id)
    )


def _assert_same(a: list[l2.GroupWindow], b: list[l2.GroupWindow]) -> None:
    assert [(w.group_kind, w.group_id, w.phases, w.stream_kinds) for w in a] == [
        (w.group_kind, w.group_id, w.phases, w.stream_kinds) for w in b
    ]
    for x, y in zip(a, b, strict=True):
        assert (x.start_ns, x.end_ns) == (y.start_ns, y.end_ns)
        np.testing.assert_array_equal(x.ranks, y.ranks)
        np.testing.assert_array_equal(x.steps, y.steps)
        np.testing.assert_array_equal(x.durations_ns, y.durations_ns)  # NaN == NaN here
        np.testing.assert_array_equal(x.iter_ns, y.iter_ns)


def test_batches_equal_group_windows_with_gaps_and_repeated_phases() -> None:
    recs = _steps("pp-stage-straggler", 64, 3)
    recs = [r for r in recs if not (r["step"] == 1 and r["rank"] == 3)]  # a NaN cell
    recs = copy.deepcopy(recs)
    recs[5]["phases"].append(dict(recs[5]["phases"][0]))  # one name twice: summed
    del recs[9]["phases"][1]  # a rank lacking a phase
    job = recs[0]["job"]
    topo = Topology(Routing.default())
    _assert_same(_windows(group_batches(recs, topo, job=job)), group_windows(recs, job=job))


def test_joined_steps_and_json_round_trip_equal_merged_windows() -> None:
    recs = _steps("compute-straggler", 32, 4)
    job = recs[0]["job"]
    topo = Topology(Routing.default())
    per_step = [
        [
            batch_from_json(job, batch_to_json(b))
            for b in group_batches([r for r in recs if r["step"] == s], topo, job=job)
        ]
        for s in range(4)
    ]
    joined = join_steps(per_step)
    assert joined is not None
    whole = group_windows(recs, job=job)
    _assert_same(_windows(joined), whole)
    _assert_same(
        _windows(joined), merge_group_windows(w for bs in per_step for b in bs for w in b.windows())
    )
    cfg = L2Config()
    found = detect_batches(joined, cfg)
    assert found == [f for w in whole for f in l2.detect(w, cfg)]
    assert any(f.kind == "straggler" for f in found)


def test_a_group_changing_shape_is_not_joined() -> None:
    recs = _steps("compute-straggler", 32, 2)
    job = recs[0]["job"]
    topo = Topology(Routing.default())
    a = group_batches([r for r in recs if r["step"] == 0], topo, job=job)
    b = group_batches([r for r in recs if r["step"] == 1 and r["rank"] != 2], topo, job=job)
    assert join_steps([a, b]) is None


def test_blocks_joined_equal_merged_windows() -> None:
    recs = [r for r in _steps("compute-straggler", 64, 2) if r["step"] == 1]
    job = recs[0]["job"]
    topo = Topology(Routing.default())
    blocks = [[r for r in recs if r["rank"] // 16 == b] for b in range(4)]
    parts = [b for blk in blocks for b in group_batches(blk, topo, job=job)]
    joined = join_blocks(parts)
    assert joined is not None
    _assert_same(_windows(joined), group_windows(recs, job=job))
    _assert_same(
        _windows(joined),
        merge_group_windows(w for blk in blocks for w in group_windows(blk, job=job)),
    )
    parts[1] = parts[1].take([0])  # a block's groups missing: still each group's parts joined
    assert join_blocks(parts + parts[:1]) is None  # one part twice: shares its ranks


def test_cells_as_stored_equal_group_windows_and_receive_rows() -> None:
    """The steps roles' cells, read as stored (phase tuples; lists once restored from JSON;
    3-tuples of an older state, starting at the step's start), give the windows of
    ``group_windows`` (self time included: every record here nests a p2p phase in its
    compute) and the rows of ``receive_rows`` of the same records; a phase name twice takes
    the general path, a negative duration raises there."""
    recs = _steps("pp-stage-straggler", 64, 2)
    job = recs[0]["job"]
    topo = Topology(Routing.default())
    cells: list[Cell] = []
    for i, r in enumerate(recs):
        phases: list[Any] = [
            (p["name"], p["stream_kind"], p["duration_ns"], p["start_ns"]) for p in r["phases"]
        ]
        if i % 3 == 1:
            phases = [list(p) for p in phases]
        elif i % 3 == 2:
            phases = [p[:3] for p in phases]
        if i == 7:
            del phases[2]  # another layout
        cells.append((r["rank"], r["step"], r["start_ns"], r["end_ns"], r["coords"], phases))
    as_recs = cell_records(job, cells)
    assert as_recs[2]["phases"][0]["start_ns"] == recs[2]["start_ns"]
    whole = group_windows(as_recs, job=job)
    _assert_same(_windows(cell_batches(cells, topo, job=job)), whole)
    raw = _windows(cell_batches(cells, topo, job=job, self_time=False))
    assert any((x.durations_ns != y.durations_ns).any() for x, y in zip(raw, whole, strict=True))
    _assert_same(raw, group_windows(as_recs, job=job, self_time=False))
    rows = cell_receive_rows(cells, topo.kind_of, lambda co, k: topo.gids(co)[k])
    assert rows and rows == receive_rows(as_recs)
    twice = [*cells[:5], (*cells[5][:5], [*cells[5][5], cells[5][5][0]]), *cells[6:]]
    _assert_same(
        _windows(cell_batches(twice, topo, job=job)),
        group_windows(cell_records(job, twice), job=job),
    )
    bad = [*cells[:3], (*cells[3][:5], [("mlp", "compute", -1, 0)]), *cells[4:]]
    with pytest.raises(DetectorInputError, match="duration_ns -1"):
        cell_batches(bad, topo, job=job)


def _batch_fields(b: Any) -> tuple[Any, ...]:
    return (
        b.job,
        b.group_kind,
        b.group_ids,
        b.ranks.tolist(),
        b.ranks.dtype,
        b.steps.tolist(),
        b.steps.dtype,
        b.phases,
        b.stream_kinds,
        np.nan_to_num(b.durations_ns, nan=-1.0).tolist(),
        b.durations_ns.shape,
        np.nan_to_num(b.iter_ns, nan=-1.0).tolist(),
        b.start_ns.tolist(),
        b.end_ns.tolist(),
        b.start_ns.dtype,
        b.coords,
    )


def test_a_step_like_an_earlier_one_reuses_its_plan_and_gives_the_same_batches() -> None:
    """The cells of a step with the ranks, coords and phase layouts of an earlier step go
    through that step's plan: the same batches as a fresh Topology's loop over them, field
    by field (a missing cell, a NaN-free self time, other layouts in between)."""
    recs = _steps("pp-stage-straggler", 32, 5)
    job = recs[0]["job"]

    def cells_of(step: int, drop: int | None = None, short: int | None = None) -> list[Cell]:
        out: list[Cell] = []
        for r in recs:
            if r["step"] != step or r["rank"] == drop:
                continue
            ph = [
                (p["name"], p["stream_kind"], p["duration_ns"], p["start_ns"]) for p in r["phases"]
            ]
            if r["rank"] == short:
                ph = ph[1:]
            out.append((r["rank"], step, r["start_ns"], r["end_ns"], r["coords"], ph))
        return out

    topo = Topology(Routing.default())
    for self_time in (True, False):
        steps = [
            cells_of(0),
            cells_of(1),  # the plan of step 0
            cells_of(2, drop=5),  # another key: the loop, then its plan
            cells_of(3, drop=5),
            cells_of(4, short=7),
        ]
        for cells in steps:
            got = cell_batches(cells, topo, job=job, self_time=self_time)
            fresh = cell_batches(cells, Topology(Routing.default()), job=job, self_time=self_time)
            assert [_batch_fields(b) for b in got] == [_batch_fields(b) for b in fresh]
    assert len(topo._plans) == 6  # three keys, with and without the self time
    again = cell_batches(cells_of(1), topo, job=job)
    assert [_batch_fields(b) for b in again] == [
        _batch_fields(b) for b in cell_batches(cells_of(1), Topology(Routing.default()), job=job)
    ]


def _old_json(b: Any) -> dict[str, Any]:
    """A batch in the form before one buffer (lists and two base64 float64 arrays)."""
    import base64

    def b64(a: np.ndarray) -> str:
        return base64.b64encode(np.ascontiguousarray(a, dtype="<f8").tobytes()).decode()

    return {
        "k": b.group_kind,
        "gs": list(b.group_ids),
        "r": b.ranks.tolist(),
        "s": b.steps.tolist(),
        "p": list(b.phases),
        "sk": list(b.stream_kinds),
        "a": b.start_ns.tolist(),
        "b": b.end_ns.tolist(),
        "d": b64(b.durations_ns),
        "it": b64(b.iter_ns),
    }


@pytest.mark.parametrize(
    "odd",
    [None, 0.5, -3.0, -0.0, 2.0**32 - 1, 2.0**40, np.inf],
    ids=["whole", "half", "negative", "minus-zero", "sentinel", "big", "inf"],
)
def test_json_round_trip_is_exact_and_reads_the_earlier_form(odd: float | None) -> None:
    recs = [r for r in _steps("compute-straggler", 32, 2) if (r["step"], r["rank"]) != (1, 5)]
    job = recs[0]["job"]
    batches = group_batches(recs, Topology(Routing.default()), job=job)
    if odd is not None:
        batches[0].durations_ns[0, 0, 0, 0] = odd
        batches[-1].iter_ns[-1, -1, -1] = odd
    assert any(np.isnan(b.durations_ns).any() for b in batches)  # the missing step travels
    assert len(batches) > 2
    for i, b in enumerate(batches):
        d = batch_to_json(b)
        assert isinstance(d["r"], int)
        whole = odd is None or 0 < i < len(batches) - 1  # whole ns: half the bytes
        assert d.get("u4", False) is whole
        for back in (batch_from_json(job, d), batch_from_json(job, _old_json(b))):
            _assert_same(back.windows(), b.windows())
            assert [np.signbit(x.durations_ns).sum() for x in back.windows()] == [
                np.signbit(x.durations_ns).sum() for x in b.windows()
            ]
            assert back.durations_ns.dtype == np.float64 and back.durations_ns.flags.writeable
            assert back.ranks.dtype == back.start_ns.dtype == np.int64


def test_json_refuses_a_rank_past_avro_int() -> None:
    recs = _steps("compute-straggler", 32, 1)
    b = group_batches(recs, Topology(Routing.default()), job=recs[0]["job"])[0]
    object.__setattr__(b, "ranks", b.ranks + 2**31)
    with pytest.raises(DetectorInputError):
        batch_to_json(b)
