"""L2: straggler ranks and the bottleneck phase, per comparison group (paper §6.1).

A phase of one comparison group's window (ranks x steps) names a rank only when its excess is
both **beyond chance** for that rank and **material** to the job:

* **Chance** (persistence): each step's durations are compared across the group's ranks at
  that step. A rank's per-step score is its log ratio to the step's median, clipped at
  ``log(outlier_ratio)`` and quantised; its window statistic is the sum of its scores. Under
  the null (the ranks are exchangeable within each step: any noise level, any distribution,
  whole-group hiccups and checkpoints included) each step deals the step's scores to the
  ranks at random, so the exact p-value is a tail of the convolution of the steps' score
  distributions (:func:`exceedance_p`). The group's (rank, phase) tests are one family:
  Holm at ``alpha`` over them. One step can give a rank at most a ``1/R`` chance, so a single
  slow step (a kernel outlier, a GC pause) never passes; a rank slow in most steps does.
* **Material**: the rank's excess over the step median, averaged over the window's steps
  without its worst one (ns), must be at least ``min_excess`` of the phase, ``min_abs_ms``
  and ``min_step_share`` of the median iteration time: a phase is judged by what it costs the
  step, so 2 ms in an 8 ms ``data_load`` of an 880 ms step is not a straggler.
* **Bursts**: one step far beyond anything noise makes (``outlier_ratio`` times the step
  median and ``burst_z`` robust sigmas of the phase's log ratios above that, e.g. a 1.5 s
  data-loading stall) names the rank when it is material over the window (its mean excess,
  the burst included), though no within-window test can call one step persistent.

Collectives are read the way they behave (paper case 5): when a rank is late into a
collective, its peers wait inside it, so the late rank's collective looks *shorter*. Hence a
collective (``stream_kind`` ``comm``/``p2p``) names a rank persistently *shorter* (the lower
tail of the same test; the shortfall at least ``min_excess`` of the phase, ``min_abs_ms`` and
``late_step_share`` of the step; and standing out of the group, robust z of the window
medians ``<= -z``: a part of the group late together is waiting propagated to it) with role
``late_arrival``; ranks markedly *longer* are its waiting peers, the **victims**: reported as
evidence, never as culprits.

Small groups and short windows: a rank's p-value is at least ``prod_s 1/R_s`` (it holds the
largest score of every step); where that floor exceeds the Holm level (4 ranks in a 4-step
window), a rank at the floor (the slowest of every step) passes. Groups of two ranks have
no median to speak of: in a compute phase the slower is named when it is slower in every step
and the ratio of the medians reaches ``pair_ratio``, and it is not the one that waited longer
in the window's collectives (:func:`_waited`: it arrived first, its excess cost the step
nothing); collectives of two ranks are not judged (either could have waited). Groups of one are not judged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from argus.detectors.config import L2Config
from argus.detectors.findings import Finding
from argus.errors import DetectorInputError
from argus.routing import COLLECTIVE_STREAM_KINDS

__all__ = [
    "GroupWindow",
    "PhaseStats",
    "detect",
    "exceedance_p",
    "holm",
    "phase_stats",
    "spikes",
    "step_scores",
]

_MAD_TO_SIGMA = 1.4826
MAX_FLOOR = 1.0 / 64.0
"""A rank at its floor (the slowest of every step) passes Holm only where the window can give
``p <= MAX_FLOOR`` at all: 3 ranks x 4 steps (1/81) and 4 x 3 (1/64) can, one step of 16
ranks (1/16) or of a 4-rank pipeline chain (1/4) cannot."""
SCORE_LEVELS = 32
"""Quantisation of the per-step score: ``SCORE_LEVELS`` levels per ``log(outlier_ratio)``
(about 4.4 % of the step median at the default 4x), so a score takes 2 x 32 + 1 values."""


@dataclass(frozen=True)
class GroupWindow:
    """One comparison group's window of steps (L2 input).

    Attributes
    ----------
    job, group_kind, group_id : str
    ranks : (R,) int64 array
        Global ranks, one per row.
    steps : (S,) int64 array
        Step numbers, one per column.
    phases : tuple of str
        Phase names (length P), each routed to this group kind.
    stream_kinds : tuple of str
        ``stream_kind`` of each phase (``compute`` | ``comm`` | ``p2p`` | ``host``).
    durations_ns : (R, S, P) float64 array
        Phase duration per rank, step and phase, ns; NaN where a rank has no record for the
        step or lacks the phase.
    start_ns, end_ns : int
        Event-time span of the window, ns since epoch.
    iter_ns : (R, S) float64 array, optional
        Iteration time of each rank and step, ns (NaN: missing); scales the late-arrival
        gate.
    """

    job: str
    group_kind: str
    group_id: str
    ranks: np.ndarray
    steps: np.ndarray
    phases: tuple[str, ...]
    stream_kinds: tuple[str, ...]
    durations_ns: np.ndarray
    start_ns: int = 0
    end_ns: int = 0
    iter_ns: np.ndarray | None = None

    def __post_init__(self) -> None:
        d = np.asarray(self.durations_ns, dtype=np.float64)
        r, s, p = len(self.ranks), len(self.steps), len(self.phases)
        if d.shape != (r, s, p):
            raise DetectorInputError(
                f"durations_ns has shape {d.shape}, expected (ranks, steps, phases) = ({r}, {s}, {p})"
            )
        if len(self.stream_kinds) != p:
            raise DetectorInputError(f"{len(self.stream_kinds)} stream_kinds for {p} phases")
        if np.any(d[np.isfinite(d)] < 0):
            raise DetectorInputError("durations_ns has negative values")
        object.__setattr__(self, "durations_ns", d)
        if self.iter_ns is not None:
            it = np.asarray(self.iter_ns, dtype=np.float64)
            if it.shape != (r, s):
                raise DetectorInputError(f"iter_ns has shape {it.shape}, expected ({r}, {s})")
            object.__setattr__(self, "iter_ns", it)
        object.__setattr__(self, "ranks", np.asarray(self.ranks, dtype=np.int64))
        object.__setattr__(self, "steps", np.asarray(self.steps, dtype=np.int64))


@dataclass(frozen=True)
class PhaseStats:
    """Statistics of one phase across a group's ranks (ns)."""

    values: np.ndarray  # (R,) per-rank window median, ns; NaN: not judged
    median: float  # ns
    mad: float  # ns, floored
    cv: float
    z: np.ndarray  # (R,) robust z; NaN where values is NaN
    excess: np.ndarray  # (R,) values / median - 1
    n_valid: int


