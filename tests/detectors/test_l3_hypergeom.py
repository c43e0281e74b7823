"""The exact hypergeometric tail behind ``l3.slow_together_p`` (without ``scipy.stats``).

``hypergeom_sf`` replaces ``scipy.stats.hypergeom.sf`` so that the product does not import
``scipy.stats`` (~0.3 s per ``argus diagnose``). These tests pin it to scipy over a grid
(1e-12 relative; it is correctly rounded, so the gap is scipy's), to exact fractions, on the
edges of the support, and ``slow_together_p`` to the scipy formula it had before.
"""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from math import comb

import numpy as np
import pytest
from scipy.stats import hypergeom

from argus.detectors import l3
from argus.detectors.l3 import hypergeom_sf

REL = 1e-12


def _exact(x: int, total: int, good: int, draws: int) -> Fraction:
    num = sum(
        comb(good, i) * comb(total - good, draws - i)
        for i in range(max(x + 1, 0), draws + 1)
        if i <= good and draws - i <= total - good
    )
    return Fraction(num, comb(total, draws))


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= REL * abs(b)


def test_matches_scipy_on_every_small_case() -> None:
    """All (1 <= total <= 24, good, draws) and x from below to above the support (scipy
    gives NaN for ``total = 0``; see the edges test)."""
    misses = []
    for total in range(1, 25):
        for good in range(total + 1):
            for draws in range(total + 1):
                xs = np.arange(-3, draws + 3)
                ref = hypergeom.sf(xs, total, good, draws)
                for x, want in zip(xs.tolist(), ref.tolist(), strict=True):
                    got = hypergeom_sf(x, total, good, draws)
                    if not _close(got, want):
                        misses.append((x, total, good, draws, got, want))
    assert misses == []


@pytest.mark.parametrize("total", [64, 512, 1000, 4096])
def test_matches_scipy_and_fractions_on_large_scopes(total: int) -> None:
    """Random (good, draws, x) at scope sizes of real jobs, tails down to ~1e-100."""
    rng = np.random.default_rng(total)
    for _ in range(300):
        good = int(rng.integers(0, total + 1))
        draws = int(rng.integers(0, min(total, 80) + 1))
        x = int(rng.integers(-1, draws + 1))
        got = hypergeom_sf(x, total, good, draws)
        assert got == float(_exact(x, total, good, draws))  # correctly rounded
        assert _close(got, float(hypergeom.sf(x, total, good, draws)))


def test_edges_of_the_support() -> None:
    # x below the support: 1 exactly; at or past its top: 0 exactly
    assert hypergeom_sf(-1, 10, 4, 3) == 1.0
    assert hypergeom_sf(-5, 10, 4, 3) == 1.0
    assert hypergeom_sf(3, 10, 4, 3) == 0.0
    assert hypergeom_sf(7, 10, 4, 3) == 0.0
    # support bottom above 0: 8 of 10 drawn with 4 good -> at least 2 good
    assert hypergeom_sf(1, 10, 4, 8) == 1.0
    assert hypergeom_sf(2, 10, 4, 8) == pytest.approx(1 - comb(4, 2) * comb(6, 6) / comb(10, 8))
    # no good item, all good, nothing drawn, everything drawn
    assert hypergeom_sf(0, 10, 0, 5) == 0.0
    assert hypergeom_sf(4, 10, 10, 5) == 1.0
    assert hypergeom_sf(-1, 10, 3, 0) == 1.0 and hypergeom_sf(0, 10, 3, 0) == 0.0
    assert hypergeom_sf(2, 10, 3, 10) == 1.0 and hypergeom_sf(3, 10, 3, 10) == 0.0
    # the smallest scopes
    assert hypergeom_sf(-1, 0, 0, 0) == 1.0 and hypergeom_sf(0, 0, 0, 0) == 0.0
    assert hypergeom_sf(0, 1, 1, 1) == 1.0 and hypergeom_sf(0, 1, 0, 1) == 0.0
    # the tiny tail of a whole group among the slowest: C(16, 16) / C(4096, 16)
    assert hypergeom_sf(15, 4096, 16, 16) == float(Fraction(1, comb(4096, 16)))
    for bad in [(0, 3, 4, 2), (0, 3, 2, 4), (0, 3, -1, 2), (0, 3, 2, -1)]:
        with pytest.raises(ValueError):
            hypergeom_sf(*bad)


def _slow_together_scipy(shift: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """``slow_together_p`` as it was with ``scipy.stats.hypergeom``."""
    r = shift.size
    n = np.bincount(group, minlength=n_groups)
    o = np.lexsort((shift, group))
    start = np.searchsorted(group[o], np.arange(n_groups))
    srt = np.sort(shift)
    p = np.ones(n_groups)
    for j_back in (0, 1):
        has = n > j_back
        k = r - np.searchsorted(srt, shift[o[start[has] + j_back]], side="left")
        pj = hypergeom.sf(n[has] - j_back - 1, r, k, n[has])
        p[has] = np.minimum(p[has], np.where(n[has] >= 2, 2.0 * pj, pj))
    return np.minimum(p, 1.0)


@pytest.mark.parametrize("seed", range(6))
def test_slow_together_p_matches_the_scipy_formula(seed: int) -> None:
    """Scopes of 4..1,024 ranks in groups of 1..32 (some empty), ties, one slow group."""
    rng = np.random.default_rng(seed)
    r = int(rng.choice([4, 37, 256, 1024]))
    g = int(rng.integers(1, max(2, r // 2)))
    group = rng.integers(0, g, r)
    shift = np.round(rng.normal(0, 1, r), int(rng.integers(0, 3)))  # ties when rounded
    shift[group == 0] += float(rng.choice([0.0, 3.0]))
    got = l3.slow_together_p(shift, group, g + 1)  # group g: empty
    want = _slow_together_scipy(shift, group, g + 1)
    assert got[-1] == 1.0
    assert np.all((got == want) | (np.abs(got - want) <= REL * np.abs(want)))


def test_l3_does_not_import_scipy_stats() -> None:
    code = (
        "import sys; from argus.detectors import l3; "
        "l3.slow_together_p([5.0, 6.0, 0.0, 1.0], [0, 0, 1, 1], 2); "
        "assert 'scipy.stats' not in sys.modules, 'scipy.stats imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
