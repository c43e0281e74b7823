"""L3: degraded kernels by comparing reconstructed distributions (paper §6.2).

The core works on a **quantile matrix** ``Q`` of shape ``(R, M)``: row ``r`` is rank ``r``'s
quantile function (reconstructed from its (count, p50, p99) clusters by
``argus.summaries.lognormal``) at ``M`` probability levels shared by all rows. In 1-D the
Wasserstein-1 distance is the L1 distance between quantile functions,

.. math:: W_1(F_a, F_b) = \\int_0^1 |Q_a(p) - Q_b(p)|\\,dp \\approx \\sum_m w_m |Q_a(p_m) - Q_b(p_m)|,

so every rank is scored against the group's **reference**, the pointwise median quantile
function ``Q_ref(p) = median_r Q_r(p)``, in ``O(R * M)``:
``score_r = W1(Q_r, Q_ref)``. The paper scores each rank by its mean W1 to all others
(``O(R^2 M)``); the median reference gives the same ordering for a single outlier population
and scales to thousands of ranks. The full pairwise matrix is still computed for groups up
to ``pairwise_max`` ranks (for display, as in the paper's figures).

Outliers: a rank is named when its score is beyond chance among the ``n`` (rank, kernel)
tests of its comparison (:func:`exceedance_p`: an exponential upper tail fitted to the
scores above the median, ``p <= rank_alpha / n``, Bonferroni), past the IQR fence
``Q3 + alpha * (Q3 - Q1)``, and past two effect-size gates (``min_rel_w1`` of the reference
mean, ``min_median_ratio`` times the median score).

:func:`compare_groups` compares **groups with each other** (paper case 2: one EDP group's
collectives degrade together, so no rank stands out inside its own group). A group is named
when it is *slower* than the others (fail-slow: its reference's mean is above the reference of
all groups by at least ``min_rel_w1`` of it) and when that is not chance among the ``G``
groups compared: every rank of the scope is ranked by its mean slowdown against that
reference, and the exact probability that the group's ranks would be that slow together if
the ranks were dealt to groups at random (:func:`slow_together_p`: all members among the
slowest, or all but one) must be at most ``group_alpha / G`` (Bonferroni over the groups).
It holds whatever the duration distributions (modes, JIT spikes), so a comparison of many
small groups no longer names the few whose median picked up a shared tail spike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import comb

import numpy as np
import numpy.typing as npt

from argus.detectors.config import L3Config
from argus.errors import DetectorInputError

__all__ = [
    "GroupComparison",
    "RankScores",
    "compare_groups",
    "exceedance_p",
    "hypergeom_sf",
    "iqr_fence",
    "pairwise_w1",
    "score_ranks",
    "screen_groups",
    "screen_ranks",
    "slow_together_p",
    "w1_to",
]


def _validate_q(q: npt.ArrayLike) -> np.ndarray:
    a = np.asarray(q, dtype=np.float64)
    if a.ndim != 2:
        raise DetectorInputError(f"quantile matrix must be (ranks, probs), got shape {a.shape}")
    if a.shape[1] == 0:
        raise DetectorInputError("quantile matrix has no probability levels (M = 0)")
    return a


def _weights(m: int, weights: npt.ArrayLike | None) -> np.ndarray:
    if weights is None:
        return np.full(m, 1.0 / m)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (m,) or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise DetectorInputError(
            f"weights must be (M,) = ({m},), finite, >= 0 and not all 0; got shape {w.shape}"
        )
    return w / w.sum()


def w1_to(q: npt.ArrayLike, ref: npt.ArrayLike, weights: npt.ArrayLike | None = None) -> np.ndarray:
    """W1 of every row of ``q`` (R, M) to the quantile function ``ref`` (M,), in Q's unit."""
    a = _validate_q(q)
    r = np.asarray(ref, dtype=np.float64)
    if r.shape != (a.shape[1],):
        raise DetectorInputError(f"reference has shape {r.shape}, expected ({a.shape[1]},)")
    w = _weights(a.shape[1], weights)
    return np.abs(a - r) @ w


