"""L2's medians without numpy's median/take_along_axis overhead give the very same bits."""

from __future__ import annotations

import numpy as np
import pytest

from argus.detectors import l2
from argus.detectors.l2_batch import _medians


def _reference(d: np.ndarray) -> np.ndarray:
    """The sort-based median over axis 0 as it was written first (take_along_axis)."""
    s = np.sort(d, axis=0)
    n = np.isfinite(s).sum(axis=0)
    lo = np.take_along_axis(s, np.maximum((n - 1) // 2, 0)[None], axis=0)[0]
    hi = np.take_along_axis(s, np.minimum(np.maximum(n // 2, 0), d.shape[0] - 1)[None], axis=0)[0]
    return np.asarray(np.where(n > 0, 0.5 * (lo + hi), np.nan), dtype=np.float64)


@pytest.mark.parametrize("seed", range(4))
def test_medians_are_bit_for_bit_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for shape in [(1,), (2,), (5,), (4, 3), (7, 4, 2), (16, 4, 1), (3, 2, 4, 5)]:
        for nan_share in (0.0, 0.3, 1.0):
            d = rng.lognormal(15.0, 1.0, size=shape)
            d[rng.random(shape) < nan_share] = np.nan
            d[rng.random(shape) < 0.2] = 1e6  # ties
            assert np.array_equal(l2._medians_axis0(d), _reference(d), equal_nan=True)
            for axis in range(d.ndim):
                want = _reference(np.moveaxis(d, axis, 0))
                assert np.array_equal(_medians(d, axis), want, equal_nan=True)
            v = d.ravel()[~np.isnan(d.ravel())]
            if v.size:
                assert l2._median(v) == float(np.median(v))
                assert l2._median(np.abs(v - 3e6)) == float(np.median(np.abs(v - 3e6)))
