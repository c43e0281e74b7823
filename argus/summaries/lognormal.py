"""Reconstruction of duration distributions from cluster summaries, and Wasserstein-1.

Each cluster of a :class:`~argus.summaries.kde.Summary` becomes one mixture component,
weighted by its count. A component is described by its quantile knots
``(z_j, y_j) = (Φ⁻¹(level_j), ln q_j)`` and its log-quantile function is the piecewise-linear
interpolation of those knots in the normal-score ``z``, extended linearly beyond the end
knots with the end segments' slopes:

* with the paper's levels (0.5, 0.99) this is exactly the log-normal through p50 and p99,
  ``μ = ln p50``, ``σ = (ln p99 − ln p50) / Φ⁻¹(0.99)`` (paper §6.2, notes §6);
* with more levels it is a log-normal whose σ may change between knots (it reproduces every
  stored quantile exactly, and stays a log-normal wherever the data are log-normal);
* p50 = p99 (one distinct value) gives a point mass.

W1 between mixtures ``W1(F, G) = ∫ |F(x) − G(x)| dx = ∫₀¹ |F⁻¹(p) − G⁻¹(p)| dp`` (ns).

* :func:`w1` / :func:`w1_samples` integrate ``|F − G|`` in ``u = ln x`` on breakpoints put
  where each component's CDF moves (65 per component, evenly in z) plus all knots and
  samples, with 3-point Gauss-Legendre per interval: accurate to ~1e-6 relative, every jump
  of a point mass or an empirical CDF falls on a breakpoint.
* :func:`quantile_matrix` is the vectorized form for scoring many ranks: ``Q_r(p_j)`` for all
  ranks on one probability grid, O(R·M); then ``W1(r, ref) ≈ mean_j |Q_r(p_j) − Q_ref(p_j)|``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy.special import ndtr, ndtri

from argus.summaries.kde import Summary

__all__ = [
    "default_probs",
    "empirical_quantile_matrix",
    "log_quantiles",
    "lognormal_params",
    "lognormal_w1",
    "logq_rows",
    "mixture_cdf",
    "mixture_quantile",
    "mixture_quantile_cells",
    "mixture_quantile_rows",
    "pairwise_w1",
    "quantile_matrix",
    "w1",
    "w1_matrix_to_reference",
    "w1_samples",
]

_Z_SPAN = 8.5  # |z| beyond which a component's mass (1e-17) is ignored
_NODES_PER_COMPONENT = 65
_MAX_DU = 0.05  # longest integration interval in ln(ns)
_GL_X = np.array([-np.sqrt(0.6), 0.0, np.sqrt(0.6)])
_GL_W = np.array([5.0, 8.0, 5.0]) / 9.0


# -- components -----------------------------------------------------------------------------


def _knots(s: Summary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z (L,), y (K, L) = ln quantiles, weights (K,)) of a summary's components."""
    z = ndtri(s.quantile_levels)
    y = np.log(np.maximum(s.quantiles_ns, np.finfo(np.float64).tiny))
    y = np.maximum.accumulate(y, axis=1)  # float32 wire rounding must not break monotonicity
    w = s.counts / max(s.n, 1)
    return z, y, w


def _seg(z: np.ndarray, zz: np.ndarray) -> np.ndarray:
    return np.clip(np.searchsorted(z, zz) - 1, 0, z.size - 2)


def logq_rows(z: np.ndarray, y: np.ndarray, zz: np.ndarray) -> np.ndarray:
    """(K, M) ln Q (ln ns) of K components at normal scores ``zz`` (K, M).

    ``z`` (L,) are the normal scores of the quantile levels (increasing) and ``y`` (K, L) the
    components' ln-quantiles there; ln Q is piecewise linear in the normal score between the
    knots and extended linearly beyond the ends.
    """
    if z.size == 1:
        return np.repeat(y[:, :1], zz.shape[1], axis=1)
    seg = _seg(z, zz)
    y0 = np.take_along_axis(y, seg, axis=1)
    y1 = np.take_along_axis(y, seg + 1, axis=1)
    out: np.ndarray = y0 + (y1 - y0) / (z[seg + 1] - z[seg]) * (zz - z[seg])
    return out


