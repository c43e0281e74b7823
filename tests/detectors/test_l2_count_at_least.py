"""``l2_batch.count_at_least`` against the pairwise count it replaced (the L2 screen's Holm
bound: how many valid ranks of a step score at least a rank's score)."""

from __future__ import annotations

import numpy as np
import pytest

from argus.detectors import l2
from argus.detectors.l2_batch import count_at_least


def _pairwise(k: np.ndarray, valid: np.ndarray) -> np.ndarray:
    ge = (k[:, None] >= k[:, :, None]) & valid[:, None]  # (G, r, q, S, P): q's score >= r's
    return ge.sum(axis=2)


@pytest.mark.parametrize(
    "shape", [(1, 1, 1, 1), (3, 2, 4, 5), (7, 4, 10, 9), (2, 64, 10, 3), (1, 320, 3, 2)]
)
def test_equals_the_pairwise_count(shape: tuple[int, int, int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    lv = l2.SCORE_LEVELS
    for frac_valid in (1.0, 0.7, 0.0):
        # scores bunched (ties) and spread, the range's ends included
        k = rng.integers(-lv, lv + 1, size=shape).astype(float)
        k[rng.random(shape) < 0.3] = float(rng.choice([-lv, 0, lv]))
        valid = rng.random(shape) < frac_valid
        got = count_at_least(k, valid)
        want = _pairwise(k, valid)
        assert got.shape == want.shape
        assert np.array_equal(got[valid], want[valid])
        assert (got[~valid] == shape[1]).all()
