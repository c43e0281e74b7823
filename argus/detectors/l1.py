"""L1: anomalous windows of a job's iteration-time series (paper §6.1).

Two pure detectors over a series of step times:

* :func:`spikes` - a sliding-window **ratio gate**: step ``i`` is a spike when its time is at
  least ``spike_ratio`` times the median of the ``window`` steps before it *and* (when they
  exist) the ``window`` steps after it. Spikes close together merge into one **jitter**
  window. Requiring both sides keeps the onset of a step regression from being typed as
  jitter.
* :func:`change_points` - **full-scan change-point** detection: binary segmentation by least
  squares on a running-median-smoothed series; a split is a **regression** when the level
  after is ``>= cp_min_ratio`` times the level before and the shift is
  ``>= cp_min_effect`` robust standard deviations.

:func:`detect` runs both and returns :class:`~argus.detectors.findings.Finding` objects.

Streaming use
-------------
The L1 agent keeps, per job, a bounded history of the last ``H`` steps (``H >= 2 * window
+ 1`` for spikes, a few hundred for change points; :class:`L1History` does this) and calls
:func:`detect` on it after each step or every few steps. Finding ids depend only on the job,
the kind and the window's steps, so the same spike is reported with the same id on every
call; the funnel deduplicates. A spike is confirmed by the steps after it, so with the
two-sided gate a spike is reported ``window`` steps late; pass ``two_sided=False`` to
report at once (the onset of a regression is then first reported as jitter).
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from argus.detectors.config import L1Config
from argus.detectors.findings import Finding
from argus.errors import DetectorInputError

__all__ = ["ChangePoint", "L1History", "Spike", "change_points", "detect", "spikes"]

_MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Spike:
    """A jitter window over series indices ``[start, end]`` (inclusive)."""

    start: int
    end: int
    baseline: float  # median of the trailing window at the peak, series units
    peak: float  # largest value in the window, series units
    ratio: float  # peak / baseline
    n_spikes: int  # spiking steps inside the window


@dataclass(frozen=True)
class ChangePoint:
    """A persistent level shift: the level changes at index ``index`` and holds to ``end``."""

    index: int
    end: int  # inclusive
    before: float  # median before, series units
    after: float  # median after, series units
    ratio: float  # after / before
    effect: float  # |after - before| / robust sigma


def _validate(x: npt.ArrayLike) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise DetectorInputError(
            f"L1 series must be 1-D (n_steps,), got shape {arr.shape}; pass one series at a time"
        )
    bad = np.isfinite(arr) & (arr <= 0)
    if bad.any():
        raise DetectorInputError(
            f"L1 series has {int(bad.sum())} non-positive step times (first at index "
            f"{int(np.argmax(bad))}); step times must be > 0 (use NaN for missing steps)"
        )
    return arr


def _nanmedian_rows(a: np.ndarray) -> np.ndarray:
    out = np.full(a.shape[0], np.nan)
    ok = np.isfinite(a).any(axis=1)
    if ok.any():
        out[ok] = np.nanmedian(a[ok], axis=1)
    return out


def spikes(x: npt.ArrayLike, cfg: L1Config | None = None, *, two_sided: bool = True) -> list[Spike]:
    """Jitter windows of a step-time series.

    Parameters
    ----------
    x : (n_steps,) array of float
        Step times (any unit, > 0); NaN marks a missing step (never a spike, never in a
        baseline).
    cfg : L1Config
    two_sided : bool
        Also require the ratio against the median of the following ``window`` steps.

    Returns
    -------
    list of Spike
        In series order; indices into ``x``.
    """
    cfg = cfg or L1Config()
    a = _validate(x)
    n, w = a.size, cfg.window
    if n <= cfg.min_history or n <= w:
        return []
    before = np.full(n, np.nan)
    before[w:] = _nanmedian_rows(sliding_window_view(a, w)[:-1])
    ratio = a / before
    hit = np.isfinite(ratio) & (ratio >= cfg.spike_ratio)
    if two_sided:
        after = np.full(n, np.nan)
        after[: n - w] = _nanmedian_rows(sliding_window_view(a, w)[1:])
        # fewer than `window` steps after: use what there is (at least one)
        for i in range(max(0, n - w), n - 1):
            tail = a[i + 1 :]
            if np.isfinite(tail).any():
                after[i] = float(np.nanmedian(tail))
        ratio_after = a / after
        hit &= ~(np.isfinite(ratio_after) & (ratio_after < cfg.spike_ratio))
    idx = np.flatnonzero(hit)
    out: list[Spike] = []
    if idx.size == 0:
        return out
    groups: list[list[int]] = [[int(idx[0])]]
    for i in idx[1:]:
        if i - groups[-1][-1] <= cfg.merge_gap + 1:
            groups[-1].append(int(i))
        else:
            groups.append([int(i)])
    for g in groups:
        peak_i = g[int(np.argmax(a[g]))]
        out.append(
            Spike(
                start=g[0],
                end=g[-1],
                baseline=float(before[peak_i]),
                peak=float(a[peak_i]),
                ratio=float(ratio[peak_i]),
                n_spikes=len(g),
            )
        )
    return out


def _running_median(a: np.ndarray, k: int) -> np.ndarray:
    if k <= 1 or a.size < k:
        return a.copy()
    pad = k // 2
    padded = np.concatenate([np.full(pad, a[0]), a, np.full(k - 1 - pad, a[-1])])
    return np.median(sliding_window_view(padded, k), axis=1)


def _best_split(y: np.ndarray, m: int) -> tuple[int, float]:
    """Least-squares best split index k (left = y[:k]) with >= m points each side."""
    n = y.size
    c1 = np.cumsum(y)
    c2 = np.cumsum(y * y)
    k = np.arange(m, n - m + 1)
    left_n = k
    right_n = n - k
    s1l = c1[k - 1]
    s2l = c2[k - 1]
    s1r = c1[-1] - s1l
    s2r = c2[-1] - s2l
    sse = (s2l - s1l**2 / left_n) + (s2r - s1r**2 / right_n)
    j = int(np.argmin(sse))
    return int(k[j]), float(sse[j])


def change_points(
    x: npt.ArrayLike, cfg: L1Config | None = None, *, max_points: int = 8
) -> list[ChangePoint]:
    """Persistent upward level shifts (regressions) of a step-time series.

    Binary segmentation: split the smoothed series where the two sides' squared error is
    least, keep the split when it passes both gates (ratio and effect, measured on the raw
    values by medians and MAD), recurse into both sides.

    Parameters
    ----------
    x : (n_steps,) array of float
        Step times (> 0); NaN steps are dropped before the search.
    cfg : L1Config
    max_points : int
        At most this many change points are returned.

    Returns
    -------
    list of ChangePoint
        Upward shifts only, sorted by index (indices into ``x``).
    """
    cfg = cfg or L1Config()
    a = _validate(x)
    valid = np.flatnonzero(np.isfinite(a))
    raw = a[valid]
    m = cfg.cp_min_segment
    if raw.size < max(2 * m, cfg.min_history):
        return []
    smooth = _running_median(raw, cfg.smooth)
    found: list[tuple[int, int, float, float, float]] = []  # (split, end, before, after, effect)

    def rec(lo: int, hi: int) -> None:  # half-open [lo, hi) of raw
        if hi - lo < 2 * m or len(found) >= max_points:
            return
        k, _ = _best_split(smooth[lo:hi], m)
        split = lo + k
        left, right = raw[lo:split], raw[split:hi]
        before, after = float(np.median(left)), float(np.median(right))
        # noise scale from first differences: blind to level shifts and slow drift
        diff = np.diff(raw[lo:hi])
        sigma = _MAD_TO_SIGMA * float(np.median(np.abs(diff - np.median(diff)))) / np.sqrt(2.0)
        sigma = max(sigma, 1e-3 * min(before, after))
        effect = abs(after - before) / sigma
        ratio = max(after, before) / max(min(after, before), 1e-300)
        if effect < cfg.cp_min_effect or ratio < cfg.cp_min_ratio:
            return
        found.append((split, hi - 1, before, after, effect))
        rec(lo, split)
        rec(split, hi)

    rec(0, raw.size)
    found.sort()
    out: list[ChangePoint] = []
    for i, (split, end, before, after, effect) in enumerate(found):
        if after <= before:
            continue
        nxt = found[i + 1][0] - 1 if i + 1 < len(found) else end
        end_i = min(end, nxt)
        out.append(
            ChangePoint(
                index=int(valid[split]),
                end=int(valid[end_i]),
                before=before,
                after=after,
                ratio=after / before,
                effect=effect,
            )
        )
    return out


def detect(
    steps: npt.ArrayLike,
    iter_ns: npt.ArrayLike,
    *,
    job: str,
    cfg: L1Config | None = None,
    start_ns: npt.ArrayLike | None = None,
    end_ns: npt.ArrayLike | None = None,
    ranks: tuple[int, ...] = (),
    two_sided: bool = True,
) -> list[Finding]:
    """L1 findings of one iteration-time series.

    Parameters
    ----------
    steps : (n_steps,) array of int
        Step numbers, increasing.
    iter_ns : (n_steps,) array of float
        Iteration time per step, ns (the job series: max over ranks; NaN: missing).
    job : str
    cfg : L1Config
    start_ns, end_ns : (n_steps,) arrays of int, optional
        Event-time span of each step (ns since epoch), for the findings' windows: a window
        spans the earliest start and the latest end of its steps (the steps are in step
        order, not event-time order: a window never ends before it starts).
    ranks : tuple of int
        Ranks the series belongs to (empty for the job series).
    two_sided : bool
        See :func:`spikes`.

    Returns
    -------
    list of Finding
        ``jitter`` and ``regression`` findings of level L1, group ``job/all``; ``baseline``
        and ``observed`` in ms; ``score`` is the ratio.
    """
    cfg = cfg or L1Config()
    st = np.asarray(steps, dtype=np.int64)
    x = _validate(iter_ns)
    if st.shape != x.shape:
        raise DetectorInputError(f"steps {st.shape} and iter_ns {x.shape} differ in shape")
    if st.size > 1 and np.any(np.diff(st) <= 0):
        raise DetectorInputError("steps must be strictly increasing (sort and deduplicate first)")
    s_ns = np.asarray(start_ns if start_ns is not None else np.zeros_like(st), dtype=np.int64)
    e_ns = np.asarray(end_ns if end_ns is not None else np.zeros_like(st), dtype=np.int64)
    out: list[Finding] = []
    cps = change_points(x, cfg)
    for cp in cps:
        out.append(
            Finding(
                job=job,
                level="L1",
                kind="regression",
                group_kind="job",
                group_id="all",
                ranks=ranks,
                window_start_step=int(st[cp.index]),
                window_end_step=int(st[cp.end]),
                window_start_ns=int(s_ns[cp.index : cp.end + 1].min()),
                window_end_ns=int(e_ns[cp.index : cp.end + 1].max()),
                score=cp.ratio,
                threshold=cfg.cp_min_ratio,
                baseline=cp.before / 1e6,
                observed=cp.after / 1e6,
                unit="ms",
                evidence={
                    "effect_sigma": f"{cp.effect:.2f}",
                    "excess_ms": f"{(cp.after - cp.before) / 1e6:.3f}",
                },
            )
        )
    for sp in spikes(x, cfg, two_sided=two_sided):
        out.append(
            Finding(
                job=job,
                level="L1",
                kind="jitter",
                group_kind="job",
                group_id="all",
                ranks=ranks,
                window_start_step=int(st[sp.start]),
                window_end_step=int(st[sp.end]),
                window_start_ns=int(s_ns[sp.start : sp.end + 1].min()),
                window_end_ns=int(e_ns[sp.start : sp.end + 1].max()),
                score=sp.ratio,
                threshold=cfg.spike_ratio,
                baseline=sp.baseline / 1e6,
                observed=sp.peak / 1e6,
                unit="ms",
                evidence={
                    "n_spikes": str(sp.n_spikes),
                    "excess_ms": f"{(sp.peak - sp.baseline) / 1e6:.3f}",
                    "spike_steps": json.dumps(
                        [
                            int(s)
                            for s in st[sp.start : sp.end + 1][
                                (x[sp.start : sp.end + 1] >= cfg.spike_ratio * sp.baseline)
                            ]
                        ]
                    ),
                },
            )
        )
    out.sort(key=lambda f: (f.window_start_step, f.kind))
    return out


@dataclass
class L1History:
    """Bounded per-job history for a streaming L1 agent (no I/O; the agent owns it).

    Keeps the last ``capacity`` steps of ``(step, iter_ns, start_ns, end_ns)``; an update of
    a step already held (a late rank) keeps the max iteration time and the widest span.
    """

    capacity: int = 512
    _rows: deque[tuple[int, float, int, int]] = field(default_factory=deque)

    def push(self, step: int, iter_ns: float, start_ns: int = 0, end_ns: int = 0) -> None:
        """Add (or update) one step. Steps older than the oldest held are ignored."""
        rows = self._rows
        if rows and step <= rows[-1][0]:
            for i in range(len(rows) - 1, -1, -1):
                s, it, a, b = rows[i]
                if s == step:
                    rows[i] = (s, max(it, iter_ns), min(a, start_ns), max(b, end_ns))
                    return
                if s < step:
                    rows.insert(i + 1, (step, iter_ns, start_ns, end_ns))
                    break
            else:
                return
        else:
            rows.append((step, iter_ns, start_ns, end_ns))
        while len(rows) > self.capacity:
            rows.popleft()

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(steps, iter_ns, start_ns, end_ns)`` arrays, oldest first."""
        if not self._rows:
            z = np.zeros(0, dtype=np.int64)
            return z, np.zeros(0), z, z
        s, it, a, b = zip(*self._rows, strict=True)
        return (
            np.array(s, np.int64),
            np.array(it, np.float64),
            np.array(a, np.int64),
            np.array(b, np.int64),
        )

    def __len__(self) -> int:
        return len(self._rows)
