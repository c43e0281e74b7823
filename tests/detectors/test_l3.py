"""L3 core over quantile matrices: W1 to the median reference, IQR fence, groups."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from argus.detectors import l3
from argus.detectors.config import L3Config
from argus.errors import DetectorInputError

P = (np.arange(64) + 0.5) / 64


def _q(r: int, seed: int = 0, sigma_rank: float = 0.01) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = np.exp(np.log(1e6) + 0.3 * norm.ppf(P))
    return base * np.exp(rng.normal(0, sigma_rank, (r, 1))) * np.exp(rng.normal(0, 0.005, (r, 64)))


def test_w1_of_a_shift_is_the_shift() -> None:
    q = np.tile(np.linspace(1.0, 2.0, 64), (3, 1))
    q[1] += 0.5
    assert l3.w1_to(q, q[0]).tolist() == pytest.approx([0.0, 0.5, 0.0])
    pw = l3.pairwise_w1(q)
    assert pw.shape == (3, 3) and pw[0, 1] == pytest.approx(0.5) and np.allclose(pw, pw.T)


def test_single_outlier_is_flagged() -> None:
    q = _q(64)
    q[9] *= 1.5
    res = l3.score_ranks(q)
    assert np.flatnonzero(res.flagged).tolist() == [9]
    assert res.pairwise is not None and res.pairwise.shape == (64, 64)
    assert res.threshold >= res.fence


def test_tail_inflation_is_flagged() -> None:
    q = _q(32)
    q[4, -8:] *= 4.0  # only the upper tail grows
    assert 4 in np.flatnonzero(l3.score_ranks(q).flagged)


def test_two_outliers_and_healthy_population() -> None:
    q = _q(256, seed=3)
    assert not l3.score_ranks(q).flagged.any()
    q[[10, 200]] *= 2.0
    assert np.flatnonzero(l3.score_ranks(q).flagged).tolist() == [10, 200]


def test_healthy_4096_has_no_outliers_and_skips_pairwise() -> None:
    res = l3.score_ranks(_q(4096, seed=5))
    assert not res.flagged.any()
    assert res.pairwise is None


def test_tiny_groups_are_not_judged_but_scored() -> None:
    q = _q(3)
    q[0] *= 5
    res = l3.score_ranks(q)
    assert not res.flagged.any() and np.isfinite(res.scores).all()


def test_nan_rows_are_left_out() -> None:
    q = _q(16)
    q[2] = np.nan
    q[5] *= 2
    res = l3.score_ranks(q)
    assert np.isnan(res.scores[2]) and res.n_valid == 15
    assert np.flatnonzero(res.flagged).tolist() == [5]


def test_alpha_is_configurable() -> None:
    q = _q(64, seed=2)
    q[1] *= 1.2
    loose = l3.score_ranks(q, L3Config(iqr_alpha=0.0, min_rel_w1=0.0, min_median_ratio=0.0))
    strict = l3.score_ranks(q, L3Config(iqr_alpha=50.0))
    assert loose.flagged.sum() > strict.flagged.sum()


def test_whole_group_degradation_is_found_between_groups_not_within() -> None:
    # case 2: 8 groups of 4 ranks; group 5's collectives are 8x slower
    q = _q(32, seed=4)
    labels = np.repeat([f"g{i}" for i in range(8)], 4)
    q[labels == "g5"] *= 8.0
    inside = l3.score_ranks(q[labels == "g5"])
    assert not inside.flagged.any()
    cmp = l3.compare_groups(q, labels)
    assert [cmp.labels[i] for i in np.flatnonzero(cmp.flagged)] == ["g5"]
    assert cmp.block.shape == (8, 8)
    g5 = cmp.labels.index("g5")
    assert cmp.scores[g5] > 50 * np.nanmedian(cmp.within)


def test_healthy_groups_are_quiet_and_too_few_groups_not_judged() -> None:
    q = _q(64, seed=6)
    labels = np.repeat(np.arange(16), 4)
    assert not l3.compare_groups(q, labels).flagged.any()
    q2 = q[:8].copy()
    q2[:4] *= 5
    assert not l3.compare_groups(q2, np.repeat([0, 1], 4)).flagged.any()


def test_bad_input() -> None:
    with pytest.raises(DetectorInputError):
        l3.score_ranks(np.ones(5))
    with pytest.raises(DetectorInputError):
        l3.compare_groups(np.ones((4, 3)), [0, 1])
    with pytest.raises(DetectorInputError):
        l3.w1_to(np.ones((4, 3)), np.ones((4, 3)), weights=np.ones(2))