def pairwise_w1(q: npt.ArrayLike, weights: npt.ArrayLike | None = None) -> np.ndarray:
    """Full (R, R) W1 matrix between the rows of ``q`` (R, M); ``O(R^2 M)`` time and memory."""
    a = _validate_q(q)
    w = _weights(a.shape[1], weights)
    return np.abs(a[:, None, :] - a[None, :, :]) @ w


def iqr_fence(scores: npt.ArrayLike, alpha: float = 1.5) -> tuple[float, float, float]:
    """``(Q1, Q3, Q3 + alpha * (Q3 - Q1))`` of the finite scores (NaN fence when none)."""
    s = np.asarray(scores, dtype=np.float64)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return np.nan, np.nan, np.nan
    q1, q3 = np.percentile(s, [25.0, 75.0])
    return float(q1), float(q3), float(q3 + alpha * (q3 - q1))


def exceedance_p(scores: npt.ArrayLike) -> np.ndarray:
    """Per rank, the chance of a score this far above the median among healthy ranks.

    Parameters
    ----------
    scores : (R,) array of float
        W1 of each rank to the reference, ns; NaN entries are left out (p = 1).

    Returns
    -------
    (R,) float64
        ``p_r = 1/2 * (1 - e_r / E) ** m`` for a rank of the upper half ``H`` (``s >= median``),
        1.0 below the median; ``e_r = s_r - median`` (ns), ``E`` the sum of the excesses of
        ``H`` (ns), ``m = |H| - 1``. With ``E = 0`` (no spread) ``H`` gets 1/2.

    Notes
    -----
    The excesses over the median are modelled as exponential with an unknown mean (a tail no
    lighter than a half-normal's, the usual healthy W1 spread, is covered); the ``1/2`` is the
    chance of lying above the median. ``e_r / mean(e_j, j in H, j != r)`` is then
    ``F(2, 2m)``-distributed, whose tail ``(1 + e_r / (E - e_r)) ** -m`` is the formula: the
    p-value depends only on the share ``f = e_r / E`` of the upper half's total excess the
    rank holds, and accounts for the mean excess being estimated from ``m`` other ranks
    (small groups need larger shares). ``p <= a`` when ``f >= 1 - (2 a) ** (1 / m)``.

    Examples
    --------
    >>> exceedance_p([0.0, 1.0, 2.0, 3.0, 10.0]).round(5).tolist()
    [1.0, 1.0, 0.5, 0.39506, 0.00617]
    """
    s = np.asarray(scores, dtype=np.float64)
    p = np.ones(s.shape)
    ok = np.isfinite(s)
    if not ok.any():
        return p
    u = float(np.median(s[ok]))
    upper = ok.copy()
    upper[ok] = s[ok] >= u
    e = s[upper] - u
    total = float(e.sum())
    m = int(upper.sum()) - 1
    p[upper] = 0.5 * np.clip(1.0 - e / total, 0.0, 1.0) ** m if total > 0 else 0.5
    return p


def _tail_gate(scores: npt.ArrayLike, level: float) -> float:
    """The score (ns) at which the highest rank's :func:`exceedance_p` reaches ``level``.

    ``u + (E - e_max) * (1 - c) / c`` with ``c = (2 level) ** (1 / m)``: the others' excess
    fixed; inf when no score can reach it (fewer than 2 ranks in the upper half).
    """
    s = np.asarray(scores, dtype=np.float64)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return np.inf
    u = float(np.median(s))
    e = s[s >= u] - u
    rest = float(e.sum() - e.max())  # the excess of the others, for the highest rank
    m = e.size - 1
    if level >= 0.5:
        return u
    if m < 1:
        return np.inf
    c = (2.0 * level) ** (1.0 / m)
    return u + rest * (1.0 - c) / c


