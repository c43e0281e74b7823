"""The L2 screen's Holm bound (:func:`argus.detectors.l2_batch.screen`): a group it rules out
is one ``l2.detect`` names nobody in, on noisy windows built to sit near the Holm step
(ties, ranks late together, clipped scores, missing cells, pairs, coarse durations)."""

from __future__ import annotations

import numpy as np
import pytest

from argus.detectors import l2
from argus.detectors.config import L2Config
from argus.detectors.l2_batch import detect_many, screen

_KINDS = ("compute", "comm", "p2p", "host")


def _durations(
    rng: np.random.Generator, g: int, r: int, s: int, kinds: tuple[str, ...]
) -> np.ndarray:
    """(G, R, S, P) durations, ns: lognormal noise and, per group, one of the near-Holm cases."""
    p = len(kinds)
    base = rng.uniform(1e6, 80e6, size=(g, 1, 1, p))
    sig = rng.choice([0.005, 0.03, 0.1, 0.3], size=(g, 1, 1, 1))
    d = base * rng.lognormal(0.0, 1.0, size=(g, r, s, p)) ** sig
    for i in range(g):
        case = int(rng.integers(0, 8))
        j = int(rng.integers(p))
        m = int(rng.integers(1, max(2, r // 2) + 1))  # ranks slow or late together
        who = rng.choice(r, size=min(m, r), replace=False)
        f = rng.choice([0.2, 0.5, 0.8, 1.15, 1.5, 2.0, 5.0])
        if case == 1:  # m ranks slow (or short) in every step
            d[i, who, :, j] *= f
        elif case == 2:  # in most steps
            d[i, who, : max(1, s - 1), j] *= f
        elif case == 3:  # exact ties: coarse durations
            d[i] = np.round(d[i] / 1e6) * 1e6
            d[i, who, :, j] = np.round(d[i, who, :, j] * f / 1e6) * 1e6
        elif case == 4:  # missing cells, then slow ranks
            d[i][rng.random((r, s, p)) < 0.25] = np.nan
            d[i, who, :, j] *= f
        elif case == 5:  # beyond the clip (4x) in every step: scores tie at the top
            d[i, who, :, j] *= rng.choice([0.05, 0.1, 10.0, 20.0])
        elif case == 6:  # one burst
            d[i, who[0], int(rng.integers(s)), j] += rng.uniform(0.1e9, 2e9)
    return d


@pytest.mark.parametrize("seed", range(8))
def test_screen_drops_only_groups_detect_names_nobody_in(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    cfg = L2Config()
    kept = dropped = named = 0
    for _shape in range(10):
        r = int(rng.choice([2, 3, 4, 5, 8, 16, 32]))
        s = int(rng.choice([2, 3, 4, 6, 8]))
        kinds = tuple(str(k) for k in rng.choice(_KINDS, size=int(rng.integers(1, 4))))
        g = 30
        d = _durations(rng, g, r, s, kinds)
        it = np.nansum(d, axis=3).max(axis=1, keepdims=True).repeat(r, 1) * 1.05
        if rng.random() < 0.3:
            it = np.full_like(it, np.nan)
        elif rng.random() < 0.3:  # +inf iteration times: detect's median counts them
            it[rng.random(it.shape) < 0.3] = np.inf
        flag = screen(d, it, kinds, cfg)
        for i in range(g):
            w = l2.GroupWindow(
                job="j",
                group_kind="k",
                group_id=f"g{i}",
                ranks=np.arange(r),
                steps=np.arange(s),
                phases=tuple(f"ph{q}" for q in range(len(kinds))),
                stream_kinds=kinds,
                durations_ns=d[i],
                iter_ns=it[i],
            )
            found = l2.detect(w, cfg)
            named += bool(found)
            if not flag[i]:
                dropped += 1
                assert found == [], (seed, r, s, kinds, i)
            else:
                kept += 1
    assert named and dropped and kept > named, (named, dropped, kept)


def _late_pair_window(rng: np.random.Generator, i: int, two_late: bool) -> l2.GroupWindow:
    """A 16-rank, 4-step p2p window (an ``edp`` group of the 512-rank job): one or two ranks'
    collective far shorter in every step (scores at the clip)."""
    d = 30e6 * rng.lognormal(0.0, 0.02, size=(16, 4, 1))
    d[3] *= 0.1
    if two_late:
        d[9] *= 0.1
    return l2.GroupWindow(
        job="j",
        group_kind="edp",
        group_id=f"g{i:02d}",
        ranks=np.arange(16) + 16 * i,
        steps=np.arange(4),
        phases=("ep_a2a",),
        stream_kinds=("p2p",),
        durations_ns=d,
        iter_ns=np.full((16, 4), 100e6),
    )


def test_two_ranks_tied_at_the_clip_are_ruled_out_one_is_kept() -> None:
    """Two ranks sharing the top score of every step: p = (2/16)^4 = 1/4096 > alpha / 16,
    exactly the bound; the screen drops the group without the convolution. One rank alone
    (p = 16^-4) passes, and the screen keeps it."""
    rng = np.random.default_rng(3)
    cfg = L2Config()
    wins = [_late_pair_window(rng, i, two_late=i % 2 == 0) for i in range(20)]
    d = np.stack([w.durations_ns for w in wins])
    it = np.stack([w.iter_ns for w in wins if w.iter_ns is not None])
    flag = screen(d, it, ("p2p",), cfg)
    per = [l2.detect(w, cfg) for w in wins]
    assert [bool(f) for f in per] == [i % 2 == 1 for i in range(20)]
    assert flag.tolist() == [i % 2 == 1 for i in range(20)]
    assert detect_many(wins, cfg) == [f for fs in per for f in fs]
