"""L2 over many group windows at once: same-shape groups stacked, judged in one numpy pass.

:func:`detect_many` gives exactly the findings of ``[f for w in wins for f in
l2.detect(w, cfg)]`` (same order, same scores): the groups of one shape (ranks x steps x
phases, same phase names and stream kinds) are stacked into ``(G, R, S, P)`` arrays and
*screened* in one vectorised pass with the very statistics :func:`argus.detectors.l2.detect`
starts with (the step references, each rank's cost against the materiality gate, the burst
bound, and :func:`argus.detectors.l2.spikes`' step conditions). A group the screen cannot
rule out is judged by :func:`argus.detectors.l2.detect` itself; a group it rules out has no
rank anywhere near a gate, which ``detect`` would have returned ``[]`` for. The screen's
comparisons are loosened by a relative ``1e-9`` (plus 1e-6 ns), far above the rounding a
different reduction order can make, so the screen never drops a group ``detect`` names.

In a healthy job nearly every group is ruled out, so L2 costs a few numpy calls per group
kind and shape instead of one ``detect`` per group (~1,000 a step at 1,024 ranks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from argus.detectors import l2
from argus.detectors.config import L2Config
from argus.detectors.findings import Finding
from argus.routing import COLLECTIVE_STREAM_KINDS

__all__ = ["detect_many", "screen"]

_REL = 1e-9  # relative slack of the screen's comparisons
_ABS = 1e-6  # ns


def _medians(d: np.ndarray, axis: int) -> np.ndarray:
    """Median over ``axis`` of the finite values of ``d`` (NaN sorts last); NaN where none.

    ``l2._medians_axis0`` of ``d`` with ``axis`` first: the same sort and the same two
    middle values.
    """
    if d.shape[axis] == 0:
        return np.full(d.shape[:axis] + d.shape[axis + 1 :], np.nan)
    return l2._medians_axis0(np.moveaxis(d, axis, 0))


def _ge(a: np.ndarray, b: np.ndarray | float) -> np.ndarray:
    """``a >= b`` loosened by the screen's slack (True wherever it might hold)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(a >= b - (_REL * np.abs(b) + _ABS), dtype=bool)


def _screen_stragglers(
    d: np.ndarray, it: np.ndarray | None, collective: np.ndarray, cfg: L2Config
) -> np.ndarray:
    """(G,) bool: groups of (G, R, S, P) ``d`` in which ``l2._judge`` may find a material rank
    (its early return not taken)."""
    g = d.shape[0]
    step_ns = np.full(g, np.nan)
    # detect's median iteration time counts +inf ones, this one does not: where a group has
    # any, its gate may be higher in detect (fewer tests, a higher Holm level)
    inf_it = np.zeros(g, dtype=bool)
    if it is not None:
        fin = np.isfinite(it).reshape(g, -1).any(axis=1)
        if fin.any():
            step_ns[fin] = _medians(it[fin].reshape(int(fin.sum()), -1), 1)
        inf_it = np.asarray(np.isposinf(it).reshape(g, -1).any(axis=1), dtype=bool)
    valid = np.isfinite(d)
    valid &= (valid.sum(axis=2) >= cfg.min_steps)[:, :, None, :]
    valid &= (valid.sum(axis=1) >= 2)[:, None, :, :]
    n = valid.any(axis=2).sum(axis=1)  # (G, P)
    judged = (n >= 2) & ~(collective[None] & ((n == 2) | (not cfg.late_arrival)))
    valid &= judged[:, None, None, :]
    if not judged.any():  # e.g. collectives of two ranks: never judged
        return np.zeros(g, dtype=bool)
    dd = np.where(valid, d, np.nan)
    # every excess (and so each rank's cost) lies within its step's span of judged values,
    # and the gate is at least min_abs_ms and the step share: a group whose spans all stay
    # below that names nobody
    share = np.where(collective, cfg.late_step_share, cfg.min_step_share)  # (P,)
    step_or_0 = np.where(np.isfinite(step_ns), step_ns, 0.0)
    gate_lo = np.fmax(cfg.min_abs_ms * 1e6, share[None] * step_or_0[:, None])  # (G, P)
    with np.errstate(invalid="ignore"):
        span = np.fmax.reduce(dd, axis=1) - np.fmin.reduce(dd, axis=1)  # (G, S, P); NaN: none
    keep = _ge(span, gate_lo[:, None, :]).any(axis=(1, 2))
    if keep.all():
        return _screen_material(dd, valid, n, judged, step_ns, inf_it, collective, cfg)
    out = np.zeros(g, dtype=bool)
    k = np.flatnonzero(keep)
    if k.size:
        out[k] = _screen_material(
            dd[k], valid[k], n[k], judged[k], step_ns[k], inf_it[k], collective, cfg
        )
    return out


