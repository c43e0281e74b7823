"""argus.summaries.lognormal: reconstruction, W1 accuracy and metric properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import ndtri
from scipy.stats import wasserstein_distance

from argus.summaries import lognormal as ln
from argus.summaries.kde import ROBUST, Summary, summarize

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
L2 = np.array([0.5, 0.99])
Z99 = float(ndtri(0.99))


def one(mu: float, sigma: float, n: int = 10) -> Summary:
    return Summary(L2, np.array([n]), np.array([[np.exp(mu), np.exp(mu + sigma * Z99)]]))


def dense_w1(a: Summary, b_cdf, knots: list[float]) -> float:
    """Dense reference: midpoint rule for ∫ |F_a - G| dx in u = ln x on ~2M points, with the
    knots (jumps of G, the summaries' quantiles) as grid points."""
    k = np.asarray(knots)
    u = np.unique(np.r_[k, np.linspace(k.min() - 12, k.max() + 12, 2_000_001)])
    mid = 0.5 * (u[1:] + u[:-1])
    x = np.exp(mid)
    return float(np.sum(np.abs(ln.mixture_cdf(a, x) - b_cdf(x)) * x * np.diff(u)))


@FAST
@given(
    mu_a=st.floats(0.0, 15.0),
    mu_b=st.floats(0.0, 15.0),
    s_a=st.floats(0.0, 1.5),
    s_b=st.floats(0.0, 1.5),
)
def test_w1_of_single_lognormals_matches_closed_form(
    mu_a: float, mu_b: float, s_a: float, s_b: float
) -> None:
    a, b = one(mu_a, s_a), one(mu_b, s_b)
    exact = ln.lognormal_w1(mu_a, s_a, mu_b, s_b)
    assert ln.w1(a, b) == pytest.approx(exact, rel=1e-5, abs=1e-9 * np.exp(max(mu_a, mu_b)))


def test_closed_form_against_quadrature() -> None:
    # the closed form itself, checked once against a dense quantile integral
    p = (np.arange(2_000_000) + 0.5) / 2_000_000
    qa = np.exp(5.0 + 0.3 * ndtri(p))
    qb = np.exp(5.1 + 0.6 * ndtri(p))
    assert ln.lognormal_w1(5.0, 0.3, 5.1, 0.6) == pytest.approx(np.mean(np.abs(qa - qb)), rel=1e-4)


def test_paper_reconstruction_is_the_lognormal_through_p50_p99() -> None:
    s = one(7.0, 0.4)
    mu, sigma = ln.lognormal_params(s)
    assert mu[0] == pytest.approx(7.0) and sigma[0] == pytest.approx(0.4)
    x = np.exp(np.array([6.0, 7.0, 7.5]))
    from scipy.stats import lognorm

    np.testing.assert_allclose(
        ln.mixture_cdf(s, x), lognorm.cdf(x, 0.4, scale=np.exp(7.0)), rtol=1e-12
    )


mixtures = st.lists(
    st.tuples(st.integers(1, 100), st.floats(3.0, 14.0), st.floats(0.0, 0.8), st.floats(0.0, 0.5)),
    min_size=1,
    max_size=4,
)


def _mix(rows: list[tuple[int, float, float, float]], levels: np.ndarray) -> Summary:
    z = ndtri(levels)
    q = [
        np.exp(mu + s_hi * np.maximum(z, 0) + s_lo * np.minimum(z, 0)) for _, mu, s_hi, s_lo in rows
    ]
    return Summary(levels, np.array([r[0] for r in rows]), np.array(q))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=mixtures, b=mixtures)
def test_w1_between_mixtures_matches_dense_reference(a: list, b: list) -> None:
    sa = _mix(a, L2)
    sb = _mix(b, np.array([0.1, 0.5, 0.9, 0.99]))
    knots = np.log(np.r_[sa.quantiles_ns.ravel(), sb.quantiles_ns.ravel()]).tolist()
    ref = dense_w1(sa, lambda x: ln.mixture_cdf(sb, x), knots)
    assert ln.w1(sa, sb) == pytest.approx(ref, rel=1e-3, abs=1e-9)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 400), seed=st.integers(0, 2**31), cfg=st.sampled_from([None, ROBUST]))