def _logq_of(z: np.ndarray, flat_q: np.ndarray, comp: np.ndarray, zz: np.ndarray) -> np.ndarray:
    """(N,) ln Q of components ``comp`` (N,) of the (K, L) ln-quantiles ``flat_q`` (raveled)
    at normal scores ``zz`` (N,): :func:`logq_rows`' arithmetic, point by point, without a
    (N, L) copy."""
    n_l = z.size
    if n_l == 1:
        out0: np.ndarray = flat_q[comp]
        return out0
    seg = _seg(z, zz)
    at = comp * n_l + seg
    y0, y1 = flat_q[at], flat_q[at + 1]
    out: np.ndarray = y0 + (y1 - y0) / (z[seg + 1] - z[seg]) * (zz - z[seg])
    return out


def _component_cdf(z: np.ndarray, yk: np.ndarray, u: np.ndarray) -> np.ndarray:
    """CDF of one component at ``u = ln x`` (inverse of the piecewise-linear map)."""
    if z.size == 1 or yk[-1] <= yk[0]:
        return (u >= yk[0]).astype(np.float64)
    out = np.empty_like(u)
    lo_slope = (yk[1] - yk[0]) / (z[1] - z[0])
    hi_slope = (yk[-1] - yk[-2]) / (z[-1] - z[-2])
    below, above = u < yk[0], u > yk[-1]
    mid = ~(below | above)
    out[mid] = ndtr(np.interp(u[mid], yk, z))
    out[below] = ndtr(z[0] + (u[below] - yk[0]) / lo_slope) if lo_slope > 0 else 0.0
    out[above] = ndtr(z[-1] + (u[above] - yk[-1]) / hi_slope) if hi_slope > 0 else 1.0
    return out


def mixture_cdf(summary: Summary, x_ns: npt.ArrayLike) -> np.ndarray:
    """CDF of the reconstructed mixture at durations ``x_ns`` (ns); same shape as ``x_ns``."""
    x = np.asarray(x_ns, dtype=np.float64)
    u = np.log(np.maximum(x, np.finfo(np.float64).tiny)).reshape(-1)
    z, y, w = _knots(summary)
    out = np.zeros(u.size)
    for k in range(w.size):
        out += w[k] * _component_cdf(z, y[k], u)
    out[(x <= 0).reshape(-1)] = 0.0
    return out.reshape(x.shape)


def mixture_quantile(summary: Summary, p: npt.ArrayLike, *, tol: float = 1e-12) -> np.ndarray:
    """Quantile function of the reconstructed mixture at probabilities ``p`` in (0, 1), ns.

    Inverts :func:`mixture_cdf` by bisection in ``ln x`` (exact to ``tol`` relative); for
    many ranks on one grid use :func:`quantile_matrix`.
    """
    pp = np.asarray(p, dtype=np.float64)
    z, y, _ = _knots(summary)
    if summary.n == 0:
        return np.full(pp.shape, np.nan)
    ends = logq_rows(z, y, np.tile([-_Z_SPAN - 1.0, _Z_SPAN + 1.0], (y.shape[0], 1)))
    lo = np.full(pp.shape, float(ends[:, 0].min()))
    hi = np.full(pp.shape, float(ends[:, 1].max()))
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        f = mixture_cdf(summary, np.exp(mid))
        go_up = f < pp
        lo = np.where(go_up, mid, lo)
        hi = np.where(go_up, hi, mid)
        if float(np.max(hi - lo, initial=0.0)) < tol:
            break
    out: np.ndarray = np.exp(0.5 * (lo + hi))
    return out


def lognormal_params(summary: Summary) -> tuple[np.ndarray, np.ndarray]:
    """(μ (K,), σ (K,)) of each cluster's log-normal through p50 and p99 (paper §6.2)."""
    mu = np.log(summary.p50_ns)
    sigma = (np.log(summary.p99_ns) - mu) / ndtri(0.99)
    return mu, sigma


# -- W1 -------------------------------------------------------------------------------------


def _breakpoints(summary: Summary) -> np.ndarray:
    z, y, _ = _knots(summary)
    if y.shape[0] == 0:
        return np.zeros(0)
    zz = np.linspace(-_Z_SPAN, _Z_SPAN, _NODES_PER_COMPONENT)
    nodes = logq_rows(z, y, np.tile(zz, (y.shape[0], 1)))
    return np.concatenate((nodes.reshape(-1), y.reshape(-1)))


