"""L3 per-rank comparison calibrated for the number of (rank, kernel) tests (issue 9 follow-up).

The soak's healthy 1,024-rank job gave ~120 ``kernel_divergence`` findings per window: the IQR
fence is not calibrated for ~150 kernels x 128 ranks per scope. These tests pin the calibrated
rule: the exact statistic, the family-wise false rate, the soak's kernel workload quiet while a
slow kernel of one rank is still named.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import f as f_dist
from scipy.stats import norm

from argus.detectors import l3
from argus.detectors.config import L3Config
from argus.detectors.l3_window import KernelTable, detect_window, table_from_summaries
from argus.errors import DetectorConfigError
from argus.sim.layout import Layout
from argus.streams import synth
from argus.summaries.summary_record import KernelNames, summarize_batch

P = (np.arange(64) + 0.5) / 64


def test_exceedance_p_on_a_hand_made_input() -> None:
    # median 2; upper half {2, 3, 10}: excesses 0, 1, 8, E = 9, m = 2
    p = l3.exceedance_p([10.0, 0.0, 3.0, np.nan, 1.0, 2.0])
    assert p.tolist() == pytest.approx([0.5 * (1 / 9) ** 2, 1.0, 0.5 * (8 / 9) ** 2, 1.0, 1.0, 0.5])
    assert l3.exceedance_p([4.0, 4.0, 4.0]).tolist() == [0.5, 0.5, 0.5]  # no spread
    assert l3.exceedance_p([np.nan]).tolist() == [1.0]


def test_exceedance_p_is_half_the_f_tail_of_the_excess_ratio() -> None:
    # e_r / mean(other upper-half excesses) ~ F(2, 2m) for exponential excesses
    rng = np.random.default_rng(4)
    s = rng.exponential(1.0, 41)
    p = l3.exceedance_p(s)
    u = np.median(s)
    upper = np.flatnonzero(s >= u)
    m = upper.size - 1
    for r in upper:
        others = (s[upper] - u).sum() - (s[r] - u)
        ratio = (s[r] - u) / (others / m)
        assert p[r] == pytest.approx(0.5 * f_dist.sf(ratio, 2, 2 * m), rel=1e-9)


def test_tail_gate_is_where_p_reaches_the_level() -> None:
    rng = np.random.default_rng(1)
    q = np.exp(np.log(1e6) + 0.3 * norm.ppf(P)) * np.exp(rng.normal(0, 0.01, (32, 1)))
    q[3] *= 1.4
    res = l3.score_ranks(q, n_tests=32 * 150)
    level = L3Config().rank_alpha / (32 * 150)
    assert res.n_tests == 4800 and res.flagged.tolist() == [i == 3 for i in range(32)]
    assert res.p_values[3] <= level < res.p_values[np.arange(32) != 3].min()
    assert res.scores[3] >= res.tail_gate > np.sort(res.scores)[-2]
    # the highest rank just at the gate has p = level
    s = res.scores.copy()
    s[3] = res.tail_gate
    assert l3.exceedance_p(s)[3] == pytest.approx(level, rel=1e-6)


def test_more_tests_need_a_larger_share_of_the_excess() -> None:
    rng = np.random.default_rng(7)
    q = np.exp(np.log(1e6) + 0.3 * norm.ppf(P)) * np.exp(rng.normal(0, 0.02, (16, 1)))
    q[5] *= 1.25
    cfg = L3Config(rank_test_min_ranks=16)  # the test applies to this 16-rank scope
    assert l3.score_ranks(q, cfg).flagged[5]  # one comparison (16 tests)
    assert not l3.score_ranks(q, cfg, n_tests=16 * 10**6).flagged.any()
    # below rank_test_min_ranks the fence and the gates decide alone
    assert l3.score_ranks(q, n_tests=16 * 10**6).flagged[5]


def test_healthy_false_rate_is_at_most_rank_alpha() -> None:
    # 16-rank scopes, rank spread lognormal (a half-normal W1): families of 16 ranks x 10
    # kernels, rank_alpha 0.05 (the IQR fence alone, 3.0: ~0.4 % of healthy ranks, 10x more)
    rng = np.random.default_rng(11)
    cfg = L3Config(
        rank_alpha=0.05, rank_test_min_ranks=16, min_rel_w1=0.0, min_median_ratio=0.0, iqr_alpha=0.0
    )
    base = np.exp(np.log(1e6) + 0.3 * norm.ppf(P))
    trials, hits = 300, 0
    for _ in range(trials):
        q = base * np.exp(rng.normal(0, 0.02, (10, 16, 1)))
        hits += any(l3.score_ranks(qk, cfg, n_tests=160).flagged.any() for qk in q)
    assert hits <= 0.05 * trials


def test_rank_alpha_is_validated() -> None:
    assert L3Config(rank_alpha=0.05).rank_alpha == 0.05
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(DetectorConfigError, match="rank_alpha"):
            L3Config(rank_alpha=bad)


def _soak_block(world: int, seed: int = 0) -> KernelTable:
    """One 10-step L3 block of bench/soak.py's kernel workload (64 compressed rank-windows)."""
    lay = Layout.for_ranks(world)
    mix = synth.default_mix(0)
    rng = np.random.default_rng(seed)
    pool = [
        summarize_batch(synth.kernel_batch(rng, mix, job="j", rank=0, window_id=0, n_events=3000))
        for _ in range(64)
    ]
    coords = [lay.coords(r) for r in range(world)]
    recs = []
    for s in range(10):
        picks = rng.integers(0, len(pool), world)
        recs += [dict(pool[picks[r]], rank=r, coords=coords[r], window_id=s) for r in range(world)]
    names = KernelNames()
    names.update_many(recs)
    return table_from_summaries(recs, names)


def test_soak_workload_is_quiet_and_a_slow_kernel_of_one_rank_is_named() -> None:
    # 256 ranks: 8 dp scopes of 32, ~146 (kernel, stream) keys; the IQR fence alone named
    # ~70-80 (scope, kernel) pairs in such a block
    t = _soak_block(256)
    found = detect_window("j", t, window=(0, 9, 0, 1))
    assert sum(f.kind == "kernel_divergence" for f in found) <= 3
    # rank 77's RMSNorm forward kernel (one mode, stationary) 1.5x slower
    key = t.keys.index(next(k for k in t.keys if "rmsnorm_fwd_tuned" in k[0] and k[1] == 7))
    log_q = t.log_q.copy()
    log_q[(t.c_rank == 77) & (t.c_key == key)] += np.log(1.5)
    slow = detect_window("j", replace(t, log_q=log_q), window=(0, 9, 0, 1))
    named = [f for f in slow if f.kind == "kernel_divergence" and f.kernel == t.keys[key][0]]
    assert [f.ranks for f in named] == [(77,)]
    ev = named[0].evidence
    assert float(ev["p_value"]) <= float(ev["alpha_per_test"]) <= 0.01 / (32 * 100)
    assert named[0].score >= named[0].threshold
