"""``l3._sorted_median`` of 1-4 values by min/max equals the sort's median bit for bit.

The stacked L3 screens take medians over short axes (groups of 2-4 ranks: the job's EDP and
EP partitions); those skip ``np.sort``'s per-slice cost. Ties, repeated values and every axis
are checked against the sort-based median it replaces.
"""

from __future__ import annotations

import numpy as np
import pytest

from argus.detectors import l3


def _by_sort(x: np.ndarray, axis: int) -> np.ndarray:
    s = np.sort(x, axis=axis)
    n = s.shape[axis]
    hi = np.take(s, n // 2, axis=axis)
    return hi if n % 2 else 0.5 * (np.take(s, n // 2 - 1, axis=axis) + hi)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 16])
@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_equals_the_sort_median(n: int, axis: int) -> None:
    rng = np.random.default_rng(n * 10 + axis)
    shape = [3, 5, 2, 7]
    shape[axis] = n
    for trial in range(30):
        if trial % 3 == 0:  # ties: few distinct values
            x = rng.choice([-1.5, 0.0, 2.0, 6.5e5], size=shape)
        elif trial % 3 == 1:
            x = rng.lognormal(13.0, 1.0, size=shape)
        else:
            x = rng.normal(0.0, 1e6, size=shape)
        got = l3._sorted_median(x, axis)
        want = _by_sort(x, axis)
        assert got.shape == want.shape
        assert got.tobytes() == want.tobytes()
        np.testing.assert_array_equal(got, np.median(x, axis=axis))