def _integrate_abs_diff(breaks: np.ndarray, cdf_a: object, cdf_b: object) -> float:
    """∫ |A(e^u) − B(e^u)| e^u du over the sorted unique ``breaks`` (3-point GL per interval)."""
    b = np.unique(breaks[np.isfinite(breaks)])
    if b.size < 2:
        return 0.0
    # no interval longer than _MAX_DU: e^u varies too much over a long one for 3 GL points
    long = np.flatnonzero(np.diff(b) > _MAX_DU)
    if long.size:
        extra = [
            np.linspace(b[i], b[i + 1], int(np.ceil((b[i + 1] - b[i]) / _MAX_DU)) + 1)[1:-1]
            for i in long
        ]
        b = np.unique(np.concatenate([b, *extra]))
    # |A − B| has a kink where A and B cross: add each crossing (secant root) as a breakpoint.
    # Signs are taken just inside each interval, so a jump at an end (a point mass, a sample)
    # neither hides a crossing nor fakes one.
    for _ in range(3):
        lo, hi = b[:-1], b[1:]
        eps = 1e-9 * (hi - lo)
        ul, uh = lo + eps, hi - eps
        dl = cdf_a(ul) - cdf_b(ul)  # type: ignore[operator]
        dh = cdf_a(uh) - cdf_b(uh)  # type: ignore[operator]
        flip = np.flatnonzero(dl * dh < 0)
        if flip.size == 0:
            break
        t = dl[flip] / (dl[flip] - dh[flip])
        b = np.unique(np.concatenate((b, ul[flip] + t * (uh[flip] - ul[flip]))))
    half = 0.5 * np.diff(b)
    mid = 0.5 * (b[1:] + b[:-1])
    u = (mid[:, None] + half[:, None] * _GL_X[None, :]).reshape(-1)
    fa = cdf_a(u)  # type: ignore[operator]
    fb = cdf_b(u)  # type: ignore[operator]
    vals = (np.abs(fa - fb) * np.exp(u)).reshape(-1, 3)
    return float(np.sum(half * (vals @ _GL_W)))


def w1(a: Summary, b: Summary) -> float:
    """Wasserstein-1 distance between two reconstructed mixtures, ns.

    Parameters
    ----------
    a, b : Summary
        Summaries of the same group on two ranks (any quantile levels each).

    Returns
    -------
    float
        ``∫ |F_a(x) − F_b(x)| dx`` in ns; NaN when either summary is empty.

    Notes
    -----
    Integrated in ``u = ln x`` on breakpoints where either mixture's CDF moves (see module
    doc); relative error ~1e-6 against adaptive quadrature.

    Examples
    --------
    >>> import numpy as np
    >>> a = Summary(np.array([0.5, 0.99]), np.array([10]), np.array([[100.0, 100.0]]))
    >>> b = Summary(np.array([0.5, 0.99]), np.array([10]), np.array([[150.0, 150.0]]))
    >>> round(w1(a, b), 6)
    50.0
    """
    if a.n == 0 or b.n == 0:
        return float("nan")
    za, ya, wa = _knots(a)
    zb, yb, wb = _knots(b)
    breaks = np.concatenate((_breakpoints(a), _breakpoints(b)))

    def fa(u: np.ndarray) -> np.ndarray:
        return sum((wa[k] * _component_cdf(za, ya[k], u) for k in range(wa.size)), np.zeros(u.size))

    def fb(u: np.ndarray) -> np.ndarray:
        return sum((wb[k] * _component_cdf(zb, yb[k], u) for k in range(wb.size)), np.zeros(u.size))

    return _integrate_abs_diff(breaks, fa, fb)


