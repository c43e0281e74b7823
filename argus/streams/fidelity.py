"""Is the compression faithful? Raw vs reconstructed rank comparisons, measured.

L3 compares ranks by W1 between their reconstructed duration distributions (paper §6.2).
The reconstruction is lossy, so we check, on windows for which the raw events are at hand,
that it ranks and flags ranks as the raw events would:

* **Spearman ρ** between the pairwise W1 matrices (upper triangles) computed from raw samples
  and from the summaries: 1 means the summaries order every pair of ranks as the raw data do;
* **IQR flag agreement**: each rank's score is its mean W1 to the others (the paper's L3
  score) and a rank is flagged when ``score > Q3 + α·IQR``; the F1 of the flags from the
  summaries against the flags from raw data (1 when both flag nobody).

:func:`check_group` does one (kernel, stream) group, :func:`check_batches` one window of
``kernel_batch`` records (what the stream compressor samples and publishes as a metric), and
:func:`evaluate_synthetic` the benchmark of issue 3 on :mod:`argus.streams.synth` windows with
injected slowdowns (Spearman per kernel kind, detection F1 against the truth).
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

from argus.schemas.arrays import kernel_ids
from argus.streams import metrics, synth
from argus.summaries.kde import DEFAULT, PAPER, KdeConfig, Summary, summarize_many
from argus.summaries.lognormal import default_probs, pairwise_w1, quantile_matrix
from argus.summaries.quantile_wire import through_wire
from argus.summaries.summary_record import batch_columns, groups_from_summary

__all__ = [
    "FidelityReport",
    "GroupFidelity",
    "KindRow",
    "check_batches",
    "check_group",
    "evaluate_synthetic",
    "f1_score",
    "iqr_flags",
    "judge_samples",
    "raw_pairwise_w1",
    "spearman",
]


@dataclass(frozen=True, eq=False)
class GroupFidelity:
    """Fidelity of one group (kernel, stream) over R ranks of one window.

    Attributes
    ----------
    n_ranks : int
    spearman : float
        Spearman ρ of raw vs reconstructed pairwise W1 (NaN with < 3 ranks or constant W1).
    raw_flags, recon_flags : tuple of int
        Ranks (positions in the input) flagged by the IQR rule on raw / reconstructed W1.
    flag_f1 : float
        F1 of ``recon_flags`` against ``raw_flags`` (1.0 when both are empty).
    raw_w1, recon_w1 : (R, R) float64, ns
        The pairwise W1 matrices.
    """

    n_ranks: int
    spearman: float
    raw_flags: tuple[int, ...]
    recon_flags: tuple[int, ...]
    flag_f1: float
    raw_w1: np.ndarray = field(repr=False)
    recon_w1: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class FidelityReport:
    """Fidelity over the groups of one window (or several).

    ``spearman_median`` ignores groups whose ρ is undefined; ``flag_agreement`` is the mean
    ``flag_f1``. ``groups`` lists ``(kernel_id, stream)`` with its :class:`GroupFidelity`.
    """

    n_groups: int
    spearman_median: float
    spearman_min: float
    flag_agreement: float
    groups: tuple[tuple[tuple[int, int], GroupFidelity], ...] = field(repr=False, default=())


def spearman(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Spearman rank correlation (average ranks for ties); NaN when either side is constant."""
    ra = rankdata(np.asarray(a, dtype=np.float64))
    rb = rankdata(np.asarray(b, dtype=np.float64))
    if ra.size < 3 or np.ptp(ra) == 0 or np.ptp(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def iqr_flags(w1: np.ndarray, *, alpha: float = 1.5) -> tuple[int, ...]:
    """Ranks whose mean W1 to the others exceeds ``Q3 + alpha·(Q3 − Q1)`` (paper's L3 rule).

    ``w1`` is an (R, R) symmetric matrix; ranks with NaN scores are never flagged.
    """
    r = w1.shape[0]
    if r < 4:
        return ()
    score = (np.nansum(w1, axis=1) - np.nan_to_num(np.diag(w1))) / (r - 1)
    ok = np.isfinite(score)
    q1, q3 = np.percentile(score[ok], [25, 75]) if ok.any() else (np.nan, np.nan)
    return tuple(int(i) for i in np.flatnonzero(ok & (score > q3 + alpha * (q3 - q1))))


def f1_score(pred: Sequence[int], truth: Sequence[int]) -> float:
    """F1 of a predicted set against a true set; 1.0 when both are empty."""
    p, t = set(pred), set(truth)
    if not p and not t:
        return 1.0
    tp = len(p & t)
    return 2.0 * tp / (len(p) + len(t))


def raw_pairwise_w1(
    samples: Sequence[npt.ArrayLike], *, probs: np.ndarray | None = None
) -> np.ndarray:
    """(R, R) pairwise W1 between the empirical distributions of raw samples, ns.

    With ``probs=None`` the W1 are exact: the quantile functions are evaluated between the
    union of all ranks' jump points ``i/n_r`` (cost O(R²·Σn)). With a grid, they are its
    midpoint approximation (O(R²·M)). Invalid samples are ignored; an empty rank gives NaN.
    """
    clean = []
    for s in samples:
        a = np.asarray(s, dtype=np.float64).reshape(-1)
        clean.append(np.sort(a[(a > 0) & (a < np.inf)]))
    if probs is None:
        cuts = np.unique(
            np.concatenate(
                [np.arange(1, a.size) / a.size for a in clean if a.size] + [np.array([0.0, 1.0])]
            )
        )
        mids, wts = 0.5 * (cuts[1:] + cuts[:-1]), np.diff(cuts)
    else:
        mids = np.asarray(probs, dtype=np.float64)
        wts = np.full(mids.size, 1.0 / mids.size)
    qm = np.full((len(clean), mids.size), np.nan)
    for r, a in enumerate(clean):
        if a.size:
            qm[r] = a[np.clip(np.ceil(mids * a.size).astype(np.int64) - 1, 0, a.size - 1)]
    return pairwise_w1(qm, weights=wts)


def check_group(
    raw_samples: Sequence[npt.ArrayLike],
    summaries: Sequence[Summary],
    *,
    probs: np.ndarray | None = None,
    exact_raw: bool = False,
    iqr_alpha: float = 1.5,
) -> GroupFidelity:
    """Compare raw and reconstructed rank comparisons for one group.

    Parameters
    ----------
    raw_samples : sequence of R arrays, ns
        Each rank's raw durations of the group in the window.
    summaries : sequence of R Summary
        The same ranks' summaries (as they travel: float32 quantiles are fine).
    probs : (M,) array, optional
        Probability grid for the reconstructed W1 (and the raw W1 unless ``exact_raw``);
        :func:`~argus.summaries.lognormal.default_probs` (512) by default.
    exact_raw : bool
        Exact raw W1 (slower, see :func:`raw_pairwise_w1`) instead of the grid's.
    iqr_alpha : float
        Fence multiplier of the flag rule.
    """
    if len(raw_samples) != len(summaries):
        raise ValueError(f"{len(raw_samples)} raw sample sets but {len(summaries)} summaries")
    p = default_probs(512) if probs is None else np.asarray(probs, dtype=np.float64)
    raw = raw_pairwise_w1(raw_samples, probs=None if exact_raw else p)
    return _compare(raw, pairwise_w1(quantile_matrix(summaries, p)), iqr_alpha)


def _report(items: list[tuple[tuple[int, int], GroupFidelity]]) -> FidelityReport:
    rhos = np.array([g.spearman for _, g in items], dtype=np.float64)
    fin = rhos[np.isfinite(rhos)]
    return FidelityReport(
        n_groups=len(items),
        spearman_median=float(np.median(fin)) if fin.size else float("nan"),
        spearman_min=float(fin.min()) if fin.size else float("nan"),
        flag_agreement=float(np.mean([g.flag_f1 for _, g in items])) if items else float("nan"),
        groups=tuple(items),
    )


def _event_keys(batch: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    names, name_idx, stream, dur = batch_columns(batch)
    kids = kernel_ids(names).astype(np.uint64)
    key = (kids[name_idx] << np.uint64(32)) | stream.astype(np.uint64)
    return key, dur


def _to_wire(s: Summary, encoding: str) -> Summary:
    """The summary as it arrives after the wire (``encoding`` of :mod:`.quantile_wire`)."""
    q = through_wire(s.quantiles_ns, s.quantile_levels, encoding)
    return Summary(s.quantile_levels, s.counts, q, s.method)


def check_batches(
    batches: Sequence[Mapping[str, Any]],
    *,
    config: KdeConfig = DEFAULT,
    summaries: Sequence[Mapping[str, Any]] | None = None,
    max_groups: int | None = 8,
    min_events: int = 8,
    seed: int | None = None,
    probs: np.ndarray | None = None,
    exact_raw: bool = False,
) -> FidelityReport:
    """Fidelity of one window: ``kernel_batch`` records of R ranks (and their summaries).

    Parameters
    ----------
    batches : sequence of R decoded ``kernel_batch`` records of the same window.
    config : KdeConfig
        Used to summarise (and to encode, as the wire would) when ``summaries`` is not
        given; the compressor's default method by default.
    summaries : sequence of R decoded ``kernel_summary`` records, optional
        The published summaries of the same ranks (checked as they travelled).
    max_groups : int or None
        Check at most this many groups (None: all), chosen pseudo-randomly by ``seed``
        (default: the window id) among the groups with ``min_events`` events on every rank,
        so successive windows rotate over the kernels.
    min_events : int
        Fewest events per rank for a group to be checked.

    Returns
    -------
    FidelityReport
        ``n_groups == 0`` when fewer than 4 ranks or no group qualifies.

    probs : (M,) array, optional
        Probability grid of both W1 matrices (default :func:`default_probs` (256)).
    exact_raw : bool
        Exact raw W1 instead of the grid's (slower).

    Notes
    -----
    Cost for 32 ranks × 3,000 events × 4 groups: ~25 ms on one core (one
    ``summarize_many`` call for the chosen groups of all ranks, one sort of their raw
    durations, O(R²·M) per group for the two W1 matrices).
    """
    if summaries is not None and len(summaries) != len(batches):
        raise ValueError(f"{len(batches)} batches but {len(summaries)} summaries")
    if len(batches) < 4:
        return _report([])
    cols = [_event_keys(b) for b in batches]
    common: set[int] | None = None
    for key, _ in cols:
        u, c = np.unique(key, return_counts=True)
        ok = set(u[c >= min_events].tolist())
        common = ok if common is None else common & ok
    chosen = sorted(common or ())
    if max_groups is not None and len(chosen) > max_groups:
        s = int(batches[0].get("window_id", 0)) if seed is None else seed
        rank_key = [hashlib.blake2b(f"{s}:{k}".encode(), digest_size=8).digest() for k in chosen]
        chosen = sorted(k for _, k in sorted(zip(rank_key, chosen, strict=True))[:max_groups])
    if not chosen:
        return _report([])
    chosen_arr = np.array(chosen, dtype=np.uint64)
    n_k, n_r = len(chosen), len(batches)
    p = default_probs(256) if probs is None else np.asarray(probs, dtype=np.float64)
    # one array of all ranks' events of the chosen groups; group id = rank * K + group index
    gid_parts, dur_parts = [], []
    for r, (key, dur) in enumerate(cols):
        sel = np.isin(key, chosen_arr) & (dur > 0)
        gid_parts.append(r * n_k + np.searchsorted(chosen_arr, key[sel]).astype(np.int64))
        dur_parts.append(dur[sel])
    gid = np.concatenate(gid_parts)
    dur = np.concatenate(dur_parts).astype(np.float64)
    order = np.lexsort((dur, gid))
    ds = dur[order]
    counts = np.bincount(gid, minlength=n_r * n_k).reshape(n_r, n_k)
    starts = (np.cumsum(counts.reshape(-1)) - counts.reshape(-1)).reshape(n_r, n_k)
    if summaries is None:
        many = summarize_many(gid, dur, config=config)
        row = {int(g): i for i, g in enumerate(many.group_ids)}
        enc = config.quantile_encoding
        recon = [
            [_to_wire(many.summary(row[r * n_k + k]), enc) for r in range(n_r)] for k in range(n_k)
        ]
    else:
        want = [(k >> 32, k & 0xFFFFFFFF) for k in chosen]
        pubs = [groups_from_summary(s, keys=want) for s in summaries]
        recon = [[pubs[r][(k >> 32, k & 0xFFFFFFFF)] for r in range(n_r)] for k in chosen]
    items = []
    for k_i, k in enumerate(chosen):
        n, st = counts[:, k_i], starts[:, k_i]
        if exact_raw:
            raw_w1 = raw_pairwise_w1([ds[a : a + c] for a, c in zip(st, n, strict=True)])
        else:
            idx = st[:, None] + np.clip(
                np.ceil(p[None, :] * n[:, None]).astype(np.int64) - 1, 0, None
            )
            raw_w1 = pairwise_w1(ds[idx])
        items.append(
            (
                (k >> 32, k & 0xFFFFFFFF),
                _compare(raw_w1, pairwise_w1(quantile_matrix(recon[k_i], p)), 1.5),
            )
        )
    return _report(items)


def _compare(raw: np.ndarray, rec: np.ndarray, iqr_alpha: float) -> GroupFidelity:
    iu = np.triu_indices(raw.shape[0], 1)
    ok = np.isfinite(raw[iu]) & np.isfinite(rec[iu])
    rho = spearman(raw[iu][ok], rec[iu][ok])
    rf, cf = iqr_flags(raw, alpha=iqr_alpha), iqr_flags(rec, alpha=iqr_alpha)
    return GroupFidelity(raw.shape[0], rho, rf, cf, f1_score(cf, rf), raw, rec)


# -- the synthetic benchmark ------------------------------------------------------------------


@dataclass(frozen=True)
class KindRow:
    """Fidelity of one kernel kind on synthetic windows (issue 3, benchmark 3)."""

    kind: str
    n_groups: int  # (group, window) instances
    spearman_median: float
    spearman_p10: float
    raw_f1: float  # IQR detection on raw W1 against the injected slow ranks (micro F1)
    recon_f1: float  # the same on reconstructed W1
    flag_agreement: float  # mean F1 of recon flags vs raw flags


def evaluate_synthetic(
    *,
    config: KdeConfig = PAPER,
    n_ranks: int = 32,
    n_windows: int = 4,
    n_events: int = 30_000,
    n_slow: tuple[int, int] = (1, 3),
    slow_factor: tuple[float, float] = (1.5, 3.0),
    seed: int = 0,
    mix: synth.Mix | None = None,
    exact_raw: bool = True,
    probs: np.ndarray | None = None,
    rank_spread: float = 0.0,
) -> list[KindRow]:
    """Fidelity per kernel kind on synthetic windows with injected slow ranks.

    For each window, ``n_slow`` ranks (drawn in the range) get a slowdown factor drawn in
    ``slow_factor`` on every kernel; all ranks draw their events from the same
    :func:`~argus.streams.synth.default_mix`. Every (kernel, stream) group of every window
    is checked with :func:`check_group` and scored against the truth.

    ``rank_spread`` is the σ of a persistent per-rank speed factor ``exp(N(0, σ²))`` applied
    to every kernel of every rank (healthy GPUs differ by ~1-5% in speed: Sinha et al.,
    "Not All GPUs Are Created Equal", SC'22). With 0 the healthy ranks are i.i.d. and their
    pairwise distances are pure sampling noise, the hardest case for a rank correlation.

    Returns
    -------
    list of KindRow
        One row per kind in :data:`argus.streams.synth.KINDS` order, then ``"all"``.
    """
    mix = mix or synth.default_mix(seed)
    kinds = mix.kinds()
    rng = np.random.default_rng(np.random.SeedSequence([seed, 3]))
    speed = np.exp(rank_spread * rng.standard_normal(n_ranks))
    per_kind: dict[str, list[tuple[float, float, float, int, int, int, int, int, int]]] = (
        defaultdict(list)
    )
    for _w in range(n_windows):
        k_slow = int(rng.integers(n_slow[0], n_slow[1] + 1))
        slow = rng.choice(n_ranks, size=k_slow, replace=False)
        factors = {int(r): float(rng.uniform(*slow_factor)) for r in slow}
        per_rank = []
        for r in range(n_ranks):
            f = factors.get(r, 1.0) * float(speed[r])
            sd = {"*": f} if f != 1.0 else None
            _, idx, st, dur = synth.rank_window(rng, mix, n_events=n_events, slowdown=sd)
            gid = _mix_group_ids(mix, idx, st)
            many = summarize_many(gid, dur, config=config)
            order = np.argsort(gid, kind="stable")
            gsorted, dsorted = gid[order], dur[order]
            per_rank.append((many, gsorted, dsorted))
        truth = tuple(sorted(int(r) for r in slow))
        for g in range(mix.n_groups):
            raws, sums = [], []
            for many, gsorted, dsorted in per_rank:
                a, b = np.searchsorted(gsorted, [g, g + 1])
                raws.append(dsorted[a:b])
                hit = np.searchsorted(many.group_ids, g)
                if hit < many.n_groups and many.group_ids[hit] == g:
                    sums.append(_to_wire(many.summary(int(hit)), config.quantile_encoding))
                else:
                    sums.append(
                        Summary(
                            many.quantile_levels,
                            np.zeros(0),
                            np.zeros((0, many.quantile_levels.size)),
                            config.method,
                        )
                    )
            if any(s.n == 0 for s in sums):
                continue
            res = check_group(raws, sums, probs=probs, exact_raw=exact_raw)
            rt = _counts(res.raw_flags, truth)
            ct = _counts(res.recon_flags, truth)
            per_kind[str(kinds[g])].append((res.spearman, res.flag_f1, 0.0, *rt, *ct))
    rows = []
    for kind in (*synth.KINDS, "all"):
        items = (
            [v for k, vs in per_kind.items() for v in vs]
            if kind == "all"
            else per_kind.get(kind, [])
        )
        if not items:
            continue
        arr = np.array(items, dtype=np.float64)
        rho = arr[:, 0][np.isfinite(arr[:, 0])]
        rows.append(
            KindRow(
                kind=kind,
                n_groups=len(items),
                spearman_median=float(np.median(rho)) if rho.size else float("nan"),
                spearman_p10=float(np.percentile(rho, 10)) if rho.size else float("nan"),
                raw_f1=_micro_f1(arr[:, 3:6].sum(axis=0)),
                recon_f1=_micro_f1(arr[:, 6:9].sum(axis=0)),
                flag_agreement=float(arr[:, 1].mean()),
            )
        )
    return rows


def _mix_group_ids(mix: synth.Mix, name_idx: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Index of each event's group in ``mix.groups``."""
    a = mix.arrays
    key_of_group = a["name_idx"].astype(np.int64) * 65536 + a["stream"].astype(np.int64)
    order = np.argsort(key_of_group)
    key = name_idx.astype(np.int64) * 65536 + stream.astype(np.int64)
    out: np.ndarray = order[np.searchsorted(key_of_group[order], key)]
    return out


def _counts(pred: Sequence[int], truth: Sequence[int]) -> tuple[int, int, int]:
    p, t = set(pred), set(truth)
    return len(p & t), len(p - t), len(t - p)


def _micro_f1(tp_fp_fn: np.ndarray) -> float:
    tp, fp, fn = (float(v) for v in tp_fp_fn)
    return 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)


def judge_samples(
    samples: Iterable[tuple[str, Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]],
) -> None:
    """The live fidelity check of the compressor's sampled windows
    (:meth:`argus.streams.roles.compressor.Compressor.due_samples`: ``(job, raw batches,
    their summary records)``): :func:`check_batches` of each, its time and figures as the
    job's metrics."""
    for job, batches, recs in samples:
        t0 = time.perf_counter()
        rep = check_batches(batches, summaries=recs)
        metrics.DETECT_S.labels("fidelity").observe(time.perf_counter() - t0)
        if rep.n_groups:
            metrics.FIDELITY.labels(job).set(rep.spearman_median)
            metrics.FIDELITY_F1.labels(job).set(rep.flag_agreement)