def _row_medians(d: np.ndarray) -> np.ndarray:
    """(R,) median of the finite values of each row of (R, S); NaN for empty rows.

    Sort-based (NaN sort last): much faster than ``np.nanmedian`` on many small rows.
    """
    if d.shape[1] == 0:
        return np.full(d.shape[0], np.nan)
    return _medians_axis0(d.T)


def phase_stats(durations_ns: npt.ArrayLike, cfg: L2Config | None = None) -> PhaseStats:
    """Robust statistics of one phase.

    Parameters
    ----------
    durations_ns : (R, S) or (R,) array of float
        Durations per rank (and step), ns; NaN: missing.
    cfg : L2Config

    Returns
    -------
    PhaseStats
        Ranks with fewer than ``cfg.min_steps`` finite steps get NaN values and z.

    Notes
    -----
    ``MAD`` is floored at ``mad_floor * median`` so that ties (MAD = 0) give a finite z.
    """
    cfg = cfg or L2Config()
    d = np.asarray(durations_ns, dtype=np.float64)
    if d.ndim == 1:
        d = d[:, None]
    if d.ndim != 2:
        raise DetectorInputError(f"durations must be (ranks,) or (ranks, steps), got {d.shape}")
    v = _row_medians(d)
    n_ok = np.isfinite(d).sum(axis=1)
    v[n_ok < cfg.min_steps] = np.nan
    vv = v[np.isfinite(v)]
    if vv.size == 0:
        nan = np.full_like(v, np.nan)
        return PhaseStats(v, np.nan, np.nan, np.nan, nan, nan, 0)
    med = _median(vv)
    mad = _median(np.abs(vv - med))
    mad = max(mad, cfg.mad_floor * abs(med), 1e-9)
    mean = float(vv.mean())
    cv = float(vv.std() / mean) if mean > 0 else 0.0
    z = (v - med) / (_MAD_TO_SIGMA * mad)
    excess = v / med - 1.0 if med > 0 else np.zeros_like(v)
    return PhaseStats(v, med, mad, cv, z, excess, int(vv.size))