def w1_samples(summary: Summary, samples_ns: npt.ArrayLike) -> float:
    """W1 between a reconstructed mixture and the empirical distribution of raw samples, ns.

    Invalid samples (≤ 0, NaN, inf) are ignored, as :func:`~argus.summaries.kde.summarize`
    rejects them. NaN when either side is empty.
    """
    s = np.asarray(samples_ns, dtype=np.float64).reshape(-1)
    s = np.sort(s[(s > 0) & (s < np.inf)])
    if s.size == 0 or summary.n == 0:
        return float("nan")
    z, y, w = _knots(summary)
    us = np.log(s)
    breaks = np.concatenate((_breakpoints(summary), us))

    def fa(u: np.ndarray) -> np.ndarray:
        return sum((w[k] * _component_cdf(z, y[k], u) for k in range(w.size)), np.zeros(u.size))

    def fe(u: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.searchsorted(us, u, side="right") / us.size
        return out

    return _integrate_abs_diff(breaks, fa, fe)


def lognormal_w1(mu_a: float, sigma_a: float, mu_b: float, sigma_b: float) -> float:
    """Closed-form W1 between two log-normals LN(μ, σ²) (σ ≥ 0), in the unit of e^μ.

    ``∫₀¹ |e^{μa+σa z(p)} − e^{μb+σb z(p)}| dp`` with the sign change at
    ``z* = (μb − μa)/(σa − σb)`` and partial means ``E[X; Z < t] = e^{μ+σ²/2} Φ(t − σ)``.
    """
    ma = np.exp(mu_a + 0.5 * sigma_a**2)
    mb = np.exp(mu_b + 0.5 * sigma_b**2)
    if np.isclose(sigma_a, sigma_b, rtol=0, atol=1e-15):
        return float(abs(ma - mb))
    t = (mu_b - mu_a) / (sigma_a - sigma_b)
    # below t one variable is larger, above t the other: split the integral at t
    lo_a, lo_b = ma * ndtr(t - sigma_a), mb * ndtr(t - sigma_b)
    hi_a, hi_b = ma - lo_a, mb - lo_b
    return float(abs(lo_a - lo_b) + abs(hi_a - hi_b))


# -- vectorized form --------------------------------------------------------------------------


def default_probs(m: int = 256) -> np.ndarray:
    """Midpoint probability grid ``(j + 0.5) / m``, j = 0..m−1: (m,) float64.

    Notes
    -----
    ``mean_j |Q_a(p_j) − Q_b(p_j)|`` is then the midpoint rule for ``∫₀¹ |Q_a − Q_b| dp``,
    i.e. W1. The grid never touches p = 0 or 1, where a log-normal quantile is 0 or ∞: the
    extreme cells stand for their whole 1/m of mass at the ``1/(2m)`` and ``1 − 1/(2m)``
    quantiles. That clips heavy upper tails at the 99.8th percentile for m = 256 (a bias
    every rank shares, so rank comparisons are unaffected), and keeps a reconstructed tail
    with a large extrapolated σ from dominating the distance. Raise m to resolve rarer
    events: a cluster holding a fraction w of the mass is seen by ~w·m grid points.
    """
    if m < 1:
        raise ValueError(f"need at least one probability, got m={m}")
    return (np.arange(m, dtype=np.float64) + 0.5) / m


def quantile_matrix(summaries: Sequence[Summary], probs: npt.ArrayLike) -> np.ndarray:
    """Each summary's reconstructed quantile function on a shared probability grid.

    Parameters
    ----------
    summaries : sequence of R Summary
        One per rank (same group and window). Quantile levels may differ between them.
    probs : (M,) array_like, increasing, in (0, 1)
        Probability grid, e.g. :func:`default_probs`.

    Returns
    -------
    (R, M) float64, ns
        ``Q_r(p_j)``; a row of NaN for an empty summary.

    Notes
    -----
    The mixture is the law of ``Q_k(V)`` with cluster k chosen with weight ``w_k`` and V
    uniform, so stacking each cluster's quantile function over its slice of [0, 1) and
    sorting the values gives the mixture's quantile function at the grid points (exact when
    clusters do not overlap, a stratified sample of it when they do). Cost O(R·M) plus a row
    sort; no loop over ranks except one per distinct set of quantile levels.
    """
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    if p.size == 0 or np.any((p <= 0) | (p >= 1)):
        raise ValueError("probs must be a non-empty grid inside (0, 1)")
    out = np.full((len(summaries), p.size), np.nan)
    by_levels: dict[tuple[float, ...], list[int]] = {}
    for r, s in enumerate(summaries):
        if s.n > 0:
            by_levels.setdefault(tuple(s.quantile_levels.tolist()), []).append(r)
    for levels, rows in by_levels.items():
        out[rows] = _quantile_rows([summaries[r] for r in rows], np.asarray(levels), p)
    return out


def _quantile_rows(summaries: list[Summary], levels: np.ndarray, p: np.ndarray) -> np.ndarray:
    counts = np.concatenate([s.counts for s in summaries]).astype(np.float64)
    q = np.concatenate([s.quantiles_ns for s in summaries])
    k_per = np.array([s.counts.size for s in summaries])
    row_of = np.repeat(np.arange(len(summaries)), k_per)
    return mixture_quantile_rows(row_of, counts, log_quantiles(q), levels, p, len(summaries))


def log_quantiles(quantiles_ns: np.ndarray) -> np.ndarray:
    """(K, L) ln of cluster quantiles (ns), made non-decreasing along each row.

    float32 wire rounding must not break a component's monotonicity; zeros are clamped to
    the smallest positive float.
    """
    y = np.log(np.maximum(np.asarray(quantiles_ns, np.float64), np.finfo(np.float64).tiny))
    return nondecreasing_rows(y)


def nondecreasing_rows(y: np.ndarray) -> np.ndarray:
    """(K, L) ``y`` made non-decreasing along each row, in place, and returned: a running
    maximum column by column (``np.maximum.accumulate(y, axis=1)``'s values, NaN spreading
    along its row alike, in a third of its time on (K, 7) rows)."""
    for i in range(1, y.shape[1]):
        np.maximum(y[:, i], y[:, i - 1], out=y[:, i])
    return y


def mixture_quantile_rows(
    row_of: np.ndarray,
    counts: np.ndarray,
    log_q: np.ndarray,
    levels: np.ndarray,
    probs: np.ndarray,
    n_rows: int,
) -> np.ndarray:
    """Quantile functions of many mixtures given as flat component columns (the columnar core).

    Parameters
    ----------
    row_of : (K,) int, non-decreasing
        Mixture (row) of each component; every row in ``0..n_rows-1`` must own >= 1 component.
    counts : (K,) float
        Events per component (the mixture weights, normalised per row).
    log_q : (K, L) float
        ln of each component's quantiles at ``levels`` (see :func:`log_quantiles`), ln(ns).
    levels : (L,) float, increasing, in (0, 1)
    probs : (M,) float, increasing, in (0, 1)
    n_rows : int

    Returns
    -------
    (n_rows, M) float64, ns
    """
    if n_rows == 0:
        return np.empty((0, np.asarray(probs).size))
    # one cell of all the rows: the stacked core's arithmetic, bit for bit
    cells = np.array([n_rows], dtype=np.int64)
    return mixture_quantile_cells(row_of, counts, log_q, levels, probs, cells)


def mixture_quantile_cells(
    row_of: np.ndarray,
    counts: np.ndarray,
    log_q: np.ndarray,
    levels: np.ndarray,
    probs: np.ndarray,
    cell_rows: np.ndarray,
    *,
    max_points: int = 1 << 16,
) -> np.ndarray:
    """:func:`mixture_quantile_rows` of many cells in a few stacked passes, bit for bit.

    A cell is a set of consecutive rows (e.g. the ranks of one (scope, kernel) pair); each
    cell's rows come out exactly as its own :func:`mixture_quantile_rows` call with its rows
    numbered from 0 (the per-cell running sum, row numbering and component search are kept:
    a running sum or row index across cells would round differently and can move a grid
    point across a component boundary). The elementwise work (normal scores, interpolation,
    row sorts) runs over passes of whole cells of about ``max_points`` grid points.

    Parameters
    ----------
    row_of : (K,) int, non-decreasing
        Row of each component, ``0..N-1``; every row owns >= 1 component.
    counts : (K,) float
        Events per component.
    log_q : (K, L) float
        ln of each component's quantiles at ``levels``, ln(ns).
    levels : (L,) float, increasing, in (0, 1)
    probs : (M,) float, increasing, in (0, 1)
    cell_rows : (C,) int, >= 1
        Rows of each cell, in order; ``N = sum(cell_rows)``.
    max_points : int
        Grid points (rows x M) per pass, about (memory: ~100 bytes each).

    Returns
    -------
    (N, M) float64, ns
    """
    z = ndtri(np.asarray(levels, dtype=np.float64))
    p = np.asarray(probs, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    row_of = np.asarray(row_of, dtype=np.int64)
    cell_rows = np.asarray(cell_rows, dtype=np.int64)
    n_rows = int(cell_rows.sum())
    out = np.empty((n_rows, p.size))
    if n_rows == 0:
        return out
    k_per = np.bincount(row_of, minlength=n_rows)
    totals = np.bincount(row_of, weights=counts, minlength=n_rows)
    w = counts / totals[row_of]
    row_cell = np.repeat(np.arange(cell_rows.size), cell_rows)
    row0 = np.cumsum(cell_rows) - cell_rows
    local_row = np.arange(n_rows) - row0[row_cell]
    comp_cell = row_cell[row_of]
    c_bounds = np.r_[0, np.cumsum(np.bincount(comp_cell, minlength=cell_rows.size))]
    # the running sum restarts at each cell, as in one call per cell
    cw = np.concatenate([np.cumsum(w[s:e]) for s, e in itertools.pairwise(c_bounds.tolist())])
    first = np.cumsum(k_per) - k_per
    start_in_row = cw - w - np.repeat(cw[first] - w[first], k_per)
    keys = local_row[row_of] + start_in_row
    cell_end = np.cumsum(cell_rows)
    flat_q = np.ascontiguousarray(log_q, dtype=np.float64).reshape(-1)
    per = max(1, max_points // max(p.size, 1))  # rows per pass
    c0 = 0
    while c0 < cell_rows.size:  # passes of whole cells, a cell bigger than a pass alone
        c1 = max(c0, int(np.searchsorted(cell_end, row0[c0] + per, side="right")) - 1)
        r0, r1 = int(row0[c0]), int(cell_end[c1])
        qq = (local_row[r0:r1, None] + p[None, :]).reshape(-1)
        # the component of each grid point, searched in its own cell's keys (as one call)
        comp = np.empty(qq.size, dtype=np.int64)
        for c in range(c0, c1 + 1):
            a, b = (int(row0[c]) - r0) * p.size, (int(cell_end[c]) - r0) * p.size
            lo, hi = int(c_bounds[c]), int(c_bounds[c + 1])
            comp[a:b] = lo + np.searchsorted(keys[lo:hi], qq[a:b], side="right") - 1
        local = (qq - keys[comp]) / w[comp]
        local = np.clip(local, 1e-15, 1.0 - 1e-15)
        vals = _logq_of(z, flat_q, comp, ndtri(local)).reshape(r1 - r0, p.size)
        vals.sort(axis=1)
        out[r0:r1] = np.exp(vals)
        c0 = c1 + 1
    return out


def empirical_quantile_matrix(samples: Sequence[npt.ArrayLike], probs: npt.ArrayLike) -> np.ndarray:
    """(R, M) quantile functions of raw samples (inverse empirical CDF), ns.

    ``Q(p) = x_(⌈n·p⌉)`` (the left-continuous inverse). Invalid samples are ignored; a row of
    NaN for a rank without valid samples.
    """
    p = np.asarray(probs, dtype=np.float64).reshape(-1)
    out = np.full((len(samples), p.size), np.nan)
    for r, s in enumerate(samples):
        a = np.asarray(s, dtype=np.float64).reshape(-1)
        a = np.sort(a[(a > 0) & (a < np.inf)])
        if a.size:
            idx = np.clip(np.ceil(p * a.size).astype(np.int64) - 1, 0, a.size - 1)
            out[r] = a[idx]
    return out


def w1_matrix_to_reference(qm: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """(R,) W1 of each row of a quantile matrix (R, M) to a reference row (M,), ns."""
    out: np.ndarray = np.mean(np.abs(qm - ref[None, :]), axis=1)
    return out


def pairwise_w1(
    qm: np.ndarray, *, weights: np.ndarray | None = None, chunk: int = 4096
) -> np.ndarray:
    """(R, R) pairwise W1 between the rows of a quantile matrix (R, M), ns.

    ``weights`` (M,) are the probability masses of the grid cells (uniform by default).
    Only the R(R−1)/2 pairs above the diagonal are computed, ``chunk`` pairs at a time, so
    memory stays O(chunk·M).
    """
    r_, m_ = qm.shape
    wt = np.full(m_, 1.0 / m_) if weights is None else np.asarray(weights, dtype=np.float64)
    iu, ju = np.triu_indices(r_, 1)
    vals = np.empty(iu.size)
    for a in range(0, iu.size, chunk):
        d = qm[iu[a : a + chunk]] - qm[ju[a : a + chunk]]
        np.abs(d, out=d)
        vals[a : a + chunk] = d @ wt
    out = np.zeros((r_, r_))
    out[iu, ju] = vals
    out[ju, iu] = vals
    out[np.isnan(qm).any(axis=1)] = np.nan  # NaN rows stay NaN (also on the diagonal)
    out[:, np.isnan(qm).any(axis=1)] = np.nan
    return out
