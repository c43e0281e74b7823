"""argus.summaries.kde: invariants (hypothesis), edge cases, vectorized == per group."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus.config import ConfigError
from argus.summaries import kde
from argus.summaries.kde import (
    PAPER,
    ROBUST,
    KdeConfig,
    SummaryInputError,
    summarize,
    summarize_many,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _samples(seed: int, n: int, mu: float, sigma: float) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(mu, sigma, n)


durations = st.lists(
    st.one_of(
        st.floats(min_value=1.0, max_value=1e10, allow_nan=False),
        st.integers(min_value=1, max_value=10**10).map(float),
    ),
    min_size=0,
    max_size=300,
)
configs = st.sampled_from(
    [PAPER, ROBUST, KdeConfig(bandwidth_rule="silverman", bandwidth_factor=0.9)]
)


@FAST
@given(d=durations, cfg=configs)
def test_counts_add_up_quantiles_ordered_clusters_disjoint(d: list[float], cfg: KdeConfig) -> None:
    s = summarize(d, config=cfg)
    assert s.n == len(d)
    assert np.all(s.counts >= 1)
    q = s.quantiles_ns
    assert np.all(np.diff(q, axis=1) >= -1e-9 * np.abs(q[:, 1:]))  # increasing levels
    assert np.all(s.p50_ns <= s.p99_ns * (1 + 1e-12))
    # ordered and disjoint: a cluster's highest quantile <= the next cluster's lowest
    assert np.all(q[:-1, -1] <= q[1:, 0] * (1 + 1e-12))
    if len(d):
        assert q.min() >= min(d) * (1 - 1e-9) and q.max() <= max(d) * (1 + 1e-9)


@FAST
@given(
    n=st.integers(1, 3000),
    mu=st.floats(3.0, 18.0),
    sigma=st.floats(0.0005, 0.05),
    seed=st.integers(0, 2**31),
    cfg=st.sampled_from([PAPER, ROBUST]),
)
def test_single_tight_mode_gives_one_cluster(
    n: int, mu: float, sigma: float, seed: int, cfg: KdeConfig
) -> None:
    s = summarize(_samples(seed, n, mu, sigma), config=cfg)
    assert len(s) == 1 and s.n == n


@FAST
@given(
    n1=st.integers(20, 800),
    n2=st.integers(20, 800),
    mu=st.floats(4.0, 16.0),
    sigma=st.floats(0.005, 0.1),
    seed=st.integers(0, 2**31),
    cfg=st.sampled_from([PAPER, ROBUST]),
)
def test_two_modes_a_decade_apart_give_two_clusters(
    n1: int, n2: int, mu: float, sigma: float, seed: int, cfg: KdeConfig
) -> None:
    rng = np.random.default_rng(seed)
    d = np.r_[rng.lognormal(mu, sigma, n1), rng.lognormal(mu + np.log(10), sigma, n2)]
    rng.shuffle(d)
    s = summarize(d, config=cfg)
    assert s.counts.tolist() == [n1, n2]
    assert s.p50_ns[1] / s.p50_ns[0] == pytest.approx(10, rel=0.15)


def test_quantiles_are_numpy_quantiles_of_each_cluster() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.lognormal(8, 0.05, 300), rng.lognormal(11, 0.05, 200)
    s = summarize(np.r_[b, a], config=ROBUST)
    for data, q in zip((a, b), s.quantiles_ns, strict=True):
        np.testing.assert_allclose(q, np.quantile(data, ROBUST.quantile_levels), rtol=1e-9)


@FAST
@given(
    sizes=st.lists(st.integers(1, 200), min_size=1, max_size=12),
    sparse=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_summarize_many_equals_summarize_per_group(
    sizes: list[int], sparse: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    ids = rng.choice(2**40 if sparse else 50, size=len(sizes), replace=False).astype(np.int64)
    g = np.repeat(ids, sizes)
    mus = rng.uniform(5, 15, len(sizes))
    d = np.exp(
        np.repeat(mus, sizes)
        + 0.05 * rng.standard_normal(g.size)
        + np.log(4) * (rng.random(g.size) < 0.3)
    )
    order = rng.permutation(g.size)
    many = summarize_many(g[order], d[order], config=ROBUST)
    assert many.group_ids.tolist() == sorted(ids.tolist())
    assert many.group_n.sum() == g.size
    for i, gid in enumerate(many.group_ids):
        one = summarize(d[g == gid], config=ROBUST)
        got = many.summary(i)
        assert got.counts.tolist() == one.counts.tolist()
        np.testing.assert_allclose(got.quantiles_ns, one.quantiles_ns, rtol=1e-8)


def test_edge_cases_empty_one_equal() -> None:
    e = summarize([])
    assert e.n == 0 and len(e) == 0 and e.quantiles_ns.shape == (0, 2)
    one = summarize([1234])
    assert one.counts.tolist() == [1]
    np.testing.assert_allclose(one.quantiles_ns, [[1234.0, 1234.0]], rtol=1e-12)  # exp(ln x)
    same = summarize([77] * 50)
    assert same.counts.tolist() == [50] and np.allclose(same.quantiles_ns, 77)
    m = summarize_many(np.zeros(0, np.int64), np.zeros(0))
    assert m.n_groups == 0 and m.n_clusters == 0 and m.group_first.tolist() == [0]


def test_invalid_durations_are_rejected_and_counted() -> None:
    d = np.array([0.0, -5.0, np.nan, np.inf, -np.inf, 100.0, 110.0, 105.0])
    s = summarize(d)
    assert s.n == 3 and s.rejected == 5
    many = summarize_many(np.array([1, 1, 2, 2, 2, 1, 1, 1]), d)
    assert many.rejected.nan == 1 and many.rejected.inf == 1 and many.rejected.nonpositive == 3
    assert many.rejected.total == 5
    assert many.group_ids.tolist() == [1] and many.group_n.tolist() == [3]  # group 2 all invalid
    all_bad = summarize([np.nan, 0.0])
    assert all_bad.n == 0 and all_bad.rejected == 2


@pytest.mark.parametrize(
    ("g", "d", "what"),
    [
        (np.zeros((2, 2), int), np.ones((2, 2)), "1-D"),
        (np.zeros(3, int), np.ones(4), "one group id per event"),
        (np.zeros(3), np.ones(3), "integers"),
        (np.array([-1, 0, 1]), np.ones(3), "non-negative"),
        (np.zeros(2, int), np.array(["a", "b"]), "numbers"),
    ],
)
def test_bad_arrays_raise_typed_errors(g: np.ndarray, d: np.ndarray, what: str) -> None:
    with pytest.raises(SummaryInputError, match=what):
        summarize_many(g, d)


def test_paper_loses_a_rare_spike_robust_isolates_it() -> None:
    d = np.r_[_samples(1, 400, np.log(50e3), 0.03), [40 * 50e3]]
    paper, robust = summarize(d, config=PAPER), summarize(d, config=ROBUST)
    assert paper.counts.tolist() == [401]
    assert robust.counts.tolist() == [400, 1]
    assert robust.p50_ns[1] == pytest.approx(2e6)


def test_min_samples_and_min_gap_filters() -> None:
    rng = np.random.default_rng(5)
    base = rng.lognormal(9, 0.02, 300)
    two = np.r_[base, rng.lognormal(9 + np.log(5), 0.02, 2)]
    assert len(summarize(two)) == 1  # 2 < min_samples_per_side
    assert len(summarize(two, config=KdeConfig(min_samples_per_side=2))) == 2
    close = np.r_[
        base, rng.lognormal(9.12, 0.005, 300)
    ]  # modes 0.12 apart in ln: below min_log_gap
    assert len(summarize(close, config=KdeConfig(min_log_gap=0.5))) == 1


def test_refinement_splits_modes_that_scott_smooths_together() -> None:
    rng = np.random.default_rng(2)
    d = np.concatenate([rng.lognormal(6 + 1.5 * k, 0.01, 40) for k in range(6)])
    assert len(summarize(d)) < 6  # the paper's Scott bandwidth merges neighbouring modes
    assert summarize(d, config=ROBUST).counts.tolist() == [40] * 6


def test_valley_depth_keeps_noise_dips_from_splitting_one_mode() -> None:
    # seed 309: Scott's KDE of these 48 log-normal durations has a shallow dip at the middle
    d = np.random.default_rng(309).lognormal(4, 0.1, 48)
    assert summarize(d, config=PAPER).counts.tolist() == [24, 24]
    assert summarize(d, config=dataclasses.replace(ROBUST, valley_depth=1.0)).counts.size == 2
    for cfg in (ROBUST, kde.COMPACT):
        assert summarize(d, config=cfg).counts.tolist() == [48]
    # a real valley between close modes (1.3x apart) is deep: still split
    rng = np.random.default_rng(3)
    two = np.r_[rng.lognormal(4, 0.03, 200), rng.lognormal(4 + np.log(1.3), 0.03, 200)]
    assert summarize(two, config=kde.COMPACT).counts.tolist() == [200, 200]


def test_max_clusters_keeps_widest_gaps() -> None:
    rng = np.random.default_rng(2)
    d = np.concatenate([rng.lognormal(c, 0.01, 40) for c in (6, 7.5, 9, 13, 14.5, 16)])
    assert len(summarize(d, config=ROBUST)) == 6
    capped = summarize(d, config=dataclasses.replace(ROBUST, max_clusters=2))
    assert capped.counts.tolist() == [120, 120]  # the 4.0 gap is the widest: kept


def test_grid_cap_still_separates_far_modes() -> None:
    rng = np.random.default_rng(4)
    d = np.r_[rng.lognormal(5, 0.001, 500), rng.lognormal(15, 0.001, 500)]
    s = summarize(d, config=KdeConfig(max_grid_points=64))
    assert s.counts.tolist() == [500, 500]


def test_lexsort_fallback_gives_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(6)
    g = rng.integers(0, 20, 2000)
    d = np.exp(rng.uniform(5, 12, 20)[g] + 0.05 * rng.standard_normal(2000))
    fast = summarize_many(g, d)
    monkeypatch.setattr(kde, "_KEY_LIMIT", 1.0)
    slow = summarize_many(g, d)
    assert fast.cluster_count.tolist() == slow.cluster_count.tolist()
    np.testing.assert_allclose(fast.cluster_quantiles_ns, slow.cluster_quantiles_ns, rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"quantile_levels": (0.5,)},
        {"quantile_levels": (0.99, 0.5)},
        {"quantile_levels": (0.0, 0.5, 0.99)},
        {"bandwidth_rule": "magic"},
        {"min_samples_per_side": 0},
        {"max_clusters": 256},
        {"min_log_gap": -1},
        {"method": ""},
        {"quantile_encoding": "float16"},
        {"valley_depth": 0.0},
        {"valley_depth": 1.5},
    ],
)
def test_config_validation(kwargs: dict) -> None:
    with pytest.raises(ConfigError):
        KdeConfig(**kwargs)


def test_config_from_mapping_and_presets() -> None:
    assert KdeConfig.from_mapping(None) == kde.DEFAULT == kde.COMPACT
    assert KdeConfig.from_mapping({"method": "kde-p50p99"}) == PAPER
    assert KdeConfig.from_mapping({"method": "kde-q4i"}) == ROBUST
    assert kde.COMPACT.quantile_encoding == "log16" and len(kde.COMPACT.quantile_levels) == 7
    c = KdeConfig.from_mapping(
        {"method": "kde-q4i", "min_log_gap": 0.3, "quantile_levels": [0.5, 0.99]}
    )
    assert c.min_log_gap == 0.3 and c.quantile_levels == (0.5, 0.99) and c.isolate_log_gap == 1.0
    with pytest.raises(ConfigError, match=r"unknown key 'bandwith' in \[kde\]"):
        KdeConfig.from_mapping({"bandwith": 1})
    with pytest.raises(ConfigError, match="unknown summary method"):
        kde.config_for_method("t-digest")


def test_summary_accessors() -> None:
    s = summarize([100, 101, 99, 100, 1000, 1001, 999, 1000])
    cl = s.clusters
    assert [c.count for c in cl] == [4, 4]
    assert cl[0].p50_ns == pytest.approx(100) and cl[1].quantile_levels == (0.5, 0.99)
    assert [c.count for c in s] == [4, 4] and "Summary(kde-p50p99, n=8" in repr(s)
    with pytest.raises(KeyError):
        s._col(0.9)