@dataclass(frozen=True)
class RankScores:
    """L3 within one group for one (kernel, stream) window.

    Attributes
    ----------
    scores : (R,) float64
        W1 of each rank to the reference, Q's unit (ns); NaN for rows with NaN.
    reference : (M,) float64
        Median quantile function of the valid rows.
    q1, q3, fence : float
        IQR statistics of the valid scores.
    median_score : float
    scale : float
        Mean of the reference (its mean duration), Q's unit: the ``min_rel_w1`` yardstick.
    flagged : (R,) bool
        Ranks past the chance test, the fence and both effect-size gates.
    pairwise : (R, R) float64 or None
        Full W1 matrix when R <= ``pairwise_max``.
    n_valid : int
    rel_gate, med_gate : float
        ``min_rel_w1 * |scale|`` and ``min_median_ratio * median_score``, ns.
    p_values : (R,) float64
        :func:`exceedance_p` of the scores (1.0 for NaN rows).
    n_tests : int
        The number of (rank, kernel) tests the chance test was calibrated for.
    tail_gate : float
        The score at which ``p_values`` reaches ``rank_alpha / n_tests``, ns (inf: never).
    """

    scores: np.ndarray
    reference: np.ndarray
    q1: float
    q3: float
    fence: float
    median_score: float
    scale: float
    flagged: np.ndarray
    pairwise: np.ndarray | None
    n_valid: int

    @property
    def threshold(self) -> float:
        """The effective score threshold: the largest of the fence and the three gates, ns."""
        return float(np.nanmax([self.fence, self.rel_gate, self.med_gate, self.tail_gate]))

    rel_gate: float = 0.0
    med_gate: float = 0.0
    p_values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    n_tests: int = 0
    tail_gate: float = 0.0


def score_ranks(
    q: npt.ArrayLike,
    cfg: L3Config | None = None,
    *,
    weights: npt.ArrayLike | None = None,
    pairwise: bool | None = None,
    n_tests: int | None = None,
) -> RankScores:
    """Score each rank's quantile function against the group reference.

    Parameters
    ----------
    q : (R, M) array of float
        Quantile functions, one row per rank, ns. Rows with any NaN (a rank without this
        kernel in the window) are left out of the reference and get NaN scores.
    cfg : L3Config
    weights : (M,) array, optional
        Quadrature weights of the probability levels (default: uniform, right for
        mid-point grids ``(m + 0.5) / M``).
    pairwise : bool, optional
        Force (True) or skip (False) the full matrix; default: when R <= ``pairwise_max``.
    n_tests : int, optional
        The (rank, kernel) tests of the family this comparison belongs to (e.g. the valid
        ranks summed over every kernel of the scope group in the window); default: the valid
        ranks of ``q``. A rank is named only when ``exceedance_p <= rank_alpha / n_tests``.

    Returns
    -------
    RankScores

    Notes
    -----
    Flagged: ``p_r <= rank_alpha / n_tests`` where ``R >= rank_test_min_ranks``
    (:func:`exceedance_p`, Bonferroni over the
    family: with no outlier a family names some rank with probability about ``rank_alpha``
    when the upper half of the scores has an exponential or lighter tail), ``score > fence``,
    ``score >= min_rel_w1 * |mean(Q_ref)|`` and ``score >= min_median_ratio * median``.

    Examples
    --------
    >>> import numpy as np
    >>> p = (np.arange(16) + 0.5) / 16
    >>> q = np.tile(np.exp(p), (8, 1)) * 1e6   # 8 identical ranks
    >>> q[5] *= 3.0                           # one rank three times slower
    >>> res = score_ranks(q)
    >>> np.flatnonzero(res.flagged).tolist()
    [5]
    """
    cfg = cfg or L3Config()
    a = _validate_q(q)
    r, m = a.shape
    valid = np.isfinite(a).all(axis=1)
    n = int(valid.sum())
    scores = np.full(r, np.nan)
    flagged = np.zeros(r, dtype=bool)
    n_tests = max(int(n_tests if n_tests is not None else n), 1)
    if n == 0:
        return RankScores(
            scores,
            np.full(m, np.nan),
            np.nan,
            np.nan,
            np.nan,
            np.nan,
            np.nan,
            flagged,
            None,
            0,
            p_values=np.ones(r),
            n_tests=n_tests,
            tail_gate=np.inf,
        )
    ref = np.median(a[valid], axis=0)
    w = _weights(m, weights)
    scores[valid] = np.abs(a[valid] - ref) @ w
    q1, q3, fence = iqr_fence(scores[valid], cfg.iqr_alpha)
    med = float(np.median(scores[valid]))
    scale = float(ref @ w)
    rel_gate = cfg.min_rel_w1 * abs(scale)
    med_gate = cfg.min_median_ratio * med
    level = cfg.rank_alpha / n_tests
    p_values = exceedance_p(scores)
    chance = n >= cfg.rank_test_min_ranks  # the chance test has power here (L3Config)
    tail_gate = _tail_gate(scores, level) if chance else 0.0
    if n >= cfg.min_ranks:
        with np.errstate(invalid="ignore"):
            flagged = (
                valid
                & ((p_values <= level) | (not chance))
                & (scores > fence)
                & (scores >= rel_gate)
                & (scores >= med_gate)
            )
    pw = None
    if pairwise or (pairwise is None and r <= cfg.pairwise_max):
        pw = np.full((r, r), np.nan)
        idx = np.flatnonzero(valid)
        pw[np.ix_(idx, idx)] = pairwise_w1(a[valid], w)
    return RankScores(
        scores,
        ref,
        q1,
        q3,
        fence,
        med,
        scale,
        flagged,
        pw,
        n,
        rel_gate,
        med_gate,
        p_values=p_values,
        n_tests=n_tests,
        tail_gate=tail_gate,
    )


