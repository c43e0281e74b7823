"""L2: straggler ranks and the bottleneck phase, per comparison group (paper §6.1).

For each phase of one comparison group's window (ranks x steps), every rank's duration is
summarised by its median over the window's steps; across the group's ranks the detector
computes the **CV** (is the phase imbalanced?) and a **robust z-score**
``z = (x - median) / (1.4826 * MAD)`` per rank (which rank?).

Collectives are read the way they behave (paper case 5): when a rank is late into a
collective, its peers wait inside it, so the late rank's collective looks *shorter*. Hence

* compute phases: a rank ``z >= z`` and ``x / median - 1 >= min_excess`` slower is a
  **straggler** (role ``compute``);
* collective phases (``stream_kind`` ``comm``/``p2p``): a rank ``z <= -z`` and
  ``min_excess`` shorter arrived late: it is named as a straggler (role ``late_arrival``);
  ranks markedly *longer* are its waiting peers, the **victims**: reported as evidence,
  never as culprits.

Every named rank also differs from the group median by at least ``min_abs_ms``. Groups of
two ranks have no robust spread: in a compute phase the slower one is named when the ratio
reaches ``pair_ratio``; collectives of two ranks are not judged (either could have waited).
Groups of one are not judged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from argus.detectors.config import L2Config
from argus.detectors.errors import DetectorInputError
from argus.detectors.findings import Finding
from argus.detectors.routing import COLLECTIVE_STREAM_KINDS

__all__ = ["GroupWindow", "PhaseStats", "detect", "phase_stats"]

_MAD_TO_SIGMA = 1.4826


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
    s = np.sort(d, axis=1)
    n = np.isfinite(s).sum(axis=1)
    rows = np.arange(d.shape[0])
    lo = np.maximum((n - 1) // 2, 0)
    hi = np.maximum(n // 2, 0)
    hi = np.minimum(hi, max(d.shape[1] - 1, 0))
    out = 0.5 * (s[rows, lo] + s[rows, hi]) if d.shape[1] else np.full(d.shape[0], np.nan)
    out = np.where(n > 0, out, np.nan)
    return np.asarray(out, dtype=np.float64)


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
    med = float(np.median(vv))
    mad = float(np.median(np.abs(vv - med)))
    mad = max(mad, cfg.mad_floor * abs(med), 1e-9)
    mean = float(vv.mean())
    cv = float(vv.std() / mean) if mean > 0 else 0.0
    z = (v - med) / (_MAD_TO_SIGMA * mad)
    excess = v / med - 1.0 if med > 0 else np.zeros_like(v)
    return PhaseStats(v, med, mad, cv, z, excess, int(vv.size))


def detect(win: GroupWindow, cfg: L2Config | None = None) -> list[Finding]:
    """L2 findings of one group window.

    Parameters
    ----------
    win : GroupWindow
    cfg : L2Config

    Returns
    -------
    list of Finding
        At most one ``straggler`` finding per phase (the ranks named in that phase);
        ``score`` is the largest |z| (or the pair ratio), ``baseline``/``observed`` are the
        group median and the worst named rank's median, ms. Evidence: ``role``
        (``compute`` | ``late_arrival``), ``cv``, ``z`` per named rank, ``excess``,
        ``victims`` (collectives), ``bottleneck`` (ranks for which this phase has the largest
        excess in ms among the group's phases).
    """
    cfg = cfg or L2Config()
    out: list[Finding] = []
    late_gate = cfg.min_abs_ms * 1e6
    if win.iter_ns is not None and np.isfinite(win.iter_ns).any():
        late_gate = max(late_gate, cfg.late_step_share * float(np.nanmedian(win.iter_ns)))
    per_rank_best: dict[int, tuple[float, str]] = {}
    pending: list[tuple[str, str, list[int], float, float, float, float, dict[str, str]]] = []
    for j, (phase, sk) in enumerate(zip(win.phases, win.stream_kinds, strict=True)):
        st = phase_stats(win.durations_ns[:, :, j], cfg)
        if st.n_valid < 2:
            continue
        collective = sk in COLLECTIVE_STREAM_KINDS
        v = st.values
        named: np.ndarray
        if st.n_valid == 2:
            if collective:
                continue  # two ranks cannot say who waited for whom
            idx = np.flatnonzero(np.isfinite(v))
            lo, hi = (idx[0], idx[1]) if v[idx[0]] <= v[idx[1]] else (idx[1], idx[0])
            ratio = v[hi] / max(v[lo], 1e-9)
            if ratio < cfg.pair_ratio or (v[hi] - v[lo]) < cfg.min_abs_ms * 1e6:
                continue
            named = np.array([hi])
            score, thr = float(ratio), cfg.pair_ratio
            victims = []
        else:
            if collective:
                if not cfg.late_arrival:
                    continue
                sel = (
                    (st.z <= -cfg.z) & (-st.excess >= cfg.min_excess) & (st.median - v >= late_gate)
                )
                vic = (st.z >= cfg.z) & (st.excess >= cfg.min_excess)
                victims = [int(r) for r in win.ranks[vic]]
            else:
                sel = (st.z >= cfg.z) & (st.excess >= cfg.min_excess)
                victims = []
            sel &= np.isfinite(st.z) & (np.abs(v - st.median) >= cfg.min_abs_ms * 1e6)
            named = np.flatnonzero(sel)
            if named.size == 0:
                continue
            score = float(np.max(np.abs(st.z[named])))
            thr = cfg.z
        ranks = [int(r) for r in win.ranks[named]]
        worst = named[np.argmax(np.abs(v[named] - st.median))]
        for i in named:
            gain = abs(float(v[i]) - st.median)
            r = int(win.ranks[i])
            if not collective and gain > per_rank_best.get(r, (-1.0, ""))[0]:
                per_rank_best[r] = (gain, phase)
        ev = {
            "role": "late_arrival" if collective else "compute",
            "stream_kind": sk,
            "cv": f"{st.cv:.4f}",
            "cv_threshold": f"{cfg.cv:.4f}",
            "imbalanced": str(st.cv >= cfg.cv).lower(),
            "z": json.dumps({str(int(win.ranks[i])): round(float(st.z[i]), 2) for i in named}),
            "excess": json.dumps(
                {str(int(win.ranks[i])): round(float(st.excess[i]), 3) for i in named}
            ),
            "n_ranks": str(st.n_valid),
            "n_steps": str(len(win.steps)),
        }
        if victims:
            ev["victims"] = json.dumps(victims[:64])
            ev["n_victims"] = str(len(victims))
        pending.append((phase, sk, ranks, score, thr, st.median, float(v[worst]), ev))
    for phase, _sk, ranks, score, thr, med, worst_v, ev in pending:
        bott = [r for r in ranks if per_rank_best.get(r, (0.0, ""))[1] == phase]
        ev = {**ev, "bottleneck": json.dumps(bott)}
        out.append(
            Finding(
                job=win.job,
                level="L2",
                kind="straggler",
                group_kind=win.group_kind,
                group_id=win.group_id,
                ranks=tuple(ranks),
                phase=phase,
                window_start_step=int(win.steps[0]) if len(win.steps) else 0,
                window_end_step=int(win.steps[-1]) if len(win.steps) else 0,
                window_start_ns=int(win.start_ns),
                window_end_ns=int(win.end_ns),
                score=score,
                threshold=thr,
                baseline=med / 1e6,
                observed=worst_v / 1e6,
                unit="ms",
                evidence=ev,
            )
        )
    return out
