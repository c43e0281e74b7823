"""L3's stacked judgement of a block's (scope, kernel) cells equals the per-cell one, bit for bit.

``detect_window(..., stacked=True)`` (the default) computes every cell's quantile matrix in one
``mixture_quantile_cells`` call and screens the cells in stacked passes; ``stacked=False`` is
the per-cell numpy sequence it replaced. Over random tables (different rank counts per cell,
NaN quantiles, clusters below ``min_events``, collective kernels, p2p streams, partitions of
equal and unequal groups, slow ranks and slow groups) both give the same findings, every
float and evidence string included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from scipy.special import ndtri

from argus.detectors.config import L3Config
from argus.detectors.l3 import compare_groups, score_ranks, screen_groups, screen_ranks
from argus.detectors.l3_window import KernelTable, detect_window
from argus.sim.layout import Layout
from argus.summaries.lognormal import (
    default_probs,
    log_quantiles,
    mixture_quantile_cells,
    mixture_quantile_rows,
)

LEVELS = np.array([0.1, 0.5, 0.9, 0.99])
KERNELS = [
    ("gemm", 7, "compute"),
    ("softmax", 7, "compute"),
    ("ncclDevKernel_AllReduce", 16, "comm"),
    ("allgather", 17, "comm"),
    ("sendrecv", 18, "p2p"),
    ("layernorm", 9, "compute"),
]


def _table(seed: int, lay: Layout) -> KernelTable:
    """A random block: each rank has most kernels, 1-4 clusters each, some ranks/groups slow."""
    rng = np.random.default_rng(seed)
    world = lay.world
    slow_rank = {int(r): float(rng.uniform(1.3, 4.0)) for r in rng.choice(world, 3, replace=False)}
    slow_group = lay.group_id_of(int(rng.integers(world)), "edp")
    c_rank, c_key, counts, quant = [], [], [], []
    for r in range(world):
        for k, (name, _, _) in enumerate(KERNELS):
            if rng.random() < 0.15:  # this rank lacks the kernel: cells of different sizes
                continue
            base = 1e5 * (k + 1) * slow_rank.get(r, 1.0) * rng.lognormal(0.0, 0.03)
            if lay.group_id_of(r, "edp") == slow_group and name.startswith(("nccl", "all")):
                base *= 5.0
            for _ in range(int(rng.integers(1, 5))):
                mu = np.log(base * rng.uniform(1.0, 3.0))
                sig = rng.uniform(0.0, 0.3)
                q = np.exp(mu + sig * np.array([-1.28, 0.0, 1.28, 2.33]))
                if rng.random() < 0.02:
                    q[int(rng.integers(4))] = np.nan
                c_rank.append(r)
                c_key.append(k)
                counts.append(float(rng.integers(1, 60)))
                quant.append(q)
    return KernelTable(
        ranks=np.arange(world, dtype=np.int64),
        coords=[lay.coords(r) for r in range(world)],
        stream_kinds=[{s: kind for _, s, kind in KERNELS} for _ in range(world)],
        keys=[(n, s) for n, s, _ in KERNELS],
        c_rank=np.array(c_rank, np.int64),
        c_key=np.array(c_key, np.int64),
        counts=np.array(counts),
        log_q=log_quantiles(np.array(quant)),
        levels=LEVELS,
    )


CONFIGS = [
    L3Config(),
    L3Config(min_events=1, skip_stream_kinds=(), rank_test_min_ranks=4, rank_alpha=0.5),
    L3Config(match_stream=False, min_rel_w1=0.02, min_rel_w1_comm=0.3, min_groups=2),
    L3Config(min_events=60, n_probs=16, iqr_alpha=0.5, min_median_ratio=1.0, group_alpha=0.5),
]
LAYOUTS = [
    Layout(dp=8, tp=1, pp=2, ep=4),
    Layout(dp=4, tp=2, pp=1, ep=2),
    Layout(dp=6, tp=1, pp=1, ep=3),
    Layout(dp=32, tp=1, pp=1, ep=4),
]


def test_stacked_cells_give_the_per_cell_findings_bit_for_bit() -> None:
    n_found = 0
    kinds = set()
    for seed in range(6):
        for lay in LAYOUTS:
            t = _table(seed, lay)
            for cfg in CONFIGS:
                args = dict(window=(0, 9, 0, 1), cfg=cfg)
                stacked = detect_window("j", t, **args)  # type: ignore[arg-type]
                per_cell = detect_window("j", t, stacked=False, **args)  # type: ignore[arg-type]
                assert [repr(f) for f in stacked] == [repr(f) for f in per_cell]
                n_found += len(stacked)
                kinds |= {f.kind for f in stacked}
    # the comparison is not vacuous: both kinds of finding were made
    assert n_found > 20 and kinds == {"kernel_divergence", "group_divergence"}


def test_a_block_of_one_rank_per_cell_and_an_empty_block() -> None:
    lay = Layout(dp=4, tp=1, pp=1, ep=1)
    t = _table(3, lay)
    one = replace(t, c_rank=t.c_rank[t.c_rank == 0], c_key=t.c_key[t.c_rank == 0])
    one = replace(one, counts=t.counts[t.c_rank == 0], log_q=t.log_q[t.c_rank == 0])
    assert detect_window("j", one, window=(0, 1, 0, 1)) == []
    empty = replace(one, c_rank=one.c_rank[:0], c_key=one.c_key[:0], counts=one.counts[:0])
    empty = replace(empty, log_q=one.log_q[:0])
    assert detect_window("j", empty, window=(0, 1, 0, 1)) == []


def _rows_reference(
    row_of: np.ndarray,
    counts: np.ndarray,
    log_q: np.ndarray,
    levels: np.ndarray,
    probs: np.ndarray,
    n_rows: int,
) -> np.ndarray:
    """mixture_quantile_rows as first written (one call, whole rows; now the stacked core
    serves it): the reference the stacked passes must equal bit for bit."""
    z = ndtri(levels)
    k_per = np.bincount(row_of, minlength=n_rows)
    totals = np.bincount(row_of, weights=counts, minlength=n_rows)
    w = counts / totals[row_of]
    cw = np.cumsum(w)
    first = np.cumsum(k_per) - k_per
    keys = row_of + (cw - w - np.repeat(cw[first] - w[first], k_per))
    qq = (np.arange(n_rows)[:, None] + probs[None, :]).reshape(-1)
    comp = np.searchsorted(keys, qq, side="right") - 1
    local = np.clip((qq - keys[comp]) / w[comp], 1e-15, 1.0 - 1e-15)
    zz = ndtri(local)
    seg = np.clip(np.searchsorted(z, zz) - 1, 0, z.size - 2)
    y = log_q[comp]
    y0 = np.take_along_axis(y, seg[:, None], axis=1)[:, 0]
    y1 = np.take_along_axis(y, seg[:, None] + 1, axis=1)[:, 0]
    vals = (y0 + (y1 - y0) / (z[seg + 1] - z[seg]) * (zz - z[seg])).reshape(n_rows, probs.size)
    vals.sort(axis=1)
    out: np.ndarray = np.exp(vals)
    return out


@pytest.mark.parametrize("rows", [mixture_quantile_rows, _rows_reference])
@pytest.mark.parametrize("max_points", [1, 300, 1 << 16])
def test_mixture_cells_equal_one_call_per_cell_bit_for_bit(
    rows: Callable[..., np.ndarray], max_points: int
) -> None:
    rng = np.random.default_rng(5)
    cell_rows = rng.integers(1, 40, 25)
    n = int(cell_rows.sum())
    k_per = rng.integers(1, 8, n)
    row_of = np.repeat(np.arange(n), k_per)
    counts = rng.integers(1, 500, row_of.size).astype(np.float64)
    log_q = np.sort(rng.normal(12.0, 1.0, (row_of.size, LEVELS.size)), axis=1)
    log_q[rng.random(row_of.size) < 0.01, 1] = np.nan
    probs = default_probs(64)
    got = mixture_quantile_cells(
        row_of, counts, log_q, LEVELS, probs, cell_rows, max_points=max_points
    )
    r0 = np.cumsum(cell_rows) - cell_rows
    c0 = np.r_[0, np.cumsum(k_per)][r0]
    c1 = np.r_[c0[1:], row_of.size]
    want = np.concatenate(
        [
            rows(row_of[a:b] - r, counts[a:b], log_q[a:b], LEVELS, probs, int(m))
            for a, b, r, m in zip(c0, c1, r0, cell_rows, strict=True)
        ]
    )
    assert got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)


def test_screens_let_through_every_comparison_that_flags() -> None:
    """The screens say False only where score_ranks / compare_groups flag nothing."""
    rng = np.random.default_rng(11)
    cfg = L3Config(rank_test_min_ranks=8)
    m = 32
    n_rank_flags = n_group_flags = n_rank_screened = n_group_screened = 0
    for r, g in ((8, 4), (32, 4), (64, 16)):
        base = np.sort(rng.lognormal(13.0, 0.2, (1, 1, m)), axis=2)
        q = base * rng.lognormal(0.0, 0.05, (200, r, 1))
        q[:, 0] *= rng.choice([1.0, 1.1, 1.3, 3.0], (200, 1))  # near and far from the gates
        shift = np.repeat(rng.choice([1.0, 1.05, 1.12, 2.0], (200, g)), r // g, axis=1)
        q = q * shift[:, :, None]
        rel = np.full(200, cfg.min_rel_w1)
        level = np.full(200, cfg.rank_alpha / r)
        may_rank = screen_ranks(q, rel, level, cfg)
        may_group = screen_groups(q.reshape(200, g, r // g, m), rel)
        labels = np.repeat(np.arange(g), r // g)
        for c in range(200):
            flags = score_ranks(q[c], cfg, n_tests=r, pairwise=False).flagged.any()
            gflags = compare_groups(q[c], labels.tolist(), cfg).flagged.any()
            assert may_rank[c] or not flags
            assert may_group[c] or not gflags
            n_rank_flags += bool(flags)
            n_group_flags += bool(gflags)
            n_rank_screened += not may_rank[c]
            n_group_screened += not may_group[c]
    # both outcomes occur: the screens are exercised and do screen out cells
    assert n_rank_flags > 10 and n_group_flags > 10
    assert n_rank_screened > 100 and n_group_screened > 50