# A stacked screen computes the same statistics as the per-cell functions with other
# summation orders (rounding ~1e-16 relative); it lets a cell through when it is within this
# relative margin of naming anything, so it never drops a cell the per-cell path would flag.
_SCREEN_TOL = 1e-9


def _sorted_median(x: np.ndarray, axis: int) -> np.ndarray:
    """Median along ``axis`` by a sort (many short slices: several times faster than
    ``np.median``'s partitions); equal to it up to the rounding of the middle pair's mean.
    Up to 4 values (``x`` finite): the middle ones by ``minimum``/``maximum``, the same
    values as the sort's without its per-slice cost."""
    n = x.shape[axis]
    if 1 <= n <= 4:
        v = [np.take(x, i, axis=axis) for i in range(n)]
        if n == 1:
            return v[0]
        if n == 2:
            return 0.5 * (v[0] + v[1])
        lo, hi = np.minimum(v[0], v[1]), np.maximum(v[0], v[1])
        if n == 3:
            return np.maximum(lo, np.minimum(hi, v[2]))
        lo2, hi2 = np.minimum(v[2], v[3]), np.maximum(v[2], v[3])
        return 0.5 * (np.maximum(lo, lo2) + np.minimum(hi, hi2))
    s = np.sort(x, axis=axis)
    hi = np.take(s, n // 2, axis=axis)
    if n % 2:
        return hi
    out: np.ndarray = 0.5 * (np.take(s, n // 2 - 1, axis=axis) + hi)
    return out


def screen_ranks(
    q: np.ndarray, min_rel_w1: np.ndarray, level: np.ndarray, cfg: L3Config | None = None
) -> np.ndarray:
    """Which of C same-size groups :func:`score_ranks` may name a rank in, in one stacked pass.

    Parameters
    ----------
    q : (C, R, M) float
        Quantile functions of the C groups' ranks at uniform-weight levels, ns; all finite.
    min_rel_w1 : (C,) float
        Each group's ``min_rel_w1`` (the collective kernels' is ``min_rel_w1_comm``).
    level : (C,) float
        Each group's per-test level ``rank_alpha / n_tests``.
    cfg : L3Config

    Returns
    -------
    (C,) bool
        False only where ``score_ranks(q[c], ...)`` flags no rank, with a margin of
        ``_SCREEN_TOL`` of the scores on every comparison (reference, W1, IQR fence,
        effect-size gates and the :func:`exceedance_p` test, the latter bounded over the
        ranks whose membership of the upper half the rounding could change); True: judge
        the group with :func:`score_ranks`.
    """
    cfg = cfg or L3Config()
    c, r, _ = q.shape
    if c == 0 or r < cfg.min_ranks:
        return np.zeros(c, dtype=bool)
    ref = _sorted_median(q, axis=1)
    s = np.abs(q - ref[:, None, :]).mean(axis=2)  # (C, R) W1 to the reference, ns
    scale = np.abs(ref.mean(axis=1))
    tol = _SCREEN_TOL * (s.max(axis=1) + scale)[:, None]
    q1, q3 = np.percentile(s, [25.0, 75.0], axis=1)
    fence = (q3 + cfg.iqr_alpha * (q3 - q1))[:, None]
    med = np.median(s, axis=1)[:, None]
    may = (
        (s > fence - (2.0 + 2.0 * cfg.iqr_alpha) * tol)
        & (s >= (min_rel_w1 * scale)[:, None] - tol)
        & (s >= cfg.min_median_ratio * med - tol)
    )
    if r >= cfg.rank_test_min_ranks:
        # exceedance_p's p = 1/2 (1 - e / E) ** m over the upper half, bounded from below
        d = 3.0 * tol
        maybe_upper = s >= med - d
        sure_upper = s >= med + d
        m_hi = maybe_upper.sum(axis=1, keepdims=True) - 1
        e_lo = np.where(sure_upper, s - med - d, 0.0).sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            f_hi = np.where(e_lo > 0, np.clip((s - med + d) / e_lo, 0.0, 1.0), 1.0)
        p_lo = 0.5 * (1.0 - f_hi) ** m_hi
        may &= maybe_upper & (p_lo <= level[:, None] * (1.0 + _SCREEN_TOL)) | (
            level[:, None] >= 0.5
        )
    out: np.ndarray = may.any(axis=1)
    return out


def screen_groups(q: np.ndarray, min_rel_w1: np.ndarray) -> np.ndarray:
    """Which of C comparisons of equal groups :func:`compare_groups` may flag a group in.

    Parameters
    ----------
    q : (C, G, n, M) float
        Quantile functions of C comparisons of G groups of n ranks each, uniform-weight
        levels, ns; all finite.
    min_rel_w1 : (C,) float

    Returns
    -------
    (C,) bool
        False only where no group's slowdown reaches the effect-size gate (its candidates,
        ``shifts >= min_rel_w1 * |mean(reference)|``, with a margin of ``_SCREEN_TOL``), so
        ``compare_groups`` flags none; True: compare the groups with :func:`compare_groups`.
    """
    if q.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    refs = _sorted_median(q, axis=2)  # (C, G, M)
    ref = _sorted_median(refs, axis=1)  # (C, M)
    shifts = (refs - ref[:, None, :]).mean(axis=2)  # (C, G), ns
    scale = np.abs(ref.mean(axis=1))
    tol = _SCREEN_TOL * (np.abs(refs - ref[:, None, :]).mean(axis=2).max(axis=1) + scale)
    out: np.ndarray = (shifts >= (min_rel_w1 * scale - tol)[:, None]).any(axis=1)
    return out


@dataclass(frozen=True)
class GroupComparison:
    """Groups compared with each other for one (kernel, stream) window.

    Attributes
    ----------
    labels : tuple
        Group labels, length G (sorted).
    sizes : (G,) int64
        Valid ranks per group.
    references : (G, M) float64
        Each group's median quantile function, ns.
    reference : (M,) float64
        Median of the group references.
    scores : (G,) float64
        W1 of each group reference to ``reference``, ns.
    within : (G,) float64
        Median W1 of the group's ranks to their own group reference (intra-group spread), ns.
    block : (G, G) float64
        W1 between group references (the block structure of the paper's figure); empty
        (0, 0) when G > ``pairwise_max``.
    flagged : (G,) bool
    threshold : float
        The effect-size gate ``min_rel_w1 * mean(reference)``, ns.
    shifts : (G,) float64
        ``mean(references[g]) - mean(reference)``: the group's slowdown, ns (> 0: slower).
    p_values : (G,) float64
        Chance that the group's ranks are this slow together by luck, each rank ranked by
        its mean slowdown against ``reference`` (see :func:`slow_together_p`); 1.0 where not
        computed (no group slower by the effect-size gate, or fewer than ``min_groups``).
    """

    labels: tuple[object, ...]
    sizes: np.ndarray
    references: np.ndarray
    reference: np.ndarray
    scores: np.ndarray
    within: np.ndarray
    block: np.ndarray
    flagged: np.ndarray
    threshold: float
    shifts: np.ndarray
    p_values: np.ndarray


def hypergeom_sf(x: int, total: int, good: int, draws: int) -> float:
    """``P(X > x)`` for ``X`` the number of ``good`` items among ``draws`` drawn without
    replacement from ``total`` (``scipy.stats.hypergeom.sf(x, total, good, draws)``).

    Exact: the tail's terms ``C(good, i) C(total - good, draws - i)`` summed as integers (or
    the shorter lower tail subtracted from ``C(total, draws)``), then one correctly rounded
    division by ``C(total, draws)``; 0.0 when ``x`` is at or past the support's top, 1.0 below
    its bottom.

    Raises
    ------
    ValueError
        Unless ``0 <= good <= total`` and ``0 <= draws <= total``.

    Examples
    --------
    >>> hypergeom_sf(1, 6, 2, 2), hypergeom_sf(0, 6, 2, 2), hypergeom_sf(-1, 6, 2, 2)
    (0.06666666666666667, 0.6, 1.0)
    """
    if not (0 <= good <= total and 0 <= draws <= total):
        raise ValueError(
            f"hypergeom_sf: need 0 <= good, draws <= total; got {good}, {draws}, {total}"
        )
    bottom, top = max(0, draws - (total - good)), min(good, draws)
    lo = max(x + 1, bottom)
    if lo > top:
        return 0.0
    if lo == bottom:
        return 1.0
    bad = total - good
    if top - lo < lo - bottom:
        num = sum(comb(good, i) * comb(bad, draws - i) for i in range(lo, top + 1))
    else:
        num = comb(total, draws) - sum(
            comb(good, i) * comb(bad, draws - i) for i in range(bottom, lo)
        )
    return num / comb(total, draws)


def slow_together_p(shift: npt.ArrayLike, group: npt.ArrayLike, n_groups: int) -> np.ndarray:
    """Per group, the chance that its ranks are this slow together by luck of the draw.

    Parameters
    ----------
    shift : (R,) float
        Each rank's slowdown against the scope reference, ns (larger: slower).
    group : (R,) int
        Group index (0..G-1) of each rank.
    n_groups : int
        G.

    Returns
    -------
    (G,) float64
        ``min(1, 2 * min(p_n, p_{n-1}))`` for a group of ``n >= 2`` ranks, where ``p_j`` is
        the probability that at least ``j`` of ``n`` ranks drawn at random without
        replacement from the ``R`` rank among the ``k_j`` slowest, ``k_j`` being the number
        of ranks at least as slow as the group's ``j``-th slowest member (hypergeometric
        tail; ``p_n = C(k_n, n) / C(R, n)``). ``j = n``: all members are slow (a slow link
        or node); ``j = n - 1``: all but one (the late rank its peers wait for in a
        collective); the factor 2 is Bonferroni over the two. ``k_1 / R`` for a group of one
        rank, 1.0 for an empty group. Exact for exchangeable ranks (no group effect),
        whatever the distribution of ``shift``.

    Examples
    --------
    >>> slow_together_p([5.0, 6.0, 0.0, 1.0, 0.5, 0.2], [0, 0, 1, 1, 2, 2], 3).round(3).tolist()
    [0.133, 1.0, 1.0]
    """
    s = np.asarray(shift, dtype=np.float64)
    gi = np.asarray(group, dtype=np.int64)
    r = s.size
    n = np.bincount(gi, minlength=n_groups)
    o = np.lexsort((s, gi))  # by group, fastest first
    start = np.searchsorted(gi[o], np.arange(n_groups))
    srt = np.sort(s)
    p = np.ones(n_groups)
    for j_back in (0, 1):  # the fastest member (j = n), the second fastest (j = n - 1)
        has = n > j_back
        at = s[o[start[has] + j_back]]
        k = r - np.searchsorted(srt, at, side="left")  # ranks at least that slow
        j = n[has] - j_back
        pj = np.array(
            [
                hypergeom_sf(a - 1, r, b, c)
                for a, b, c in zip(j.tolist(), k.tolist(), n[has].tolist(), strict=True)
            ],
            dtype=np.float64,
        )
        p[has] = np.minimum(p[has], np.where(n[has] >= 2, 2.0 * pj, pj))
    return np.minimum(p, 1.0)


def compare_groups(
    q: npt.ArrayLike,
    labels: Sequence[object] | npt.ArrayLike,
    cfg: L3Config | None = None,
    *,
    weights: npt.ArrayLike | None = None,
) -> GroupComparison:
    """Compare groups of ranks with each other (paper case 2).

    Parameters
    ----------
    q : (R, M) array of float
        Quantile functions, ns; rows with NaN are ignored.
    labels : (R,) sequence
        Group label of each row (e.g. the EDP group id).
    cfg : L3Config
    weights : (M,) array, optional

    Returns
    -------
    GroupComparison
        ``flagged`` is all False with fewer than ``cfg.min_groups`` groups.

    Notes
    -----
    A group is flagged when it is slower, ``shift >= min_rel_w1 * mean(reference)``, and
    ``p_value <= group_alpha / G``: ranking every rank by ``mean(Q_r - reference)`` (ns),
    its members are among the scope's slowest (all of them, or all but one) beyond what a
    random deal of the ranks to the G groups gives. With no group effect a comparison then
    flags some group with probability at most ``group_alpha``, whatever the number of
    groups or the shape of the duration distributions.
    """
    cfg = cfg or L3Config()
    a = _validate_q(q)
    lab = np.asarray(labels, dtype=object)
    if lab.shape != (a.shape[0],):
        raise DetectorInputError(f"labels has shape {lab.shape}, expected ({a.shape[0]},)")
    w = _weights(a.shape[1], weights)
    valid = np.isfinite(a).all(axis=1)
    uniq = sorted({x for x, ok in zip(lab.tolist(), valid.tolist(), strict=True) if ok}, key=str)
    g = len(uniq)
    m = a.shape[1]
    refs = np.full((g, m), np.nan)
    sizes = np.zeros(g, dtype=np.int64)
    within = np.full(g, np.nan)
    index = {u: i for i, u in enumerate(uniq)}
    gi = np.array(
        [index.get(x, -1) if ok else -1 for x, ok in zip(lab.tolist(), valid.tolist(), strict=True)]
    )
    order = np.argsort(gi, kind="stable")
    order = order[gi[order] >= 0]
    bounds = np.searchsorted(gi[order], np.arange(g + 1))
    counts = np.diff(bounds)
    if g and (counts == counts[0]).all():  # equal groups (the usual layout): one call each
        rows3 = a[order].reshape(g, int(counts[0]), m)
        sizes[:] = counts
        refs = np.median(rows3, axis=1)
        if counts[0] > 1:
            within = np.median(np.abs(rows3 - refs[:, None, :]) @ w, axis=1)
    else:
        for i in range(g):
            rows = a[order[bounds[i] : bounds[i + 1]]]
            sizes[i] = rows.shape[0]
            refs[i] = np.median(rows, axis=0)
            within[i] = (
                float(np.median(np.abs(rows - refs[i]) @ w)) if rows.shape[0] > 1 else np.nan
            )
    if g == 0:
        empty = np.zeros(0)
        return GroupComparison(
            (),
            sizes,
            refs,
            np.full(m, np.nan),
            empty,
            empty,
            np.zeros((0, 0)),
            np.zeros(0, bool),
            np.nan,
            empty,
            empty,
        )
    ref = np.median(refs, axis=0)
    scores = np.abs(refs - ref) @ w
    shifts = (refs - ref) @ w
    block = (
        np.abs(refs[:, None, :] - refs[None, :, :]) @ w
        if g <= cfg.pairwise_max
        else np.zeros((0, 0))
    )
    scale = float(ref @ w)
    thr = cfg.min_rel_w1 * abs(scale)
    flagged = np.zeros(g, dtype=bool)
    p_values = np.ones(g)
    candidates = shifts >= thr
    if g >= cfg.min_groups and candidates.any():
        rows = a[order]
        p_values = slow_together_p((rows - ref) @ w, gi[order], g)
        flagged = candidates & (p_values <= cfg.group_alpha / g)
    return GroupComparison(
        tuple(uniq), sizes, refs, ref, scores, within, block, flagged, float(thr), shifts, p_values
    )
