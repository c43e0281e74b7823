"""L2: robust z per phase inside a comparison group; collectives read correctly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from argus.detectors import l2
from argus.detectors.config import L2Config
from argus.errors import DetectorInputError


def _win(
    d: np.ndarray, phases=("mlp",), kinds=("compute",), ranks=None, iter_ns=None
) -> l2.GroupWindow:
    r, s, _ = d.shape
    return l2.GroupWindow(
        job="j",
        group_kind="dp",
        group_id="pp0.tp0",
        ranks=np.arange(r) if ranks is None else np.asarray(ranks),
        steps=np.arange(100, 100 + s),
        phases=tuple(phases),
        stream_kinds=tuple(kinds),
        durations_ns=d,
        iter_ns=iter_ns,
    )


def _noise(r: int, s: int = 10, p: int = 1, seed: int = 0, base: float = 10e6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return base * np.exp(rng.normal(0, 0.02, (r, s, p)))


def test_single_straggler_is_named_with_phase_and_z() -> None:
    d = _noise(16)
    d[5] *= 2.0
    out = l2.detect(_win(d))
    assert len(out) == 1
    f = out[0]
    assert (f.kind, f.ranks, f.phase, f.level) == ("straggler", (5,), "mlp", "L2")
    # -log10 p against -log10 of the Holm level: the family is the 16 ranks of one phase
    assert f.threshold == pytest.approx(-np.log10(L2Config().alpha / 16))
    assert f.score > f.threshold
    assert f.evidence["role"] == "compute"
    assert json.loads(f.evidence["test"]) == {"5": "persistent"}
    assert json.loads(f.evidence["p"])["5"] == pytest.approx(16.0**-10, rel=1e-3)
    assert json.loads(f.evidence["bottleneck"]) == [5]
    assert 9 < f.baseline < 11 and 19 < f.observed < 21


def test_two_stragglers_one_finding() -> None:
    d = _noise(32)
    d[[3, 17]] *= 1.8
    (f,) = l2.detect(_win(d))
    assert f.ranks == (3, 17)


def test_healthy_group_and_whole_group_slowdown_are_quiet() -> None:
    assert l2.detect(_win(_noise(4096, s=4, seed=1))) == []
    d = _noise(16) * 3.0  # everyone slower together: nothing to compare against
    assert l2.detect(_win(d)) == []


def test_ties_give_finite_z_via_mad_floor() -> None:
    d = np.full((8, 5, 1), 10e6)
    d[2] = 14e6
    (f,) = l2.detect(_win(d))
    assert f.ranks == (2,) and np.isfinite(f.score)


def test_small_excess_is_not_named_even_with_large_z() -> None:
    d = np.full((8, 5, 1), 10e6)
    d[2] = 10.8e6  # z is huge (ties) but only 8 % slower (min_excess 10 %)
    assert l2.detect(_win(d)) == []


def test_pairs_name_the_slower_rank_only_past_pair_ratio() -> None:
    d = np.full((2, 3, 1), 10e6)
    d[1] = 20e6
    (f,) = l2.detect(_win(d))
    assert f.ranks == (1,) and f.score == pytest.approx(2.0)
    d[1] = 13e6
    assert l2.detect(_win(d)) == []


def test_tiny_groups_of_three() -> None:
    d = np.full((3, 4, 1), 10e6)
    d[0] = 25e6
    (f,) = l2.detect(_win(d))
    assert f.ranks == (0,)


def test_single_rank_group_is_not_judged() -> None:
    assert l2.detect(_win(np.full((1, 3, 1), 10e6))) == []


def test_missing_steps_and_nan_are_tolerated() -> None:
    d = _noise(8)
    d[6] *= 2.5
    d[6, :7] = np.nan  # the straggler reported only 3 of 10 steps
    d[2, :, :] = np.nan  # a rank with no data at all
    (f,) = l2.detect(_win(d))
    assert f.ranks == (6,)
    assert f.evidence["n_ranks"] == "7"


def test_late_arrival_names_the_short_collective_not_the_waiting_peers() -> None:
    # case 5: rank 3 is late; its 7 peers wait ~20 ms inside the all-to-all
    coll = np.full((8, 10), 22e6) * np.exp(np.random.default_rng(0).normal(0, 0.02, (8, 10)))
    coll[3] = 2e6
    d = coll[:, :, None]
    it = np.full((8, 10), 100e6)
    (f,) = l2.detect(_win(d, phases=("ep_alltoall",), kinds=("comm",), iter_ns=it))
    assert f.ranks == (3,)
    assert f.evidence["role"] == "late_arrival"
    # the victims are never culprits
    assert not set(f.ranks) & {0, 1, 2, 4, 5, 6, 7}


def test_late_arrival_below_step_share_is_ignored() -> None:
    coll = np.full((8, 10, 1), 3e6)
    coll[3] = 0.5e6  # 2.5 ms shorter: < 5 % of a 100 ms step
    it = np.full((8, 10), 100e6)
    assert l2.detect(_win(coll, phases=("ep_alltoall",), kinds=("comm",), iter_ns=it)) == []


def test_victims_reported_as_evidence() -> None:
    coll = np.full((16, 10, 1), 2e6) * np.exp(np.random.default_rng(1).normal(0, 0.02, (16, 10, 1)))
    coll[[4, 5]] = 30e6  # two peers waited (the late one is elsewhere)
    coll[9] = 0.1e6
    out = l2.detect(_win(coll, phases=("dp_grad_sync",), kinds=("comm",)), L2Config())
    assert out == [] or 9 in out[0].ranks
    for f in out:
        assert not {4, 5} & set(f.ranks)


def test_bottleneck_is_the_phase_with_the_largest_excess() -> None:
    d = _noise(16, p=2)
    d[7, :, 0] *= 3.0  # +20 ms in phase a
    d[7, :, 1] *= 1.5  # +5 ms in phase b
    out = {f.phase: f for f in l2.detect(_win(d, phases=("a", "b"), kinds=("compute", "compute")))}
    assert json.loads(out["a"].evidence["bottleneck"]) == [7]
    assert json.loads(out["b"].evidence["bottleneck"]) == []


def test_bad_shapes_raise() -> None:
    with pytest.raises(DetectorInputError, match="shape"):
        _win(np.ones((4, 3, 2)))
    with pytest.raises(DetectorInputError, match="negative"):
        _win(-np.ones((4, 3, 1)))