def test_w1_summary_vs_raw_samples_matches_dense_reference(n: int, seed: int, cfg) -> None:
    rng = np.random.default_rng(seed)
    x = np.r_[rng.lognormal(8, 0.2, n), rng.lognormal(10, 0.1, max(n // 3, 1))]
    s = summarize(x) if cfg is None else summarize(x, config=cfg)
    xs = np.sort(x)
    knots = np.log(np.r_[xs, s.quantiles_ns.ravel()]).tolist()
    ref = dense_w1(s, lambda v: np.searchsorted(xs, v, side="right") / xs.size, knots)
    assert ln.w1_samples(s, x) == pytest.approx(ref, rel=1e-3, abs=1e-9)


@FAST
@given(seed=st.integers(0, 2**31), n=st.integers(1, 300))
def test_w1_is_a_metric_on_summaries_of_samples(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    a, b, c = (
        summarize(rng.lognormal(rng.uniform(5, 9), rng.uniform(0.01, 0.5), n)) for _ in range(3)
    )
    assert ln.w1(a, a) == 0.0
    ab, ba = ln.w1(a, b), ln.w1(b, a)
    assert ab == pytest.approx(ba, rel=1e-12) and ab >= 0
    ac, bc = ln.w1(a, c), ln.w1(b, c)
    assert ac <= ab + bc + 1e-6 * (ab + bc + 1)


def test_w1_of_point_masses_is_their_distance() -> None:
    a = Summary(L2, np.array([3]), np.array([[100.0, 100.0]]))
    b = Summary(L2, np.array([1, 1]), np.array([[100.0, 100.0], [300.0, 300.0]]))
    assert ln.w1(a, b) == pytest.approx(100.0, rel=1e-9)  # half the mass moves by 200
    assert ln.w1_samples(a, [100, 100]) == 0.0


def test_w1_samples_against_scipy_on_point_mass_summary() -> None:
    s = Summary(L2, np.array([2, 2]), np.array([[10.0, 10.0], [20.0, 20.0]]))
    x = np.array([9.0, 12.0, 19.0, 25.0])
    assert ln.w1_samples(s, x) == pytest.approx(wasserstein_distance(x, [10, 10, 20, 20]), rel=1e-9)


def test_empty_inputs_give_nan() -> None:
    e = Summary(L2, np.zeros(0), np.zeros((0, 2)))
    assert np.isnan(ln.w1(e, one(5, 0.1)))
    assert np.isnan(ln.w1_samples(one(5, 0.1), [np.nan, -1]))
    qm = ln.quantile_matrix([e, one(5, 0.1)], ln.default_probs(8))
    assert np.isnan(qm[0]).all() and np.isfinite(qm[1]).all()


def test_quantile_matrix_matches_mixture_quantile_and_w1() -> None:
    a = Summary(L2, np.array([30, 10, 1]), np.array([[1e3, 1.2e3], [5e3, 5.5e3], [4e4, 4e4]]))
    b = Summary(
        np.array([0.1, 0.5, 0.9, 0.99]),
        np.array([25, 20]),
        np.array([[900, 1e3, 1.1e3, 1.3e3], [4e3, 5e3, 6e3, 9e3]]),
    )
    p = ln.default_probs(4096)
    qm = ln.quantile_matrix([a, b, a], p)
    assert qm.shape == (3, 4096)
    assert np.all(np.diff(qm, axis=1) >= 0)
    np.testing.assert_array_equal(qm[0], qm[2])
    np.testing.assert_allclose(qm[1], ln.mixture_quantile(b, p), rtol=2e-2)
    w = ln.w1_matrix_to_reference(qm, qm[1])
    assert w[1] == 0.0 and w[0] == pytest.approx(ln.w1(a, b), rel=1e-2)
    pw = ln.pairwise_w1(qm, chunk=2)
    assert pw.shape == (3, 3) and np.allclose(pw, pw.T) and pw[0, 1] == pytest.approx(w[0])


def test_mixture_quantile_inverts_the_cdf() -> None:
    s = summarize(
        np.r_[
            np.random.default_rng(1).lognormal(6, 0.2, 200),
            np.random.default_rng(2).lognormal(9, 0.3, 100),
        ]
    )
    p = np.array([0.01, 0.2, 0.5, 0.66, 0.9, 0.999])
    np.testing.assert_allclose(ln.mixture_cdf(s, ln.mixture_quantile(s, p)), p, atol=1e-9)
    assert ln.mixture_cdf(s, np.array([0.0, -1.0])).tolist() == [0.0, 0.0]


def test_float32_wire_rounding_keeps_quantiles_monotone() -> None:
    q = np.array([[1000.0001, 1000.0002, 1000.00005]], dtype=np.float32).astype(np.float64)
    s = Summary(np.array([0.1, 0.5, 0.99]), np.array([5]), q)
    row = ln.quantile_matrix([s], ln.default_probs(64))[0]
    assert np.all(np.diff(row) >= 0)


def test_default_probs() -> None:
    p = ln.default_probs(4)
    assert p.tolist() == [0.125, 0.375, 0.625, 0.875]
    with pytest.raises(ValueError):
        ln.default_probs(0)
    with pytest.raises(ValueError):
        ln.quantile_matrix([one(1, 1)], np.array([0.0, 0.5]))
