"""Vectorised L2 (:func:`argus.detectors.l2_batch.detect_many`) equals one ``l2.detect`` per
group: the same findings, scores and evidence, on random windows of every kind of case."""

from __future__ import annotations

import numpy as np
import pytest

from argus.detectors import l2
from argus.detectors.config import L2Config
from argus.detectors.l2_batch import detect_many, screen

_KINDS = ("compute", "comm", "p2p", "host")


def _window(
    rng: np.random.Generator, r: int, s: int, kinds: tuple[str, ...], i: int
) -> l2.GroupWindow:
    p = len(kinds)
    base = rng.uniform(1e6, 50e6, size=p)
    d = base[None, None, :] * rng.lognormal(0.0, rng.choice([0.01, 0.05, 0.2]), size=(r, s, p))
    case = rng.integers(0, 7)
    if case == 1:  # a persistent straggler in one phase
        d[rng.integers(r), :, rng.integers(p)] *= rng.uniform(1.1, 3.0)
    elif case == 2:  # a burst: one step far beyond noise
        d[rng.integers(r), rng.integers(s), rng.integers(p)] += rng.uniform(0.2e9, 2e9)
    elif case == 3:  # a late arrival: short collectives
        d[rng.integers(r), :, :] *= np.where(np.isin(kinds, ("comm", "p2p")), 0.3, 1.0)
    elif case == 4:  # missing cells
        d[rng.random((r, s, p)) < 0.2] = np.nan
    elif case == 5:  # near the gate: a small excess
        d[rng.integers(r), :, rng.integers(p)] *= 1.0 + rng.uniform(0.0, 0.3)
    it = np.nansum(np.where(np.isfinite(d), d, 0.0), axis=2).max(axis=0, keepdims=True)
    it = it.repeat(r, 0) + rng.uniform(0.0, 5e6, size=(r, s))
    if rng.random() < 0.2:
        it[rng.integers(r), rng.integers(s)] = np.nan
    return l2.GroupWindow(
        job="j",
        group_kind="dp",
        group_id=f"g{i}",
        ranks=np.arange(r) + 100 * i,
        steps=np.arange(s) + 7,
        phases=tuple(f"ph{j}" for j in range(p)),
        stream_kinds=kinds,
        durations_ns=d,
        start_ns=10 * i,
        end_ns=10 * i + 5,
        iter_ns=None if case == 6 else it,
    )


@pytest.mark.parametrize("seed", range(6))
def test_detect_many_equals_detect_per_group(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cfg = L2Config()
    wins = []
    for shape in range(8):  # several shapes, many groups of each
        r = int(rng.choice([1, 2, 3, 4, 8, 16]))
        s = int(rng.choice([1, 2, 4, 8]))
        kinds = tuple(str(k) for k in rng.choice(_KINDS, size=int(rng.integers(1, 5))))
        wins += [_window(rng, r, s, kinds, 40 * shape + g) for g in range(40)]
    rng.shuffle(wins)  # shapes interleaved: the order of the findings is the input's
    per_group = [f for w in wins for f in l2.detect(w, cfg)]
    assert per_group, "the random windows must name someone for the test to mean anything"
    assert detect_many(wins, cfg) == per_group


def test_the_screen_rules_out_healthy_groups_and_keeps_a_straggler() -> None:
    rng = np.random.default_rng(1)
    d = 10e6 * rng.lognormal(0.0, 0.01, size=(50, 8, 8, 2))
    d[7, 3, :, 0] *= 2.0  # group 7, rank 3: twice as slow in every step
    it = d.sum(axis=3).max(axis=1, keepdims=True).repeat(8, 1)
    flag = screen(d, it, ("compute", "comm"))
    assert flag.tolist() == [g == 7 for g in range(50)]
