"""argus.summaries.quantile_wire: the float32 and log16 encodings of cluster quantiles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.summaries import quantile_wire as qw

LEVELS = np.array([0.05, 0.2, 0.35, 0.5, 0.7, 0.9, 0.99])


def _quantiles(seed: int, c: int, spread: float) -> np.ndarray:
    """(c, 7) non-decreasing positive quantiles (ns) with medians from 1 ns to 1e11 ns."""
    rng = np.random.default_rng(seed)
    med = np.exp(rng.uniform(0, np.log(1e11), c))
    steps = rng.uniform(0.0, spread, (c, 6))  # at most 3 x 5 = 15 < 16 ln from the median
    up = np.cumsum(steps[:, 3:], axis=1)
    down = -np.cumsum(steps[:, :3], axis=1)[:, ::-1]
    return med[:, None] * np.exp(np.concatenate([down, np.zeros((c, 1)), up], axis=1))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), c=st.integers(0, 300), spread=st.floats(0.0, 5.0))
def test_log16_error_is_within_half_a_step(seed: int, c: int, spread: float) -> None:
    q = _quantiles(seed, c, spread)
    med, off = qw.encode_log16(q, LEVELS)
    assert med.dtype == np.float32 and med.shape == (c,)
    assert off.dtype == np.int16 and off.shape == (c, 6)
    back = qw.decode_log16(med, off, LEVELS)
    assert back.shape == q.shape
    np.testing.assert_array_equal(back[:, 3], med.astype(np.float64))  # the median as sent
    rel = np.abs(back / q - 1.0)
    # half a log step, plus the float32 rounding of the median the offsets are relative to
    assert float(rel.max(initial=0.0)) <= qw.LOG16_MAX_REL_ERROR + 1e-7
    assert np.all(np.diff(back, axis=1) >= 0)  # rounding is monotone: rows stay sorted


def test_log16_error_bound_is_far_below_sampling_noise() -> None:
    assert pytest.approx(np.expm1(1 / 4096)) == qw.LOG16_MAX_REL_ERROR
    assert qw.LOG16_MAX_REL_ERROR < 2.5e-4  # a quantile of 10,000 events is only good to ~1 %


def test_log16_saturates_beyond_its_range_instead_of_wrapping() -> None:
    q = np.array([[1.0, 2.0, 3.0, 1e9, 1e9, 1e9, 1e9 * np.exp(20)]])
    med, off = qw.encode_log16(q, LEVELS)
    assert off[0, 0] == np.iinfo(np.int16).min and off[0, -1] == np.iinfo(np.int16).max
    back = qw.decode_log16(med, off, LEVELS)
    assert back[0, -1] == pytest.approx(1e9 * np.exp(32767 / 2048), rel=1e-6)
    assert np.all(np.diff(back, axis=1) >= 0)


def test_through_wire_and_errors() -> None:
    q = _quantiles(1, 20, 0.3)
    np.testing.assert_array_equal(qw.through_wire(q, LEVELS, "float32"), q.astype(np.float32))
    np.testing.assert_allclose(qw.through_wire(q, LEVELS, "log16"), q, rtol=3e-4)
    with pytest.raises(ValueError, match="unknown quantile encoding"):
        qw.through_wire(q, LEVELS, "float16")
    with pytest.raises(ValueError, match=r"level 0\.5"):
        qw.encode_log16(q[:, [0, 1, 2, 4, 5, 6]], np.delete(LEVELS, 3))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(0, 300), spread=st.floats(0.01, 5.0))
def test_log16_decoded_in_log_space_is_ln_of_the_decoded_quantiles(
    seed: int, c: int, spread: float
) -> None:
    from argus.summaries.lognormal import log_quantiles, nondecreasing_rows

    rng = np.random.default_rng(seed)
    q = np.sort(np.exp(rng.normal(12.0, spread, (c, LEVELS.size))), axis=1)
    q[: c // 10, :] = 0.0  # zero-duration clusters: ln(tiny) throughout
    med, off = qw.encode_log16(q, LEVELS)
    want = log_quantiles(qw.decode_log16(med, off, LEVELS))
    got = nondecreasing_rows(qw.decode_log16_ln(med, off, LEVELS))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.abs(want).max(initial=1.0))
    assert (got[: c // 10] == np.log(np.finfo(np.float64).tiny)).all()


def test_nondecreasing_rows_is_a_running_maximum_along_rows() -> None:
    from argus.summaries.lognormal import nondecreasing_rows

    y = np.random.default_rng(5).normal(size=(50, 7))
    y[3, 2] = np.nan  # NaN spreads along its row, as np.maximum.accumulate
    want = np.maximum.accumulate(y, axis=1)
    np.testing.assert_array_equal(nondecreasing_rows(y.copy()), want)
