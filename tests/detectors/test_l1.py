"""L1: spikes, change points, findings, the bounded history."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus.detectors import l1
from argus.detectors.config import L1Config
from argus.errors import DetectorInputError


def _series(n: int = 400, seed: int = 0, sigma: float = 0.03) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 100e6 * np.exp(rng.normal(0.0, sigma, n))


def test_healthy_series_has_no_findings_over_many_seeds() -> None:
    for seed in range(20):
        # job series: max over 16 ranks, like job_series builds it
        rng = np.random.default_rng(seed)
        x = np.max(100e6 * np.exp(rng.normal(0.0, 0.03, (16, 1000))), axis=0)
        assert l1.detect(np.arange(1000), x, job="j") == [], seed


def test_single_spike_is_jitter_with_baseline_and_excess() -> None:
    x = _series()
    x[200] *= 40
    out = l1.detect(np.arange(400), x, job="j")
    assert [(f.kind, f.window_start_step, f.window_end_step) for f in out] == [("jitter", 200, 200)]
    f = out[0]
    assert f.level == "L1" and f.unit == "ms"
    assert 95 < f.baseline < 105 and f.observed > 3000
    assert f.score == pytest.approx(f.observed / f.baseline, rel=1e-6)
    assert float(f.evidence["excess_ms"]) > 3000


def test_close_spikes_merge_into_one_window() -> None:
    x = _series()
    x[100] *= 5
    x[102] *= 5
    spikes = l1.spikes(x)
    assert [(s.start, s.end, s.n_spikes) for s in spikes] == [(100, 102, 2)]


def test_step_regression_is_a_change_point_not_jitter() -> None:
    x = _series()
    x[250:] *= 3.0
    out = l1.detect(np.arange(400), x, job="j")
    assert [f.kind for f in out] == ["regression"]
    assert out[0].window_start_step == 250 and out[0].window_end_step == 399
    assert out[0].score == pytest.approx(3.0, rel=0.05)


def test_one_sided_gate_reports_regression_onset_as_jitter_too() -> None:
    x = _series()
    x[250:] *= 3.0
    kinds = {f.kind for f in l1.detect(np.arange(400), x, job="j", two_sided=False)}
    assert kinds == {"regression", "jitter"}


def test_gradual_drift_is_a_regression() -> None:
    x = _series(600)
    x[200:400] *= np.linspace(1.0, 1.3, 200)
    x[400:] *= 1.3
    out = [f for f in l1.detect(np.arange(600), x, job="j") if f.kind == "regression"]
    assert out and 200 <= out[0].window_start_step <= 400


def test_small_shift_below_ratio_gate_is_ignored() -> None:
    x = _series(sigma=0.005)
    x[200:] *= 1.05  # significant but below cp_min_ratio 1.10
    assert l1.change_points(x) == []
    assert l1.change_points(x, L1Config(cp_min_ratio=1.03))


def test_nan_steps_are_skipped_and_short_series_are_quiet() -> None:
    x = _series()
    x[::7] = np.nan
    x[300] = 4e9
    out = l1.detect(np.arange(400), x, job="j")
    assert [f.window_start_step for f in out] == [300]
    assert l1.detect(np.arange(5), _series(5), job="j") == []


@pytest.mark.parametrize(
    ("steps", "x", "msg"),
    [
        (np.arange(3), np.ones((3, 2)), "1-D"),
        (np.arange(3), np.array([1.0, -1.0, 2.0]), "non-positive"),
        (np.array([0, 2, 1]), np.ones(3), "increasing"),
        (np.arange(4), np.ones(3), "shape"),
    ],
)
def test_bad_input_raises_typed_error(steps: np.ndarray, x: np.ndarray, msg: str) -> None:
    with pytest.raises(DetectorInputError, match=msg):
        l1.detect(steps, x, job="j")


def test_ids_are_stable_across_calls_on_a_growing_history() -> None:
    x = _series(300)
    x[100] *= 10
    a = l1.detect(np.arange(200), x[:200], job="j")
    b = l1.detect(np.arange(300), x, job="j")
    assert [f.id for f in a] == [f.id for f in b]


def test_history_is_bounded_and_merges_late_ranks() -> None:
    h = l1.L1History(capacity=4)
    for s in range(6):
        h.push(s, 10.0, s * 100, s * 100 + 10)
    h.push(4, 25.0, 390, 430)  # a late rank of step 4: max time, widest span
    steps, it, start, end = h.arrays()
    assert steps.tolist() == [2, 3, 4, 5]
    assert it.tolist() == [10.0, 10.0, 25.0, 10.0]
    assert (start[2], end[2]) == (390, 430)
    h.push(0, 99.0)  # older than the window: ignored
    assert len(h) == 4 and h.arrays()[0].tolist() == [2, 3, 4, 5]


def test_a_window_spans_its_steps_when_step_and_event_order_disagree() -> None:
    """Issue 19: a step +900,000 ahead whose record ended before the later real steps (it
    arrived among them) sorts last; the regression window through it used the start of its
    first step and the end of its last, and ended before it started."""
    sec = 10**9
    steps = np.array([*range(60), 900_039])
    x = np.where(steps < 48, 0.5, 1.0) * sec
    start = np.array([*(s * 2 * sec for s in range(60)), 80 * sec])  # the jump: at step 40's
    end = start + x.astype(np.int64)
    found = l1.detect(steps, x, job="j", start_ns=start, end_ns=end)
    (last,) = [f for f in found if f.window_end_step == 900_039]
    assert last.kind == "regression" and last.window_start_step == 48
    assert (last.window_start_ns, last.window_end_ns) == (80 * sec, int(end[59]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_window_ends_before_it_starts(data: st.DataObject) -> None:
    """Any series, any step gaps (+900,000 included), step spans in any event-time order:
    every finding's window covers the spans of its steps."""
    n = data.draw(st.integers(2, 120))
    gaps = data.draw(st.lists(st.sampled_from([1, 1, 1, 2, 900_000]), min_size=n, max_size=n))
    steps = np.cumsum(gaps)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = 100e6 * np.exp(rng.normal(0, 0.03, n))
    for _ in range(data.draw(st.integers(0, 3))):  # spikes and level shifts
        i = int(rng.integers(n))
        x[i:] *= float(rng.choice([0.5, 3.0]))
        x[int(rng.integers(n))] *= 20
    start = rng.integers(0, 10**12, n)
    end = start + x.astype(np.int64)
    for f in l1.detect(steps, x, job="j", start_ns=start, end_ns=end):
        assert f.window_start_step <= f.window_end_step
        sel = (steps >= f.window_start_step) & (steps <= f.window_end_step)
        assert f.window_start_ns == start[sel].min() and f.window_end_ns == end[sel].max()
