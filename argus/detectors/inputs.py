"""Adapters: ``step_record`` dicts (``step_record.avsc``) -> detector arrays.

Small, pure and shared by the stream agents, replay and ``argus diagnose``:

* :func:`job_series` - a job's iteration-time series (L1): max over ranks per step.
* :func:`route_record` - the (group kind, group id, phases) pieces of one record, computed
  from its coords alone (the stream re-keys by these).
* :func:`group_windows` - records of a window -> one :class:`~argus.detectors.l2.GroupWindow`
  per comparison group (L2); :func:`merge_group_windows` joins windows of disjoint steps.

Phases with the same name inside one step of one rank (e.g. one per micro-batch) are summed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from argus.detectors.l2 import GroupWindow
from argus.errors import DetectorInputError
from argus.routing import Routing

__all__ = [
    "JobSeries",
    "group_windows",
    "job_series",
    "merge_group_windows",
    "nested_waits",
    "route_record",
    "validate_step_record",
]


@dataclass(frozen=True)
class JobSeries:
    """A job's iteration-time series (L1 input).

    Attributes
    ----------
    job : str
    steps : (S,) int64 array, increasing
    iter_ns : (S,) float64 array
        Max over the ranks that reported the step of ``end_ns - start_ns``, ns.
    start_ns, end_ns : (S,) int64 arrays
        Earliest start and latest end over ranks, ns since epoch.
    n_ranks : (S,) int64 array
        Ranks that reported each step.
    per_rank : (R, S) float64 array
        Iteration time per rank, ns; NaN where a rank has no record for the step.
    ranks : (R,) int64 array
    """

    job: str
    steps: np.ndarray
    iter_ns: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    n_ranks: np.ndarray
    per_rank: np.ndarray
    ranks: np.ndarray


def validate_step_record(rec: Mapping[str, Any]) -> None:
    """Raise :class:`DetectorInputError` naming the first problem of a step record."""
    for key in ("job", "rank", "step", "start_ns", "end_ns", "phases"):
        if key not in rec:
            raise DetectorInputError(f"step_record lacks field {key!r}")
    if rec["end_ns"] < rec["start_ns"]:
        raise DetectorInputError(
            f"step_record {rec['job']}/{rec['rank']} step {rec['step']}: end_ns < start_ns"
        )


def job_series(records: Iterable[Mapping[str, Any]], *, job: str | None = None) -> JobSeries:
    """Iteration-time series of one job from its step records.

    Parameters
    ----------
    records : iterable of step_record dicts
        Any order; records of other jobs are rejected unless ``job`` selects one.
    job : str, optional
        Keep only this job's records.

    Raises
    ------
    DetectorInputError
        No records, several jobs without ``job``, or a malformed record.
    """
    per: dict[tuple[int, int], tuple[int, int]] = {}
    jobs: set[str] = set()
    for rec in records:
        if job is not None and rec.get("job") != job:
            continue
        validate_step_record(rec)
        jobs.add(rec["job"])
        key = (int(rec["step"]), int(rec["rank"]))
        s, e = int(rec["start_ns"]), int(rec["end_ns"])
        if key in per:  # duplicate delivery: keep the widest span
            s0, e0 = per[key]
            s, e = min(s, s0), max(e, e0)
        per[key] = (s, e)
    if not per:
        raise DetectorInputError("no step records" + (f" for job {job!r}" if job else ""))
    if len(jobs) > 1:
        raise DetectorInputError(f"records of several jobs {sorted(jobs)}; pass job=")
    steps = np.array(sorted({k[0] for k in per}), dtype=np.int64)
    ranks = np.array(sorted({k[1] for k in per}), dtype=np.int64)
    si = {int(s): i for i, s in enumerate(steps)}
    ri = {int(r): i for i, r in enumerate(ranks)}
    per_rank = np.full((ranks.size, steps.size), np.nan)
    start = np.full(steps.size, np.iinfo(np.int64).max, dtype=np.int64)
    end = np.zeros(steps.size, dtype=np.int64)
    for (st, rk), (s, e) in per.items():
        i, j = ri[rk], si[st]
        per_rank[i, j] = e - s
        start[j] = min(start[j], s)
        end[j] = max(end[j], e)
    return JobSeries(
        job=next(iter(jobs)),
        steps=steps,
        iter_ns=np.nanmax(per_rank, axis=0),
        start_ns=start,
        end_ns=end,
        n_ranks=np.isfinite(per_rank).sum(axis=0).astype(np.int64),
        per_rank=per_rank,
        ranks=ranks,
    )


def route_record(
    rec: Mapping[str, Any], routing: Routing | None = None
) -> list[tuple[str, str, list[Mapping[str, Any]]]]:
    """Split one step record's phases by comparison group.

    Returns
    -------
    list of (group_kind, group_id, phases)
        One entry per group the record's phases go to, computed from ``rec["coords"]``
        alone; ``phases`` are the record's phase dicts routed there.
    """
    routing = routing or Routing.default()
    coords = rec.get("coords") or {}
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for ph in rec.get("phases", []):
        kind, gid = routing.group_of(coords, ph["name"], ph.get("stream_kind", "compute"))
        out.setdefault((kind, gid), []).append(ph)
    return [(k, g, p) for (k, g), p in out.items()]


def nested_waits(phases: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """``{id(phase): ns}`` of p2p time nested inside each compute phase of one record.

    The overlap of every p2p phase's ``[start, start + duration)`` with the compute phase's
    span is subtracted. Overlapped collectives on comm streams are not
    subtracted: they run beside the compute, not inside it.
    """
    waits = [
        (int(p["start_ns"]), int(p["start_ns"]) + int(p["duration_ns"]))
        for p in phases
        if p.get("stream_kind") == "p2p"
    ]
    out: dict[int, float] = {}
    if not waits:
        return out
    for p in phases:
        if p.get("stream_kind", "compute") != "compute":
            continue
        a, b = int(p["start_ns"]), int(p["start_ns"]) + int(p["duration_ns"])
        tot = sum(max(0, min(e, b) - max(s, a)) for s, e in waits)
        if tot:
            out[id(p)] = float(min(tot, b - a))
    return out


def group_windows(
    records: Iterable[Mapping[str, Any]],
    routing: Routing | None = None,
    *,
    job: str | None = None,
    kinds: Sequence[str] | None = None,
    self_time: bool = True,
) -> list[GroupWindow]:
    """L2 inputs: one :class:`GroupWindow` per comparison group seen in ``records``.

    Parameters
    ----------
    records : iterable of step_record dicts
        One window of steps (any order, several ranks and groups).
    routing : Routing
    job : str, optional
        Keep only this job (else all records must be of one job).
    kinds : sequence of str, optional
        Keep only these group kinds.
    self_time : bool
        Judge compute phases on their *self time*: their duration minus the p2p phases
        nested inside them (pipeline receive waits block the compute stream, so a stage
        waiting for a slow downstream stage would otherwise look slow itself, paper case 3).

    Returns
    -------
    list of GroupWindow
        Sorted by (group kind, group id); durations are NaN where a rank lacks the step or
        the phase.
    """
    routing = routing or Routing.default()
    # (kind, gid) -> {(rank, step, phase): ns}; phase meta
    cells: dict[tuple[str, str], dict[tuple[int, int, str], float]] = defaultdict(dict)
    phase_kind: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
    spans: dict[tuple[str, str], list[int]] = {}
    iters: dict[tuple[str, str], dict[tuple[int, int], float]] = defaultdict(dict)
    jobs: set[str] = set()
    for rec in records:
        if job is not None and rec.get("job") != job:
            continue
        validate_step_record(rec)
        jobs.add(rec["job"])
        rk, st = int(rec["rank"]), int(rec["step"])
        nested = nested_waits(rec["phases"]) if self_time else {}
        for kind, gid, phases in route_record(rec, routing):
            if kinds is not None and kind not in kinds:
                continue
            key = (kind, gid)
            c = cells[key]
            for ph in phases:
                dur = ph.get("duration_ns")
                if dur is None or dur < 0:
                    raise DetectorInputError(
                        f"step_record {rec['job']}/{rk} step {st}: phase {ph.get('name')!r} has "
                        f"duration_ns {dur!r}; must be >= 0"
                    )
                ck = (rk, st, ph["name"])
                c[ck] = c.get(ck, 0.0) + float(dur) - nested.get(id(ph), 0.0)
                phase_kind[key].setdefault(ph["name"], ph.get("stream_kind", "compute"))
            iters[key][(rk, st)] = float(rec["end_ns"] - rec["start_ns"])
            sp = spans.setdefault(key, [int(rec["start_ns"]), int(rec["end_ns"])])
            sp[0] = min(sp[0], int(rec["start_ns"]))
            sp[1] = max(sp[1], int(rec["end_ns"]))
    if len(jobs) > 1:
        raise DetectorInputError(f"records of several jobs {sorted(jobs)}; pass job=")
    out: list[GroupWindow] = []
    the_job = next(iter(jobs)) if jobs else (job or "")
    for key in sorted(cells):
        c = cells[key]
        ranks = np.array(sorted({k[0] for k in c}), dtype=np.int64)
        steps = np.array(sorted({k[1] for k in c}), dtype=np.int64)
        names = tuple(sorted(phase_kind[key]))
        ri = {int(r): i for i, r in enumerate(ranks)}
        si = {int(s): i for i, s in enumerate(steps)}
        pi = {p: i for i, p in enumerate(names)}
        d = np.full((ranks.size, steps.size, len(names)), np.nan)
        for (rk, st, name), ns in c.items():
            d[ri[rk], si[st], pi[name]] = ns
        it = np.full((ranks.size, steps.size), np.nan)
        for (rk, st), ns in iters[key].items():
            it[ri[rk], si[st]] = ns
        out.append(
            GroupWindow(
                job=the_job,
                group_kind=key[0],
                group_id=key[1],
                ranks=ranks,
                steps=steps,
                phases=names,
                stream_kinds=tuple(phase_kind[key][p] for p in names),
                durations_ns=d,
                start_ns=spans[key][0],
                end_ns=spans[key][1],
                iter_ns=it,
            )
        )
    return out


def merge_group_windows(parts: Iterable[GroupWindow]) -> list[GroupWindow]:
    """Join windows of the same comparison groups over disjoint cells into one per group.

    The stream agents compute :func:`group_windows` once per rank block and closed step and
    join the blocks' and the last few steps' results, instead of rebuilding every group from
    all records at every step: ``merge_group_windows(group_windows(a) + group_windows(b)) ==
    group_windows(a + b)`` when ``a`` and ``b`` hold different steps or different ranks.

    Parameters
    ----------
    parts : iterable of GroupWindow
        Of one job; the parts of a (group kind, group id) cover disjoint (rank, step) cells
        (each part covers its ranks x its steps).

    Returns
    -------
    list of GroupWindow
        Sorted by (group kind, group id); ranks, steps and phases are the sorted unions, NaN
        where a part had no value.

    Raises
    ------
    DetectorInputError
        Parts of several jobs, or two parts of one group covering the same (rank, step).
    """
    by_group: dict[tuple[str, str], list[GroupWindow]] = defaultdict(list)
    jobs = set()
    for w in parts:
        by_group[(w.group_kind, w.group_id)].append(w)
        jobs.add(w.job)
    if len(jobs) > 1:
        raise DetectorInputError(f"windows of several jobs {sorted(jobs)}")
    out = []
    for key in sorted(by_group):
        ws = by_group[key]
        if len(ws) == 1:
            out.append(ws[0])
            continue
        out.append(_stacked(ws, 1) or _stacked(ws, 0) or _merged(ws))
    return out


def _share_error(w: GroupWindow) -> DetectorInputError:
    return DetectorInputError(
        f"group {w.group_kind}/{w.group_id}: parts share steps of the same ranks"
    )


def _stacked(ws: list[GroupWindow], axis: int) -> GroupWindow | None:
    """The fast join of parts with the same phases and the same ranks (``axis`` 1: the
    steps differ, the L2 sliding window) or the same steps (``axis`` 0: the ranks differ,
    rank blocks of one step); None when the parts are not of that shape."""
    w0 = ws[0]
    same = [w.ranks for w in ws] if axis == 1 else [w.steps for w in ws]
    if any(
        w.phases != w0.phases or w.stream_kinds != w0.stream_kinds or not np.array_equal(a, same[0])
        for w, a in zip(ws, same, strict=True)
    ):
        return None
    idx = np.concatenate([w.steps if axis == 1 else w.ranks for w in ws])
    order = np.argsort(idx, kind="stable")
    idx = idx[order]
    if idx.size > 1 and not np.all(np.diff(idx) > 0):
        raise _share_error(w0)
    d = np.concatenate([w.durations_ns for w in ws], axis=axis).take(order, axis=axis)
    it = np.concatenate(
        [
            w.iter_ns if w.iter_ns is not None else np.full(w.durations_ns.shape[:2], np.nan)
            for w in ws
        ],
        axis=axis,
    ).take(order, axis=axis)
    return GroupWindow(
        job=w0.job,
        group_kind=w0.group_kind,
        group_id=w0.group_id,
        ranks=w0.ranks if axis == 1 else idx,
        steps=idx if axis == 1 else w0.steps,
        phases=w0.phases,
        stream_kinds=w0.stream_kinds,
        durations_ns=d,
        start_ns=min(w.start_ns for w in ws),
        end_ns=max(w.end_ns for w in ws),
        iter_ns=it,
    )


def _merged(ws: list[GroupWindow]) -> GroupWindow:
    """The general join: sorted unions of ranks, steps and phases, NaN where no part had a
    value."""
    steps = np.unique(np.concatenate([w.steps for w in ws]))
    ranks = np.unique(np.concatenate([w.ranks for w in ws]))
    kind_of: dict[str, str] = {}
    for w in reversed(ws):  # the first part's kind wins, as in group_windows
        kind_of.update(zip(w.phases, w.stream_kinds, strict=True))
    names = tuple(sorted(kind_of))
    col = {p: i for i, p in enumerate(names)}
    d = np.full((ranks.size, steps.size, len(names)), np.nan)
    it = np.full((ranks.size, steps.size), np.nan)
    covered = np.zeros((ranks.size, steps.size), dtype=bool)
    for w in ws:
        ri = np.searchsorted(ranks, w.ranks)[:, None]
        si = np.searchsorted(steps, w.steps)[None, :]
        if covered[ri, si].any():
            raise _share_error(w)
        covered[ri, si] = True
        pi = np.array([col[p] for p in w.phases], dtype=np.int64)
        d[ri[:, :, None], si[:, :, None], pi[None, None, :]] = w.durations_ns
        if w.iter_ns is not None:
            it[ri, si] = w.iter_ns
    w0 = ws[0]
    return GroupWindow(
        job=w0.job,
        group_kind=w0.group_kind,
        group_id=w0.group_id,
        ranks=ranks,
        steps=steps,
        phases=names,
        stream_kinds=tuple(kind_of[p] for p in names),
        durations_ns=d,
        start_ns=min(w.start_ns for w in ws),
        end_ns=max(w.end_ns for w in ws),
        iter_ns=it,
    )