def _screen_material(
    dd: np.ndarray,
    valid: np.ndarray,
    n: np.ndarray,
    judged: np.ndarray,
    step_ns: np.ndarray,
    inf_it: np.ndarray,
    collective: np.ndarray,
    cfg: L2Config,
) -> np.ndarray:
    """(G,) bool: the rest of :func:`_screen_stragglers` on (G, R, S, P) judged durations
    ``dd`` (NaN: not judged), their ``valid`` cells, (G, P) ``n`` ranks and ``judged``
    phases, (G,) ``step_ns`` (NaN: none) and ``inf_it`` (an iteration time is +inf: the
    Holm bound counts one test only)."""
    pair = (n == 2) & ~collective[None]  # (G, P)
    ref = _medians(dd, 1)  # (G, S, P)
    if pair.any():
        with np.errstate(invalid="ignore"):
            mn = np.fmin.reduce(dd, axis=1)
        fmin_ref = np.where(np.isfinite(dd).any(axis=1), mn, np.nan)
        ref = np.where(pair[:, None, :], fmin_ref, ref)
    sign = np.where(collective, -1.0, 1.0)
    excess = (dd - ref[:, None]) * sign  # (G, R, S, P)
    phase_ns = _medians(ref, 1)  # (G, P)
    share = np.where(collective, cfg.late_step_share, cfg.min_step_share)  # (P,)
    gate = np.fmax(cfg.min_abs_ms * 1e6, cfg.min_excess * phase_ns)
    gate = np.where(
        np.isfinite(step_ns)[:, None], np.fmax(gate, share[None] * step_ns[:, None]), gate
    )
    gate = np.where(judged, gate, np.inf)  # (G, P)
    cnt = valid.sum(axis=2)  # (G, R, P)
    tot = np.where(valid, excess, 0.0).sum(axis=2)
    mx = np.where(valid, excess, -np.inf).max(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        cost = np.where(cnt >= 2, (tot - mx) / (cnt - 1), np.where(cnt == 1, tot, np.nan))
        mean_cost = tot / cnt
    gate_r = gate[:, None, :]
    may_burst = (_ge(mean_cost, gate_r).any(axis=1) & ~collective[None] & (n >= 3)).any(axis=1)
    # the family: ranks that could reach the gate on each step's largest excess (``tested``)
    best = np.where(valid, excess, -np.inf).max(axis=1)  # (G, S, P)
    bt = np.where(valid, best[:, None], 0.0).sum(axis=2)
    bm = np.where(valid, best[:, None], -np.inf).max(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = np.where(cnt >= 2, (bt - bm) / (cnt - 1), np.where(cnt == 1, bt, np.nan))
    candidate = _ge(cost, gate_r) & _ge(bound, gate_r)  # (G, R, P), a superset of detect's
    with np.errstate(invalid="ignore"):
        n_tests = (bound >= gate_r + (_REL * np.abs(gate_r) + _ABS)).sum(axis=(1, 2))  # low
    n_tests[inf_it] = 0  # at least 1: a candidate is a test
    flag = np.array(may_burst, dtype=bool)
    todo = np.flatnonzero(candidate.any(axis=(1, 2)) & ~flag)
    if todo.size:
        flag[todo] = _may_pass_holm(
            dd[todo],
            ref[todo],
            valid[todo],
            candidate[todo],
            pair[todo],
            n_tests[todo],
            sign,
            cfg,
        )
    return np.asarray(flag, dtype=bool)


_SLACK_K = 1e-11  # score units: a cell this near a quantisation step may round either way
_SLACK_P = 1e-6  # relative: p-values and levels (a convolution's rounding is ~1e-12)


def _may_pass_holm(
    dd: np.ndarray,
    ref: np.ndarray,
    valid: np.ndarray,
    candidate: np.ndarray,
    pair: np.ndarray,
    n_tests: np.ndarray,
    sign: np.ndarray,
    cfg: L2Config,
) -> np.ndarray:
    """(G,) bool: groups where some candidate may pass ``l2._judge``'s Holm step.

    A rank's exceedance p (:func:`argus.detectors.l2.exceedance_p`) is at least
    ``prod_s c_s / n_s``: the chance that every step deals it a score at least its own
    (``c_s`` of the step's ``n_s`` valid scores are). A group is ruled out when every
    candidate's bound exceeds its Holm level ``max(alpha / n_tests, floor)`` (the first
    level Holm compares with, ``n_tests`` counted low, so the level high) or its floor
    exceeds :data:`argus.detectors.l2.MAX_FLOOR`. The scores are ``l2._quantise``'s, of the
    same log ratios; a group with a valid cell within ``_SLACK_K`` of a score step, or a
    candidate in a pair phase (judged on ``pair_ratio``), is kept.

    Shapes: ``dd`` (G, R, S, P) judged durations (NaN: not judged), ``ref`` (G, S, P)
    references, ``valid`` (G, R, S, P), ``candidate`` (G, R, P), ``pair`` (G, P),
    ``n_tests`` (G,), ``sign`` (P,) (-1 for collectives).
    """
    c = math.log(cfg.outlier_ratio)
    e = l2._log_ratios(dd, ref[:, None]) * sign
    y = np.clip(np.nan_to_num(e, nan=0.0), -c, c) * (l2.SCORE_LEVELS / c) + 1e-9
    k = np.clip(np.floor(y), -l2.SCORE_LEVELS, l2.SCORE_LEVELS)
    edge = (np.abs(y - np.round(y)) < _SLACK_K) & valid  # (G, R, S, P)
    ns = valid.sum(axis=1)  # (G, S, P)
    cnt = count_at_least(k, valid)  # (G, R, S, P)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_lb = np.where(valid, cnt / ns[:, None], 1.0).prod(axis=2)  # (G, R, P)
        floor = np.where(valid, 1.0 / ns[:, None], 1.0).prod(axis=2)
    level = np.fmax(cfg.alpha / np.maximum(n_tests, 1)[:, None, None], floor)
    may = (floor <= l2.MAX_FLOOR * (1.0 + _SLACK_P)) & (p_lb <= level * (1.0 + _SLACK_P))
    may |= pair[:, None, :]
    may |= edge.any(axis=(1, 2))[:, None, :]  # (G, P): every rank's scores count
    return np.asarray((candidate & may).any(axis=(1, 2)), dtype=bool)


def count_at_least(k: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(G, R, S, P) int64: for each cell, how many valid ranks of its group, step and phase
    score at least its score (itself included when valid); a cell that is not valid gets R.

    ``k``: (G, R, S, P) whole scores in ``[-SCORE_LEVELS, SCORE_LEVELS]``; ``valid`` the same
    shape. One sort per (group, step, phase) and one ``searchsorted`` over them all, each
    slice's scores shifted into a range of its own: O(N log R), where comparing every pair of
    ranks was O(N R) (a 320-rank DP group at 10,240 ranks: 320 times the cells).
    """
    g, r, s, p = k.shape
    lo = -l2.SCORE_LEVELS - 1  # a cell not valid: below every score
    span = 2 * l2.SCORE_LEVELS + 2
    kk = np.moveaxis(np.where(valid, k, lo).astype(np.int64) - lo, 1, -1)  # (G, S, P, R) >= 0
    slices = np.arange(g * s * p, dtype=np.int64).reshape(g, s, p, 1)
    keyed = kk + slices * span
    below = np.searchsorted(np.sort(keyed, axis=-1).ravel(), keyed.ravel(), side="left")
    below = below.reshape(g, s, p, r) - slices * r  # in its slice, the scores below the cell's
    return np.moveaxis(r - below, -1, 1)


def _screen_spikes(d: np.ndarray, it: np.ndarray, own_ph: np.ndarray, cfg: L2Config) -> np.ndarray:
    """(G,) bool: groups in which ``l2.spikes`` may find a step of one rank's spike."""
    g, r = d.shape[:2]
    if r < 3 or not own_ph.any():
        return np.zeros(g, dtype=bool)
    dp = d[..., own_ph]
    fin = np.isfinite(dp)
    seen = fin.any(axis=3)  # (G, R, S)
    own = np.where(seen, np.where(fin, dp, 0.0).sum(axis=3), np.nan)
    ok = seen & (np.isfinite(own).sum(axis=1) >= 3)[:, None, :] & (own > 0)
    own = np.where(ok, own, np.nan)
    med = _medians(own, 1)  # (G, S)
    step_t = _medians(np.where(np.isfinite(it), it, np.nan), 1)  # (G, S)
    base = _medians(step_t, 1)  # (G,) as np.nanmedian
    base_own = _medians(med, 1)
    gate = cfg.spike_step_share * base  # (G,)
    x = own - med[:, None]
    xs = np.where(ok, x, -np.inf)
    order = np.sort(xs, axis=1)
    top, second = order[:, -1], order[:, -2]  # (G, S)
    gs = gate[:, None]
    with np.errstate(invalid="ignore"):
        quiet = np.abs(med - base_own[:, None]) < gs + (_REL * np.abs(gs) + _ABS)
        felt = _ge(step_t, base[:, None] + 0.5 * top)
        second_ok = second < 0.5 * top + (_REL * np.abs(top) + _ABS)
    hit = quiet & felt & _ge(top, gs) & second_ok
    any_ok = ok.any(axis=(1, 2)) & np.isfinite(step_t).any(axis=1) & np.isfinite(med).any(axis=1)
    return np.asarray(hit.any(axis=1) & any_ok, dtype=bool)


def screen(
    durations_ns: np.ndarray,
    iter_ns: np.ndarray | None,
    stream_kinds: Sequence[str],
    cfg: L2Config | None = None,
) -> np.ndarray:
    """(G,) bool: the stacked groups :func:`argus.detectors.l2.detect` may name anyone in.

    Parameters
    ----------
    durations_ns : (G, R, S, P) float64 array
        G groups of one shape, ns; NaN: no value.
    iter_ns : (G, R, S) float64 array or None
        Iteration times, ns (None: the windows carry none, no spikes).
    stream_kinds : sequence of str
        The P phases' stream kinds.
    cfg : L2Config

    Returns
    -------
    (G,) bool
        False only where ``detect`` of that group returns ``[]``.
    """
    cfg = cfg or L2Config()
    d = np.asarray(durations_ns, dtype=np.float64)
    if d.ndim != 4 or d.shape[3] == 0 or d.shape[1] == 0:
        return np.zeros(d.shape[0] if d.ndim else 0, dtype=bool)
    collective = np.array([sk in COLLECTIVE_STREAM_KINDS for sk in stream_kinds], bool)
    flag = _screen_stragglers(d, iter_ns, collective, cfg)
    if iter_ns is not None:
        flag |= _screen_spikes(d, np.asarray(iter_ns, dtype=np.float64), ~collective, cfg)
    return flag


def detect_many(wins: Sequence[l2.GroupWindow], cfg: L2Config | None = None) -> list[Finding]:
    """``[f for w in wins for f in l2.detect(w, cfg)]``, with the groups of one shape
    screened together (module doc): the same findings in the same order."""
    cfg = cfg or L2Config()
    shapes: dict[tuple[tuple[int, ...], tuple[str, ...], tuple[str, ...], bool], list[int]] = {}
    for i, w in enumerate(wins):
        key = (w.durations_ns.shape, w.phases, w.stream_kinds, w.iter_ns is None)
        shapes.setdefault(key, []).append(i)
    todo = np.zeros(len(wins), dtype=bool)
    for (_shape, _ph, sk, no_it), idx in shapes.items():
        d = np.stack([wins[i].durations_ns for i in idx])
        its = [wins[i].iter_ns for i in idx]
        it = None if no_it else np.stack([x for x in its if x is not None])
        todo[idx] = screen(d, it, sk, cfg)
    out: list[Finding] = []
    for i in np.flatnonzero(todo).tolist():
        out += l2.detect(wins[i], cfg)
    return out