def _medians_axis0(d: np.ndarray) -> np.ndarray:
    """Median over axis 0 of the finite values of (R, ...) ``d``; NaN where none."""
    s = np.sort(d, axis=0)
    r = s.shape[0]
    n = np.isfinite(s).sum(axis=0)
    if r and n.size and int(n.min()) == r:  # every value finite: the two middle rows
        return np.asarray(0.5 * (s[(r - 1) // 2] + s[r // 2]), dtype=np.float64)
    lo = _pick_axis0(s, np.maximum((n - 1) // 2, 0))
    hi = _pick_axis0(s, np.minimum(np.maximum(n // 2, 0), r - 1))
    return np.asarray(np.where(n > 0, 0.5 * (lo + hi), np.nan), dtype=np.float64)


def _pick_axis0(s: np.ndarray, i: np.ndarray) -> np.ndarray:
    """``s[i[...], ...]`` of (R, ...) ``s`` and (...) row indices ``i``
    (``np.take_along_axis(s, i[None], axis=0)[0]``, without its index arrays' overhead)."""
    if s.ndim == 1:
        return np.asarray(s[int(i)])
    flat = s.reshape(s.shape[0], -1)
    return np.asarray(flat[i.ravel(), np.arange(flat.shape[1])].reshape(i.shape))


def _median(v: np.ndarray) -> float:
    """``float(np.median(v))`` of a non-empty 1-D array without NaN (the same two middle
    values and the same ``(lo + hi) / 2``), without ``np.median``'s overhead."""
    s = np.sort(v)
    n = s.size
    return float(s[n // 2]) if n % 2 else float((s[n // 2 - 1] + s[n // 2]) / 2)


def _references(d: np.ndarray, pair: np.ndarray) -> np.ndarray:
    """(S, P) per-step reference of (R, S, P) durations: the median of the step's finite
    values, the faster one's in a pair phase (``pair`` (P,) bool)."""
    ref = _medians_axis0(d)
    if pair.any():
        with np.errstate(invalid="ignore"):
            mn = np.fmin.reduce(d[:, :, pair], axis=0)
        ref[:, pair] = np.where(np.isfinite(d[:, :, pair]).any(axis=0), mn, np.nan)
    return ref


def _log_ratios(d: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``log(d / ref)`` with ``ref`` broadcast over ranks; +inf for d > 0 = ref, NaN for NaN d."""
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.log(d) - np.log(ref)
        e = np.where(ref > 0, e, np.where(d > 0, np.inf, 0.0))
    return np.asarray(np.where(np.isfinite(d), e, np.nan), dtype=np.float64)


def _quantise(e: np.ndarray, outlier_ratio: float) -> np.ndarray:
    c = math.log(outlier_ratio)
    k = np.floor(np.clip(np.nan_to_num(e, nan=0.0), -c, c) * (SCORE_LEVELS / c) + 1e-9)
    return np.clip(k, -SCORE_LEVELS, SCORE_LEVELS).astype(np.int64)


def step_scores(
    durations_ns: npt.ArrayLike, outlier_ratio: float = 4.0, *, lower: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-step references, log ratios and quantised scores of one phase.

    Parameters
    ----------
    durations_ns : (R, S) array of float
        Durations per rank and step, ns; NaN: not judged.
    outlier_ratio : float
        Scores are clipped at ``+-log(outlier_ratio)``.
    lower : bool
        Score shortness (collectives: the late rank's collective is short).

    Returns
    -------
    ref : (S,) float64
        Median of each step's finite durations (the faster one's when every step has at most
        two ranks and not ``lower``), ns.
    log_ratio : (R, S) float64
        ``log(d / ref)`` (negated when ``lower``), unclipped; NaN where ``d`` is NaN.
    scores : (R, S) int64
        ``floor(clip(log_ratio, -c, c) * SCORE_LEVELS / c)`` with ``c = log(outlier_ratio)``,
        in ``[-SCORE_LEVELS, SCORE_LEVELS]``; 0 where ``d`` is NaN.

    Examples
    --------
    >>> ref, e, k = step_scores([[10.0, 10.0], [11.0, 50.0], [9.0, 10.0]])
    >>> ref.tolist(), k[1].tolist()
    ([10.0, 10.0], [2, 32])
    """
    d = np.asarray(durations_ns, dtype=np.float64)
    if d.ndim != 2:
        raise DetectorInputError(f"durations must be (ranks, steps), got shape {d.shape}")
    d3 = d[:, :, None]
    pair = np.array([d.shape[0] > 0 and bool((np.isfinite(d).sum(axis=0) <= 2).all())])
    ref = _references(d3, pair & (not lower))
    e = _log_ratios(d3, ref[None])[:, :, 0]
    if lower:
        e = -e
    return ref[:, 0], e, _quantise(e, outlier_ratio)


def exceedance_p(
    scores: npt.ArrayLike, valid: npt.ArrayLike, rows: npt.ArrayLike | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact permutation p-values of each rank's summed score (upper tail).

    Parameters
    ----------
    scores : (R, S) array of int
        Per-step scores (:func:`step_scores`).
    valid : (R, S) array of bool
        Cells that take part; each step's null deals its valid cells' scores.
    rows : (K,) array of int, optional
        Ranks to compute (default: every rank with a valid cell); the others get 1.0.

    Returns
    -------
    p : (R,) float64
        ``P(sum_s X_s >= t_r)`` with ``X_s`` drawn uniformly from step ``s``'s valid scores,
        over the steps where rank ``r`` is valid, and ``t_r`` its own sum: the chance that a
        random deal of every step's scores to the ranks gives it a total this high. Exact
        for ranks exchangeable within each step, whatever the distribution.
    floor : (R,) float64
        ``prod_s 1 / R_s`` over the rank's steps (``R_s`` the valid ranks of step ``s``):
        the smallest p-value the window can give.

    Examples
    --------
    >>> k = np.zeros((4, 3), dtype=np.int64); k[2] = 5     # rank 2 on top in 3 steps
    >>> p, floor = exceedance_p(k, np.ones((4, 3), bool))
    >>> p.round(4).tolist(), float(floor[2])
    ([1.0, 1.0, 0.0156, 1.0], 0.015625)
    """
    k = np.asarray(scores, dtype=np.int64)
    ok = np.asarray(valid, dtype=bool)
    if k.ndim != 2 or ok.shape != k.shape:
        raise DetectorInputError(f"scores {k.shape} and valid {ok.shape} must be one (R, S)")
    p = np.ones(k.shape[0])
    floor = np.ones(k.shape[0])
    if not ok.any():
        return p, floor
    lo = int(k[ok].min())
    width = int(k[ok].max()) - lo + 1
    n_s = ok.sum(axis=0)
    todo = np.flatnonzero(ok.any(axis=1)) if rows is None else np.asarray(rows, dtype=np.int64)
    pmf: dict[int, np.ndarray] = {}
    patterns: dict[bytes, list[int]] = {}
    for i in todo:
        patterns.setdefault(ok[i].tobytes(), []).append(int(i))
    for members in patterns.values():
        steps = np.flatnonzero(ok[members[0]])
        if steps.size == 0:
            continue
        acc = np.ones(1)
        for s in steps.tolist():
            if s not in pmf:
                pmf[s] = np.bincount(k[ok[:, s], s] - lo, minlength=width) / n_s[s]
            acc = np.convolve(acc, pmf[s])
        tail = np.cumsum(acc[::-1])[::-1]  # P(sum >= i), small terms first
        m = np.asarray(members)
        t = (k[np.ix_(m, steps)] - lo).sum(axis=1)
        p[m] = np.minimum(tail[t], 1.0)
        floor[m] = float(np.prod(1.0 / n_s[steps]))
    return p, floor


def holm(
    p: npt.ArrayLike, alpha: float, n_tests: int, floor: npt.ArrayLike | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down rejections of the tests ``p`` of a family of ``n_tests``.

    Parameters
    ----------
    p : (K,) array of float
        The p-values computed (the family's other ``n_tests - K`` tests count as p = 1).
    alpha : float
        Family-wise error rate.
    n_tests : int
        Size of the family (>= K).
    floor : (K,) array of float, optional
        Each test's smallest attainable p-value: a test whose floor exceeds its Holm level
        is rejected at its floor (the window can give no more evidence).

    Returns
    -------
    rejected : (K,) bool
        The ``i``-th smallest p (0-based) is rejected when it and every smaller one satisfy
        ``p <= max(alpha / (n_tests - i), floor)``.
    level : (K,) float64
        The level each test was compared with.

    Examples
    --------
    >>> holm([0.001, 0.02, 0.004], 0.05, 10)[0].tolist()
    [True, False, True]
    """
    pv = np.asarray(p, dtype=np.float64)
    fl = np.zeros_like(pv) if floor is None else np.asarray(floor, dtype=np.float64)
    out = np.zeros(pv.shape, dtype=bool)
    level = np.zeros(pv.shape)
    n = max(int(n_tests), pv.size)
    stopped = False
    for i, j in enumerate(np.argsort(pv, kind="stable")):
        level[j] = max(alpha / (n - i), fl[j])
        stopped = stopped or pv[j] > level[j] * (1.0 + 1e-9)
        out[j] = not stopped
    return out, level


def _trimmed_mean(x: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Mean over axis 1 of (R, S, P) ``x`` where ``ok``, without each row's largest value
    (the value itself when it is the only one); NaN where none."""
    n = ok.sum(axis=1)
    tot = np.where(ok, x, 0.0).sum(axis=1)
    mx = np.where(ok, x, -np.inf).max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(n >= 2, (tot - mx) / (n - 1), np.where(n == 1, tot, np.nan))
    return np.asarray(out, dtype=np.float64)


def _spread_z(e: np.ndarray, valid: np.ndarray, cfg: L2Config) -> tuple[np.ndarray, np.ndarray]:
    """(R, P) robust z of each rank's persistent log ratio among its group's, and (R, P) its
    effect: the persistent log ratio in robust sigmas of the phase's per-step log ratios.

    A rank's persistent log ratio ``m`` is the mean over its steps, without its worst one, of
    ``log(d / step median)`` (``e``, sign-adjusted) clipped at ``+-log(outlier_ratio)``. The
    z is against the median and 1.4826 MAD of the ranks' ``m``: the healthy per-GPU speed
    spread is persistent too, so a rank is a straggler only when it stands out of the spread
    its peers show. The effect is ``m`` over 1.4826 MAD of the window's cells: where one
    step's noise is as large as the excess (a phase that is the whole step, jittered), four
    steps cannot tell a straggler from the luckless rank of the window. Both sigmas are
    floored at ``mad_floor`` (log units).
    """
    c = math.log(cfg.outlier_ratio)
    ec = np.clip(np.nan_to_num(e, nan=0.0), -c, c)
    m = _trimmed_mean(ec, valid)  # (R, P)
    med = _medians_axis0(m)  # (P,)
    mad = _medians_axis0(np.abs(m - med[None]))
    sigma = np.maximum(_MAD_TO_SIGMA * np.nan_to_num(mad, nan=0.0), cfg.mad_floor)
    z = np.asarray(np.nan_to_num((m - med[None]) / sigma[None], nan=-np.inf), np.float64)
    cells = np.where(valid, ec, np.nan).reshape(-1, e.shape[2])  # (R * S, P)
    cmed = _medians_axis0(cells)
    cmad = _medians_axis0(np.abs(cells - cmed[None]))
    csig = np.maximum(_MAD_TO_SIGMA * np.nan_to_num(cmad, nan=0.0), cfg.mad_floor)
    effect = np.asarray(np.nan_to_num(m / csig[None], nan=-np.inf), np.float64)
    return z, effect


def _waited(d: np.ndarray, collective: np.ndarray) -> np.ndarray | None:
    """(R,) bool of a window whose collectives two ranks ran: the one whose collective time
    (summed over the collective phases per step, median over the steps both have) is the
    longer waited in them for the other; None when not exactly two ranks have any.

    A pair's collectives are not judged (either could have waited), but they tell which of
    the two arrived first: that rank's excess in a compute phase was made up before the
    collective and cost the step nothing (a 2-rank CPU DDP job: the healthy rank waited
    longer in ``dp_allreduce`` in 75-83 % of the steps, and its 1.5-2x ``attention`` of ~3 %
    of the step paged it).
    """
    if not collective.any():
        return None
    c = d[:, :, collective]
    fin = np.isfinite(c)
    tot = np.where(fin.any(axis=2), np.where(fin, c, 0.0).sum(axis=2), np.nan)  # (R, S)
    rows = np.flatnonzero(np.isfinite(tot).any(axis=1))
    if rows.size != 2:
        return None
    both = np.isfinite(tot[rows]).all(axis=0)
    if not both.any():
        return None
    med = np.median(tot[rows][:, both], axis=1)
    out = np.zeros(d.shape[0], bool)
    if med[0] != med[1]:
        out[rows[int(np.argmax(med))]] = True
    return out


@dataclass
class _Judged:
    """A window's phases, judged; arrays are (R, P) unless said."""

    valid: np.ndarray  # (R, S, P) cells judged
    collective: np.ndarray  # (P,)
    pair: np.ndarray  # (P,) compute phases of two ranks
    pair_ratio: np.ndarray  # window median / the faster one's, in pair phases (else NaN)
    phase_ns: np.ndarray  # (P,) the phase's median duration, ns
    cost: np.ndarray  # excess over the step reference, mean over steps but the worst, ns
    mean_cost: np.ndarray  # ... over every step, ns (bursts)
    tested: np.ndarray  # in the family: the rank could reach the materiality gates
    persistent: np.ndarray  # Holm-rejected
    p: np.ndarray
    level: np.ndarray  # the Holm level each rejected test passed
    burst: np.ndarray  # material over the window with a step beyond noise
    burst_z: np.ndarray
    burst_steps: np.ndarray  # steps beyond noise
    burst_cells: np.ndarray  # (R, S, P) the cells beyond noise
    burst_excess: np.ndarray  # the largest excess of a cell beyond noise, ns


def _judge(win: GroupWindow, step_ns: float, cfg: L2Config) -> _Judged | None:
    """Score every phase of the window at once, then test the candidates; None when no
    rank is material in any phase (nothing can be named)."""
    d = win.durations_ns
    r, _, np_ = d.shape
    collective = np.array([sk in COLLECTIVE_STREAM_KINDS for sk in win.stream_kinds], bool)
    valid = np.isfinite(d)
    valid &= (valid.sum(axis=1) >= cfg.min_steps)[:, None, :]
    valid &= (valid.sum(axis=0) >= 2)[None, :, :]  # a step of one rank compares nothing
    n = valid.any(axis=1).sum(axis=0)  # (P,) ranks judged per phase
    judged = (n >= 2) & ~(collective & ((n == 2) | (not cfg.late_arrival)))
    valid &= judged[None, None, :]
    dd = np.where(valid, d, np.nan)
    pair = (n == 2) & ~collective
    ref = _references(dd, pair)  # (S, P)
    sign = np.where(collective, -1.0, 1.0)
    excess = (dd - ref[None]) * sign  # ns; a late arrival's shortfall in collectives
    phase_ns = _medians_axis0(ref)  # (P,)
    share = np.where(collective, cfg.late_step_share, cfg.min_step_share)
    gate = np.fmax(cfg.min_abs_ms * 1e6, cfg.min_excess * phase_ns)
    if math.isfinite(step_ns):
        gate = np.fmax(gate, share * step_ns)
    gate = np.where(judged, gate, np.inf)
    cost = _trimmed_mean(excess, valid)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_cost = np.where(valid, excess, 0.0).sum(axis=1) / valid.sum(axis=1)
    may_burst = (mean_cost >= gate).any(axis=0) & ~collective & (n >= 3)
    if not (cost >= gate).any() and not may_burst.any():
        return None  # the usual healthy window: nobody costs the step enough
    e = _log_ratios(dd, ref[None]) * sign  # (R, S, P)
    best = np.where(valid, excess, -np.inf).max(axis=0)  # (S, P) the most any rank had
    bound = _trimmed_mean(np.broadcast_to(best[None], d.shape), valid)
    tested = bound >= gate
    candidate = tested & (cost >= gate)
    if collective.any():  # a late rank stands out from the group, not a late part of it
        stood_out = np.zeros_like(candidate)
        for j in np.flatnonzero(collective & candidate.any(axis=0)):
            stood_out[:, j] = phase_stats(dd[:, :, j], cfg).z <= -cfg.z
        candidate &= np.where(collective[None], stood_out, True)
    spread_z, effect = _spread_z(e, valid, cfg)
    candidate &= np.where(collective[None] | pair[None], True, spread_z >= cfg.z)
    candidate &= np.where(pair[None], True, effect >= cfg.min_effect)
    ratio = np.full((r, np_), np.nan)
    if pair.any():  # a pair: the ratio of the window medians as before
        v = _medians_axis0(np.swapaxes(dd[:, :, pair], 0, 1))  # (R, pairs)
        ratio[:, pair] = v / np.maximum(np.nanmin(v, axis=0), 1e-9)
        candidate[:, pair] &= ratio[:, pair] >= cfg.pair_ratio
        waited = _waited(d, collective)
        if waited is not None:  # it arrived first: its excess cost the step nothing
            candidate[:, pair] &= ~waited[:, None]
    p = np.ones((r, np_))
    floor = np.ones((r, np_))
    k = _quantise(e, cfg.outlier_ratio)
    for j in np.flatnonzero(candidate.any(axis=0)):
        p[:, j], floor[:, j] = exceedance_p(
            k[:, :, j], valid[:, :, j], rows=np.flatnonzero(candidate[:, j])
        )
    # a window that cannot say 1/64 (one step of 16 ranks, a job's first steps in a group of
    # 4) is no evidence of persistence: its floor does not pass (pairs have pair_ratio)
    candidate &= (floor <= MAX_FLOOR) | pair[None]
    cells = np.argwhere(candidate)
    rej, lv = holm(p[candidate], cfg.alpha, int(tested.sum()), floor[candidate])
    persistent = np.zeros((r, np_), bool)
    level = np.ones((r, np_))
    persistent[cells[:, 0], cells[:, 1]] = rej
    level[cells[:, 0], cells[:, 1]] = lv
    burst = np.zeros((r, np_), bool)
    burst_z = np.full((r, np_), -np.inf)
    burst_n = np.zeros((r, np_), np.int64)
    burst_cells = np.zeros(d.shape, bool)
    burst_excess = np.zeros((r, np_))
    c = math.log(cfg.outlier_ratio)
    may = may_burst & (np.where(valid, e, -np.inf).max(axis=(0, 1)) >= c)
    for j in np.flatnonzero(may):  # rare: some step beyond outlier_ratio
        ej = e[:, :, j][valid[:, :, j]]
        ef = np.clip(ej, -10.0, 10.0)
        sigma = max(_MAD_TO_SIGMA * float(np.median(np.abs(ef - np.median(ef)))), cfg.mad_floor)
        bz = np.where(valid[:, :, j], (np.nan_to_num(e[:, :, j], nan=-np.inf) - c) / sigma, -np.inf)
        burst_z[:, j] = bz.max(axis=1)
        burst_cells[:, :, j] = bz >= cfg.burst_z
        burst_excess[:, j] = np.where(burst_cells[:, :, j], excess[:, :, j], 0.0).max(axis=1)
        burst_n[:, j] = burst_cells[:, :, j].sum(axis=1)
        burst[:, j] = (burst_z[:, j] >= cfg.burst_z) & (mean_cost[:, j] >= gate[j])
    return _Judged(
        valid,
        collective,
        pair,
        ratio,
        phase_ns,
        cost,
        mean_cost,
        tested,
        persistent,
        p,
        level,
        burst,
        burst_z,
        burst_n,
        burst_cells,
        burst_excess,
    )


def detect(win: GroupWindow, cfg: L2Config | None = None) -> list[Finding]:
    """L2 findings of one group window.

    Parameters
    ----------
    win : GroupWindow
    cfg : L2Config

    Returns
    -------
    list of Finding
        At most one ``straggler`` finding per phase (the ranks named in that phase), then
        the step-time spikes of :func:`spikes` (a ``jitter`` finding), so every caller (the
        engine's steps roles, ``argus diagnose``, the benches) runs both.
        A straggler's ``score``/``threshold`` are those of its strongest rank: ``-log10 p`` against
        ``-log10`` of the Holm level it passed (a persistent excess), or the burst's robust z
        against ``burst_z``; ``baseline``/``observed`` are the phase's median and that plus
        the worst named rank's excess (ms per step; minus the shortfall of a late arrival).
        Evidence: ``role`` (``compute`` | ``late_arrival``), per named rank ``test``
        (``persistent`` | ``burst``), ``p``, ``burst_steps`` (steps beyond noise), ``burst_at`` (per
        rank named for a burst, the step numbers beyond noise), ``burst_share`` (its largest such
        step's excess / the median iteration time), ``excess`` (share of the phase) and
        ``step_share`` (share of the median iteration time ``step_ms``); ``alpha``,
        ``n_tests``, ``cv``, ``z`` (robust z of the window medians), ``victims``
        (collectives), ``bottleneck`` (ranks for which this phase has the largest excess in
        ms among the group's phases).

    Notes
    -----
    The family is the (rank, phase) pairs of the window where the rank could reach the
    materiality gates at all (judged on each step's largest excess, whichever rank drew it):
    ``n_tests``. See the module docstring for the rule.
    """
    cfg = cfg or L2Config()
    if not win.phases or not len(win.ranks):
        return []
    return _stragglers(win, cfg) + spikes(win, cfg)


def _stragglers(win: GroupWindow, cfg: L2Config) -> list[Finding]:
    """The ``straggler`` findings of :func:`detect`."""
    step_ns = np.nan
    if win.iter_ns is not None and np.isfinite(win.iter_ns).any():
        it = win.iter_ns.ravel()
        step_ns = _median(it[~np.isnan(it)])  # np.nanmedian's value
    jd = _judge(win, step_ns, cfg)
    if jd is None:
        return []
    named = jd.persistent | jd.burst  # (R, P)
    if not named.any():
        return []
    gain = np.where(jd.persistent, jd.cost, jd.mean_cost)  # ns per step the rank costs
    compute_gain = np.where(named & ~jd.collective[None], gain, -np.inf)
    best_phase = np.argmax(compute_gain, axis=1)
    has_compute = np.isfinite(compute_gain.max(axis=1))
    n_tests = int(jd.tested.sum())
    out: list[Finding] = []
    for j in np.flatnonzero(named.any(axis=0)):
        idx = np.flatnonzero(named[:, j])
        ranks = [int(win.ranks[i]) for i in idx]
        keys = [str(rk) for rk in ranks]
        margins: list[tuple[float, float, float]] = []  # (margin, score, threshold)
        tests: dict[str, str] = {}
        pvals: dict[str, float | None] = {}
        for key, i in zip(keys, idx, strict=True):
            if jd.persistent[i, j]:
                if jd.pair[j]:  # the slower of two: its ratio to the faster
                    sc, th = float(jd.pair_ratio[i, j]), cfg.pair_ratio
                else:
                    sc = -math.log10(max(float(jd.p[i, j]), 1e-300))
                    th = -math.log10(float(jd.level[i, j]))
                tests[key], pvals[key] = "persistent", float(f"{jd.p[i, j]:.3g}")
            else:
                sc, th = float(jd.burst_z[i, j]), cfg.burst_z
                tests[key], pvals[key] = "burst", None
            margins.append((sc / th if th > 0 else 1.0, sc, th))
        _, score, thr = max(margins)
        pns = float(jd.phase_ns[j])
        worst = float(gain[idx, j].max())
        st = phase_stats(np.where(jd.valid[:, :, j], win.durations_ns[:, :, j], np.nan), cfg)
        ev = {
            "role": "late_arrival" if jd.collective[j] else "compute",
            "stream_kind": win.stream_kinds[j],
            "test": json.dumps(tests),
            "p": json.dumps(pvals),
            "burst_steps": json.dumps(
                {k: int(jd.burst_steps[i, j]) for k, i in zip(keys, idx, strict=True)}
            ),
            "burst_at": json.dumps(
                {
                    k: [int(win.steps[s]) for s in np.flatnonzero(jd.burst_cells[i, :, j])]
                    for k, i in zip(keys, idx, strict=True)
                    if tests[k] == "burst"
                }
            ),
            "burst_share": json.dumps(
                {
                    k: round(float(jd.burst_excess[i, j]) / step_ns, 4)
                    for k, i in zip(keys, idx, strict=True)
                    if tests[k] == "burst" and math.isfinite(step_ns) and step_ns > 0
                }
            ),
            "excess": json.dumps(
                {
                    k: round(float(gain[i, j]) / pns, 3) if pns > 0 else None
                    for k, i in zip(keys, idx, strict=True)
                }
            ),
            "step_share": json.dumps(
                {
                    k: round(float(gain[i, j]) / step_ns, 4) if math.isfinite(step_ns) else None
                    for k, i in zip(keys, idx, strict=True)
                }
            ),
            "alpha": f"{cfg.alpha:g}",
            "n_tests": str(n_tests),
            "cv": f"{st.cv:.4f}",
            "cv_threshold": f"{cfg.cv:.4f}",
            "imbalanced": str(st.cv >= cfg.cv).lower(),
            "z": json.dumps({k: round(float(st.z[i]), 2) for k, i in zip(keys, idx, strict=True)}),
            "n_ranks": str(st.n_valid),
            "n_steps": str(len(win.steps)),
            "bottleneck": json.dumps(
                [
                    rk
                    for rk, i in zip(ranks, idx, strict=True)
                    if not jd.collective[j] and has_compute[i] and best_phase[i] == j
                ]
            ),
        }
        if math.isfinite(step_ns):
            ev["step_ms"] = f"{step_ns / 1e6:.3f}"
        victims = np.flatnonzero((st.z >= cfg.z) & (st.excess >= cfg.min_excess))
        if jd.collective[j] and victims.size:
            ev["victims"] = json.dumps([int(win.ranks[i]) for i in victims][:64])
            ev["n_victims"] = str(victims.size)
        out.append(
            Finding(
                job=win.job,
                level="L2",
                kind="straggler",
                group_kind=win.group_kind,
                group_id=win.group_id,
                ranks=tuple(ranks),
                phase=win.phases[j],
                window_start_step=int(win.steps[0]) if len(win.steps) else 0,
                window_end_step=int(win.steps[-1]) if len(win.steps) else 0,
                window_start_ns=int(win.start_ns),
                window_end_ns=int(win.end_ns),
                score=float(score),
                threshold=float(thr),
                baseline=pns / 1e6,
                observed=(pns + (-worst if jd.collective[j] else worst)) / 1e6,
                unit="ms",
                evidence=ev,
            )
        )
    return out


def spikes(win: GroupWindow, cfg: L2Config | None = None) -> list[Finding]:
    """Step-time spikes of one group window, attributed to the rank whose own time made them.

    A rank's *own time* in a step is the sum of its non-collective phases (compute self time
    and host phases, ns): what it did before it could arrive at the next collective, where
    its peers waited for it. Step ``s`` names rank ``r`` (a ``jitter`` finding of level L2)
    when, with ``B`` the window's median iteration time (median over the group's ranks per
    step, then over steps) and ``x = own[r, s] - median_r own[:, s]``:

    * ``x >= spike_step_share * B``: the rank alone cost the step that much;
    * ``log(own[r, s] / median_r own[:, s]) >= burst_z * sigma``: beyond the noise of own
      times (``sigma``: the larger of the MAD's sigma of the own-time log ratios of the
      window's quiet steps, without each step's largest, and their standard deviation);
    * the step felt it: its iteration time is at least ``B + x / 2`` (its peers waited);
    * one rank explains it: every other rank's ``x`` in the step is below half of it, and
      the step's median own time is within ``spike_step_share * B`` of the window's (a global
      hiccup, a storage stall of every rank or a checkpoint moves the step's median: nobody).

    Collectives (waiting) are not own time, so ranks that waited for the culprit (its group,
    its pipeline replica on other stages) are never named here. Needs ``win.iter_ns``.

    Parameters
    ----------
    win : GroupWindow
    cfg : L2Config

    Returns
    -------
    list of Finding
        At most one ``jitter`` finding (level L2, the window's group) naming the ranks that
        made spikes; ``phase`` is the phase of the named ranks' largest excess in their spike
        steps; ``score``/``threshold`` the largest robust z against ``burst_z``;
        ``baseline``/``observed`` ``B`` and the largest spiking step's iteration time (ms).
        Evidence: ``role`` ``compute``, ``test`` ``spike`` per rank, ``spike_steps`` (per rank,
        the step numbers), ``excess_ms`` and ``step_share`` (per rank, its largest ``x``).

    Examples
    --------
    >>> d = np.full((8, 4, 1), 800e6); d[3, 2, 0] += 1500e6      # a 1.5 s stall
    >>> it = d.sum(axis=2).max(axis=0, keepdims=True).repeat(8, 0) + 80e6
    >>> w = GroupWindow("j", "dp", "g", np.arange(8), np.arange(4), ("data_load",),
    ...                 ("host",), d, iter_ns=it)
    >>> [(f.kind, f.ranks, f.evidence["spike_steps"]) for f in spikes(w)]
    [('jitter', (3,), '{"3": [2]}')]
    """
    cfg = cfg or L2Config()
    if win.iter_ns is None or not win.phases or len(win.ranks) < 3:
        return []
    d = win.durations_ns
    own_ph = np.array([sk not in COLLECTIVE_STREAM_KINDS for sk in win.stream_kinds], bool)
    if not own_ph.any():
        return []
    dp = d[:, :, own_ph]
    seen = np.isfinite(dp).any(axis=2)
    own = np.where(seen, np.nansum(np.where(np.isfinite(dp), dp, 0.0), axis=2), np.nan)  # (R, S)
    ok = seen & ((np.isfinite(own).sum(axis=0) >= 3)[None, :]) & (own > 0)
    if not ok.any():
        return []
    own = np.where(ok, own, np.nan)
    med = _medians_axis0(own)  # (S,)
    step_t = _medians_axis0(np.where(np.isfinite(win.iter_ns), win.iter_ns, np.nan))  # (S,)
    if not np.isfinite(step_t).any() or not np.isfinite(med).any():
        return []
    base = float(np.nanmedian(step_t))
    base_own = float(np.nanmedian(med))
    gate = cfg.spike_step_share * base
    x = own - med[None]  # (R, S) ns
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.log(own) - np.log(med)[None]
    xs = np.where(ok, x, -np.inf)
    order = np.sort(xs, axis=0)
    top, second = order[-1], order[-2]  # (S,)
    quiet = np.abs(med - base_own) < gate
    # the noise of own times, from the quiet steps: the MAD's sigma, but at least the std of
    # the cells without each step's largest (a small window's MAD alone is small by chance
    # often enough to matter at thousands of windows a job)
    rest = ok & quiet[None, :]
    rest[np.argmax(np.where(ok, e, -np.inf), axis=0), np.arange(e.shape[1])] = False
    ev = e[rest] if rest.sum() >= 2 else e[ok]
    mad_sigma = _MAD_TO_SIGMA * float(np.median(np.abs(ev - np.median(ev))))
    sigma = max(mad_sigma, float(np.std(ev)), cfg.mad_floor)
    z = np.where(ok, e / sigma, -np.inf)
    felt = step_t >= base + 0.5 * top
    hit_s = quiet & felt & (top >= gate) & (second < 0.5 * top)
    hits = [(int(np.argmax(xs[:, s])), int(s)) for s in np.flatnonzero(hit_s)]
    hits = [(r, s) for r, s in hits if z[r, s] >= cfg.burst_z]
    if not hits:
        return []
    by_rank: dict[int, list[int]] = {}
    for r, s in hits:
        by_rank.setdefault(r, []).append(s)
    rows = sorted(by_rank)
    ranks = [int(win.ranks[r]) for r in rows]
    keys = [str(rk) for rk in ranks]
    worst = {r: max(by_rank[r], key=lambda s: x[r, s]) for r in rows}
    r0 = max(rows, key=lambda r: x[r, worst[r]])
    s0 = worst[r0]
    names = [p for p, o in zip(win.phases, own_ph, strict=True) if o]
    ref = _medians_axis0(dp[:, s0, :])  # (P_own,) the step's median per phase
    phase = names[int(np.nanargmax(np.nan_to_num(dp[r0, s0] - ref, nan=-np.inf)))]
    steps = win.steps
    return [
        Finding(
            job=win.job,
            level="L2",
            kind="jitter",
            group_kind=win.group_kind,
            group_id=win.group_id,
            ranks=tuple(ranks),
            phase=phase,
            window_start_step=int(steps[0]),
            window_end_step=int(steps[-1]),
            window_start_ns=int(win.start_ns),
            window_end_ns=int(win.end_ns),
            score=float(max(z[r, s] for r, s in hits)),
            threshold=cfg.burst_z,
            baseline=base / 1e6,
            observed=float(max(step_t[s] for _, s in hits)) / 1e6,
            unit="ms",
            evidence={
                "role": "compute",
                "stream_kind": win.stream_kinds[win.phases.index(phase)],
                "test": json.dumps({k: "spike" for k in keys}),
                "spike_steps": json.dumps(
                    {
                        k: [int(steps[s]) for s in by_rank[r]]
                        for k, r in zip(keys, rows, strict=True)
                    }
                ),
                "excess_ms": json.dumps(
                    {
                        k: round(float(x[r, worst[r]]) / 1e6, 3)
                        for k, r in zip(keys, rows, strict=True)
                    }
                ),
                "step_share": json.dumps(
                    {
                        k: round(float(x[r, worst[r]]) / base, 4)
                        for k, r in zip(keys, rows, strict=True)
                    }
                ),
                "step_ms": f"{base / 1e6:.3f}",
                "n_ranks": str(int(ok.any(axis=1).sum())),
                "n_steps": str(len(steps)),
            },
        )
    ]
