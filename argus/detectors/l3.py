"""L3: degraded kernels by comparing reconstructed distributions (paper §6.2).

The core works on a **quantile matrix** ``Q`` of shape ``(R, M)``: row ``r`` is rank ``r``'s
quantile function (reconstructed from its (count, p50, p99) clusters by
``argus.streams.lognormal``) at ``M`` probability levels shared by all rows. In 1-D the
Wasserstein-1 distance is the L1 distance between quantile functions,

.. math:: W_1(F_a, F_b) = \\int_0^1 |Q_a(p) - Q_b(p)|\\,dp \\approx \\sum_m w_m |Q_a(p_m) - Q_b(p_m)|,

so every rank is scored against the group's **reference**, the pointwise median quantile
function ``Q_ref(p) = median_r Q_r(p)``, in ``O(R * M)``:
``score_r = W1(Q_r, Q_ref)``. The paper scores each rank by its mean W1 to all others
(``O(R^2 M)``); the median reference gives the same ordering for a single outlier population
and scales to thousands of ranks. The full pairwise matrix is still computed for groups up
to ``pairwise_max`` ranks (for display, as in the paper's figures).

Outliers: ``score > Q3 + alpha * (Q3 - Q1)`` (IQR fence over the ranks' scores) and two
effect-size gates (``min_rel_w1`` of the reference mean, ``min_median_ratio`` times the
median score) that keep a healthy population of thousands from yielding its 0.7 % Tukey
outliers.

:func:`compare_groups` compares **groups with each other** (paper case 2: one EDP group's
collectives degrade together, so no rank stands out inside its own group): each group's
reference is scored against the median of the group references, and named when it is far
from the others relative to the spread *inside* groups (the block structure of the W1
matrix).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from argus.detectors.config import L3Config
from argus.detectors.errors import DetectorInputError

__all__ = [
    "GroupComparison",
    "RankScores",
    "compare_groups",
    "iqr_fence",
    "pairwise_w1",
    "score_ranks",
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
        Ranks past the fence and both effect-size gates.
    pairwise : (R, R) float64 or None
        Full W1 matrix when R <= ``pairwise_max``.
    n_valid : int
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
        """The effective score threshold: the largest of the fence and both gates."""
        return float(np.nanmax([self.fence, self.rel_gate, self.med_gate]))

    rel_gate: float = 0.0
    med_gate: float = 0.0


def score_ranks(
    q: npt.ArrayLike,
    cfg: L3Config | None = None,
    *,
    weights: npt.ArrayLike | None = None,
    pairwise: bool | None = None,
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

    Returns
    -------
    RankScores

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
    if n == 0:
        return RankScores(
            scores, np.full(m, np.nan), np.nan, np.nan, np.nan, np.nan, np.nan, flagged, None, 0
        )
    ref = np.median(a[valid], axis=0)
    w = _weights(m, weights)
    scores[valid] = np.abs(a[valid] - ref) @ w
    q1, q3, fence = iqr_fence(scores[valid], cfg.iqr_alpha)
    med = float(np.median(scores[valid]))
    scale = float(ref @ w)
    rel_gate = cfg.min_rel_w1 * abs(scale)
    med_gate = cfg.min_median_ratio * med
    if n >= cfg.min_ranks:
        with np.errstate(invalid="ignore"):
            flagged = valid & (scores > fence) & (scores >= rel_gate) & (scores >= med_gate)
    pw = None
    if pairwise or (pairwise is None and r <= cfg.pairwise_max):
        pw = np.full((r, r), np.nan)
        idx = np.flatnonzero(valid)
        pw[np.ix_(idx, idx)] = pairwise_w1(a[valid], w)
    return RankScores(scores, ref, q1, q3, fence, med, scale, flagged, pw, n, rel_gate, med_gate)


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
        Effective score threshold, ns.
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


def compare_groups(
    q: npt.ArrayLike,
    labels: Sequence[object] | npt.ArrayLike,
    cfg: L3Config | None = None,
    *,
    weights: npt.ArrayLike | None = None,
    block_ratio: float = 3.0,
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
    block_ratio : float
        A group is named only when its distance to the others is at least this many times
        the typical spread inside groups (median of ``within``). 3.0 (ours).

    Returns
    -------
    GroupComparison
        ``flagged`` is all False with fewer than ``cfg.min_groups`` groups.

    Notes
    -----
    A group is flagged when ``score >= min_rel_w1 * mean(reference)``,
    ``score >= min_median_ratio * median(scores)``, ``score >= block_ratio * median(within)``,
    and, with at least 8 groups, ``score`` is past the IQR fence of the group scores (with
    fewer groups quartiles are too coarse to fence on).
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
        )
    ref = np.median(refs, axis=0)
    scores = np.abs(refs - ref) @ w
    block = (
        np.abs(refs[:, None, :] - refs[None, :, :]) @ w
        if g <= cfg.pairwise_max
        else np.zeros((0, 0))
    )
    flagged = np.zeros(g, dtype=bool)
    scale = float(ref @ w)
    intra = float(np.nanmedian(within)) if np.isfinite(within).any() else 0.0
    thr = max(
        cfg.min_rel_w1 * abs(scale),
        cfg.min_median_ratio * float(np.median(scores)),
        block_ratio * intra,
    )
    if g >= cfg.min_groups:
        flagged = scores >= thr
        if g >= 8:
            _, _, fence = iqr_fence(scores, cfg.iqr_alpha)
            flagged &= scores > fence
            thr = max(thr, fence)
    return GroupComparison(
        tuple(uniq), sizes, refs, ref, scores, within, block, flagged, float(thr)
    )
