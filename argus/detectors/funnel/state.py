"""The funnel's state machine: ``(state, findings of the next window) -> (state, output)``.

Counts how many consecutive windows each culprit repeated (**persistence**), computes a
**confidence**, and emits ``alert`` records: ``trigger`` when a culprit's confidence first
reaches ``trigger_confidence`` or its levels or severity change, ``resolve`` after
``resolve_after`` windows without it (see the package notes).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from argus.detectors.config import FunnelConfig
from argus.detectors.findings import Finding
from argus.detectors.funnel.join import (
    Culprit,
    _compute_ranks,
    _coords,
    _rank_coords,
    _reachable,
    _waiting,
    join,
)
from argus.detectors.funnel.render import MAX_IDS, Verdict, severity
from argus.routing import DEFAULT_GROUPS

__all__ = ["CulpritState", "FunnelOutput", "FunnelState", "confidence_of", "step"]


def confidence_of(findings: Sequence[Finding], persistence: int, cfg: FunnelConfig) -> float:
    """Confidence 0..1 of a culprit (see the module notes)."""
    best: dict[str, float] = {}
    for f in findings:
        w = float(cfg.level_weight.get(f.level, 0.3))
        m = max(f.margin, 1.0)
        c = w + (1.0 - w) * 0.5 * (1.0 - 1.0 / m)
        best[f.level] = max(best.get(f.level, 0.0), c)
    miss = 1.0
    for c in best.values():
        miss *= 1.0 - c
    miss = miss ** (1.0 + (max(persistence, 1) - 1) / 2.0)
    return float(min(1.0, max(0.0, 1.0 - miss)))


@dataclass(frozen=True)
class CulpritState:
    """What the funnel remembers about one culprit between windows."""

    first_seen_ns: int
    last_seen_ns: int
    last_window: int
    persistence: int
    confidence: float
    active: bool  # a trigger was emitted and not resolved
    anomaly_ids: tuple[str, ...]
    signature: str  # levels and severity the alert's triggers reached (:func:`_raise_to`)
    alert: Mapping[str, Any] = field(default_factory=dict)  # last trigger (for the resolve)
    groups: tuple[str, ...] = ()  # comparison groups of a compute straggler's ranks, else ()


@dataclass(frozen=True)
class FunnelState:
    """Funnel state of one job: a window counter, the open culprits by dedup key, and the
    one-off events (step-time spikes, bursts: :func:`_recurring`) of the last
    :data:`ONE_OFF_WINDOWS` windows by ``job/group_kind/group_id/rank/phase``: ``(window,
    step)``."""

    window: int = 0
    culprits: Mapping[str, CulpritState] = field(default_factory=dict)
    one_offs: Mapping[str, tuple[tuple[int, int], ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "culprits": {
                k: {
                    **c.__dict__,
                    "anomaly_ids": list(c.anomaly_ids),
                    "alert": dict(c.alert),
                    "groups": list(c.groups),
                }
                for k, c in self.culprits.items()
            },
            "one_offs": {k: [list(e) for e in v] for k, v in self.one_offs.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FunnelState:
        cs = {
            k: CulpritState(
                **{
                    **v,
                    "anomaly_ids": tuple(v["anomaly_ids"]),
                    "groups": tuple(v.get("groups", ())),
                }
            )
            for k, v in d.get("culprits", {}).items()
        }
        offs = {
            k: tuple((int(e[0]), int(e[1])) for e in v) for k, v in d.get("one_offs", {}).items()
        }
        return cls(window=int(d.get("window", 0)), culprits=cs, one_offs=offs)


@dataclass(frozen=True)
class FunnelOutput:
    """What one funnel step produced."""

    verdicts: list[Verdict]
    alerts: list[dict[str, Any]]


def step(
    state: FunnelState,
    findings: Sequence[Finding],
    cfg: FunnelConfig | None = None,
    *,
    groups: Mapping[str, Sequence[str]] = DEFAULT_GROUPS,
    coords: Mapping[int, Mapping[str, int]] | None = None,
) -> tuple[FunnelState, FunnelOutput]:
    """Advance the funnel by one window.

    Parameters
    ----------
    state : FunnelState
        The state returned by the previous call (``FunnelState()`` at start).
    findings : sequence of Finding
        All findings of the next window (may be empty: a quiet window still counts, so that
        persistence resets and alerts resolve).
    cfg : FunnelConfig
    groups : mapping
        Group kind -> the dimensions it varies: the routing's (``Routing.groups``), so a
        custom ``[detectors.routing.groups]`` kind makes its ranks peers (victim rule).
    coords : mapping, optional
        Rank -> ``{dim: index}`` where the caller knows them (see :func:`join`).

    Returns
    -------
    (FunnelState, FunnelOutput)
        The new state and this window's verdicts and alert records.
    """
    cfg = cfg or FunnelConfig()
    w = state.window + 1
    culprits = dict(state.culprits)
    verdicts: list[Verdict] = []
    alerts: list[dict[str, Any]] = []
    seen: set[str] = set()
    offs = {k: {e for e in v if e[0] > w - ONE_OFF_WINDOWS} for k, v in state.one_offs.items()}
    culprits_now = join(_recurring(findings, offs, w), groups, coords)
    # stragglers of this window and the previous one (a window edge may split a straggler
    # from its victims): waiting reachable from them (:func:`_reachable`) does not page
    rank_coords = _rank_coords(findings, coords)
    straggling = [
        rank_coords.get(r, {}) for c in culprits_now for r in sorted(_compute_ranks(c.findings))
    ]
    straggling += [
        _coords(cs.groups)
        for cs in state.culprits.values()
        if cs.groups and cs.last_window >= w - 1
    ]
    # ranks of a compute straggler whose page is open: one missed in a window is still
    # slow, and its own late arrivals are its symptom, not a culprit of their own
    paged = {r for k, cs in state.culprits.items() if cs.groups and cs.active for r in _ranks(k)}
    # a rank's run of windows, whatever its phase: a straggler's bottleneck may move between
    # phases of similar excess (a nested phase and the one around it, forward and mlp) from
    # one window to the next, and it is the same straggler
    runs: dict[str, int] = {}
    for k, cs in state.culprits.items():
        if cs.last_window == w - 1:
            runs[_ranks_key(k)] = max(runs.get(_ranks_key(k), 0), cs.persistence)
    for c in culprits_now:
        key = c.dedup_key
        if key in seen:
            continue
        seen.add(key)
        prev = culprits.get(key)
        pers = prev.persistence + 1 if prev is not None and prev.last_window == w - 1 else 1
        if c.ranks:
            pers = max(pers, runs.get(_ranks_key(key), 0) + 1)
        conf = confidence_of(c.findings, pers, cfg)
        first = prev.first_seen_ns if prev is not None else c.window_start_ns
        v = Verdict(culprit=c, persistence=pers, confidence=conf, first_seen_ns=first)
        verdicts.append(v)
        ids = tuple(
            dict.fromkeys([*(prev.anomaly_ids if prev else ()), *(f.id for f in c.findings)])
        )[-MAX_IDS:]
        active = prev.active if prev is not None else False
        sig = prev.signature if prev is not None else ""
        alert_rec: Mapping[str, Any] = prev.alert if prev is not None else {}
        if (
            conf >= cfg.trigger_confidence
            and not _waiting_only(c)
            and not _shared_spikes_only(c)
            and not _explained_victim(c, straggling, groups, rank_coords, paged)
            and (
                pers >= cfg.l3_only_persistence
                or not (_l3_only(c) or _pair_only(c) or _job_regression_only(c))
            )
            and (
                not _job_regression_only(c)
                or c.window_end_ns - first >= cfg.job_regression_min_s * 1e9
            )
        ):
            new_sig = _raise_to(sig, v)
            if not active or new_sig != sig:
                rec = v.to_alert("trigger")
                rec["anomaly_ids"] = list(ids)
                alerts.append(rec)
                active, sig, alert_rec = True, new_sig, rec
        culprits[key] = CulpritState(
            first_seen_ns=first,
            last_seen_ns=c.window_end_ns,
            last_window=w,
            persistence=pers,
            confidence=conf,
            active=active,
            anomaly_ids=ids,
            signature=sig,
            alert=alert_rec,
            groups=_straggler_groups(c, rank_coords),
        )
    for key, cs in list(culprits.items()):
        if key in seen:
            continue
        if w - cs.last_window >= cfg.resolve_after:
            if cs.active and cs.alert:
                rec = dict(cs.alert)
                rec["action"] = "resolve"
                rec["summary"] = f"resolved: {rec.get('summary', key)}"
                alerts.append(rec)
            del culprits[key]
    kept = {k: tuple(sorted(v)[-MAX_ONE_OFFS:]) for k, v in offs.items() if v}
    return FunnelState(window=w, culprits=culprits, one_offs=kept), FunnelOutput(verdicts, alerts)


def _ranks(dedup_key: str) -> list[int]:
    """The ranks of a dedup key (:attr:`Culprit.dedup_key`; ``-``: none)."""
    part = dedup_key.rsplit("/", 2)[-2] if dedup_key.count("/") >= 2 else "-"
    return [int(r) for r in part.split(",") if r.strip().isdigit()]


def _ranks_key(dedup_key: str) -> str:
    """``job/group_kind/group_id/ranks`` of a dedup key (:attr:`Culprit.dedup_key`): the
    culprit without its phase or kernel."""
    return dedup_key.rsplit("/", 1)[0]


def _l3_only(c: Culprit) -> bool:
    """The culprit's only evidence naming a rank or group is L3 (kernel or group divergence).

    L1 findings attach to every culprit of their window but name no rank, so they do not
    corroborate which rank or group is at fault.
    """
    fs = [f for f in c.findings if f.level != "L1"]
    return bool(fs) and all(f.level == "L3" for f in fs)


ONE_OFF_WINDOWS = 10
"""Windows the funnel remembers one-off events (:func:`_recurring`): a stall every ~15
steps, or two in 50, recurs within them."""
STALL_SHARE = 10.0
"""A one-off event pages at once when its excess is at least this many median iteration
times (the rank alone held the job for ten steps or more: the paper's ~40x ``backward`` JIT
stall is ~20 steps, the simulator's 19-20); smaller ones page when they recur
(:func:`_recurring`). A process preempted on a loaded host reached 1.03 (650 ms in a 630 ms
step of a 4-rank CPU job at load 18), and 2.0 and 5.4 (270 ms and 720 ms in 130-150 ms
steps, live demo and 4-rank DDP runs at load 8): 2.0, the value before, paged them."""
RECUR_SHARE = 1.0
"""A one-off event that held the job a median step or more recurs at its second event (a
1.5 s data-loading stall in 880 ms steps: 1.7, every ~15 steps); smaller ones at their third
(:func:`_recurs`): a healthy rank of a 4-rank DDP job on a host at load 7 had two bursts of
``attention`` 35 steps apart (0.5 and 0.9 of a step), preempted, and paged."""
MAX_ONE_OFFS = 16
"""One-off events remembered per rank and phase (only whether there are two steps matters)."""


def _per_rank(f: Finding, key: str) -> dict[str, Any]:
    try:
        v = json.loads(f.evidence.get(key, "{}"))
    except ValueError:
        return {}
    return v if isinstance(v, dict) else {}


def _share(f: Finding, rank: int) -> float:
    """The one-off finding's event of ``rank`` in median iteration times
    (``evidence["step_share"]`` of a spike, ``["burst_share"]`` of a burst; 0 if absent)."""
    share = _per_rank(f, "step_share" if f.kind == "jitter" else "burst_share").get(str(rank))
    return float(share) if isinstance(share, (int, float)) else 0.0


def _stall(f: Finding, rank: int) -> bool:
    """The one-off finding's event of ``rank`` is a stall of :data:`STALL_SHARE` steps or more."""
    return _share(f, rank) >= STALL_SHARE


def _recurs(f: Finding, rank: int, steps: int) -> bool:
    """``rank``'s one-off events (``steps`` distinct steps remembered, this finding's
    included) recur: a stall (:func:`_stall`); two events when this one cost the job
    :data:`RECUR_SHARE` steps or more; else three."""
    return _stall(f, rank) or steps >= 3 or (steps >= 2 and _share(f, rank) >= RECUR_SHARE)


def _one_off(f: Finding) -> dict[int, list[int]] | None:
    """Rank -> steps of a one-off finding, None for others: L2's step-time spikes (``jitter``,
    ``evidence["spike_steps"]``) and L2 stragglers named only for single steps beyond noise
    (every named rank's test ``burst``, ``evidence["burst_at"]``)."""
    if f.level != "L2" or not f.ranks:
        return None
    if f.kind == "jitter":
        at = _per_rank(f, "spike_steps")
    else:
        tests = _per_rank(f, "test")
        if not tests or any(tests.get(str(r)) != "burst" for r in f.ranks):
            return None
        at = _per_rank(f, "burst_at")
    return {int(r): [int(s) for s in steps] for r, steps in at.items()}


def _recurring(
    findings: Sequence[Finding], offs: dict[str, set[tuple[int, int]]], window: int
) -> list[Finding]:
    """``findings`` without the one-off ones (:func:`_one_off`) that did not recur: a one-off
    finding is evidence only when each of its ranks had one-off events in two different
    steps of the same group and phase within :data:`ONE_OFF_WINDOWS` windows, the later
    costing the job :data:`RECUR_SHARE` steps or more (else three such steps), or the event
    was a stall of :data:`STALL_SHARE` steps or more (``offs``:
    ``job/group_kind/group_id/rank/phase`` -> ``(window, step)``, updated in place with this
    ``window``'s).

    One step in which one rank was slow (a process preempted on a loaded host, a GC pause, a
    page-fault storm) is what a healthy job does now and then; a recurring stall is a fault
    (issue 18: a 1.5 s data-loading stall every ~15 steps). A 4-rank CPU DDP job on a loaded
    2-core host (load 18) drew pages of healthy ranks on single steps otherwise (a 196 ms
    ``optimizer`` step of a rank at ~10 ms; a rank off the CPU for 650 ms in one
    ``forward``; two ranks' bursts in consecutive steps, named together with the straggler).
    A small group's persistence window (:func:`_small_test`) is held back the same way until
    its rank was named so twice within :data:`SMALL_GROUP_WINDOWS` (``.../rank/small``).
    The findings are still reported (anomaly records); they only do not make culprits.
    """
    out = []
    for f in findings:
        if _small_test(f):  # a weak window of a small group: evidence once it recurs
            small = [f"{f.job}/{f.group_kind}/{f.group_id}/{r}/small" for r in f.ranks]
            for k in small:
                offs.setdefault(k, set()).add((window, _phase_id(f.phase)))
            if all(_small_recurs(offs[k], f.phase, window) for k in small):
                out.append(f)
            continue
        ev = _one_off(f)
        if ev is None:
            out.append(f)
            continue
        keys = {r: f"{f.job}/{f.group_kind}/{f.group_id}/{r}/{f.phase}" for r in f.ranks}
        for r, steps in ev.items():
            if r in keys:
                offs.setdefault(keys[r], set()).update((window, s) for s in steps)
        if all(_recurs(f, r, len({s for _, s in offs.get(k, ())})) for r, k in keys.items()):
            out.append(f)
    return out


def _job_regression_only(c: Culprit) -> bool:
    """The culprit is only L1 step-time regressions no rank, group or host explains (a job
    culprit): like an L3-only culprit, it pages once it lasted ``l3_only_persistence``
    consecutive windows, and ``job_regression_min_s`` of event time. A healthy CPU DDP job
    on a host at load 7-9 slowed 2.8-5.3x for 8-17 steps while other tenants took the cores
    (one window each, three runs of 16), and paged "the whole job"; a job-wide regression
    that lasts still pages."""
    return bool(c.findings) and all(
        f.level == "L1" and f.kind == "regression" and not f.ranks for f in c.findings
    )


def _pair_only(c: Culprit) -> bool:
    """The culprit's only evidence naming a rank is L2's in groups of two ranks.

    A pair has no spread to judge against: one L2 window names the slower of two when it was
    slower in each of its steps (``2**-steps``, 1/16 for the live 4-step window) and by
    ``pair_ratio`` (:mod:`argus.detectors.l2`), which a few steps of host contention on one
    rank give as often (a 2-rank CPU DDP job drew 3-4 such pages a run on healthy rank 0 on
    a loaded 2-core host). Like an L3-only culprit, it pages once it repeats
    (``l3_only_persistence`` consecutive windows): a slow rank of a pair stays slow.
    """
    fs = [f for f in c.findings if f.level != "L1"]
    return bool(fs) and all(f.level == "L2" and f.evidence.get("n_ranks") == "2" for f in fs)


def _small_test(f: Finding) -> bool:
    """An L2 straggler named by persistence tests of a group of 3 to :data:`SMALL_GROUP`
    ranks: such a group passes at its floor (the slowest of every step, 1/64 in a 4-rank,
    3-step window: :data:`argus.detectors.l2.MAX_FLOOR`) without family-wise control, so
    one window is evidence only once the rank was named so in another window of the group
    within :data:`SMALL_GROUP_WINDOWS` (:func:`_recurring`, any phase: its bottleneck moves
    between nested phases). Live 4-rank DDP jobs: one window paged a healthy rank once in 10
    runs; the slowed rank of a CPU demo (2x of a ~15 ms ``mlp`` in ~140 ms steps) was named in
    windows 1, 4, 6 and 11 of one run, never two in a row. Bursts beyond noise keep their own
    rule (:func:`_one_off`)."""
    if f.level != "L2" or f.kind != "straggler" or not f.ranks:
        return False
    n = int(f.evidence.get("n_ranks", "0") or 0)
    tests = json.loads(f.evidence.get("test", "{}") or "{}")
    return 2 < n <= SMALL_GROUP and "burst" not in tests.values()


def _phase_id(phase: str | None) -> int:
    """A phase name as a stable int (the one-off memory holds ``(window, int)`` pairs)."""
    return zlib.crc32((phase or "").encode())


def _small_recurs(named: Collection[tuple[int, int]], phase: str | None, window: int) -> bool:
    """A small group's rank (``named``: its ``(window, phase id)`` namings) was named in two
    windows or more within :data:`SMALL_GROUP_WINDOWS`, and ``phase`` is one it was named
    for in most of them (the earliest named first on a tie; phases named in the same
    windows alike, a compute phase and the late arrival it makes): the page names the phase
    the rank was slow in, not the one its last window happened to name (a live 4-rank DDP
    job's slowed rank, named in ``mlp`` and then once in ``optimizer``, paged as
    ``optimizer``)."""
    recent = [e for e in named if e[0] > window - SMALL_GROUP_WINDOWS]
    if len({w for w, _ in recent}) < 2:
        return False
    first: dict[int, int] = {}
    count: dict[int, int] = {}
    for w, p in sorted(recent):
        first.setdefault(p, w)
        count[p] = count.get(p, 0) + 1
    rank = {p: (-count[p], first[p]) for p in count}
    return rank.get(_phase_id(phase)) == min(rank.values())


SMALL_GROUP = 4
"""Ranks of a group whose L2 persistence tests are evidence only once they recur (:func:`_small_test`)."""
SMALL_GROUP_WINDOWS = 4
"""Windows within which a small group's rank must be named twice (:func:`_small_test`)."""


def _shared_spikes_only(c: Culprit) -> bool:
    """The culprit is only L1 ``jitter``: step-time spikes no rank was found to make.

    A rank that makes a spike is named by L2 (:func:`argus.detectors.l2.spikes`, bursts);
    a spike without one is an event every rank shared (a checkpoint, a storage stall of every
    rank's data loading, congested collectives): reported as a verdict, not paged.
    """
    return bool(c.findings) and all(f.level == "L1" and f.kind == "jitter" for f in c.findings)


def _waiting_only(c: Culprit) -> bool:
    """The culprit's only evidence is ranks waiting longer in a collective (L3, one rank).

    A collective slows all its members together (a slow link makes a *group* diverge), so
    one rank spending longer in it waited for a late peer: a symptom, reported but not paged.
    """
    fs = [f for f in c.findings if f.level != "L1"]
    return bool(fs) and all(
        f.level == "L3" and f.kind == "kernel_divergence" and f.evidence.get("collective") == "true"
        for f in fs
    )


def _straggler_groups(
    c: Culprit, rank_coords: Mapping[int, Mapping[str, int]] | None = None
) -> tuple[str, ...]:
    """Group ids of the culprit's findings that name its L2 compute ranks, and the id of
    every coordinate known for them (``"pp1.tp2.dp4"``, from ``rank_coords``), so the next
    window knows where the straggler was; () for a culprit that is not a compute straggler."""
    comp = _compute_ranks(c.findings)
    ids = {
        f.group_id for f in c.findings if f.level in ("L2", "L3") and not comp.isdisjoint(f.ranks)
    }
    for r in comp:
        known = (rank_coords or {}).get(r, {})
        if known:
            ids.add(".".join(f"{d}{v}" for d, v in sorted(known.items())))
    return tuple(sorted(ids))


def _explained_victim(
    c: Culprit,
    straggling: Sequence[Mapping[str, int]],
    groups: Mapping[str, Sequence[str]],
    rank_coords: Mapping[int, Mapping[str, int]],
    paged: Collection[int] = (),
) -> bool:
    """The culprit's only evidence is waiting (late arrivals, one rank's collective kernels)
    of ranks reachable (:func:`_reachable`: a comparison group, or one model replica) from a
    compute straggler of this window or the previous one (``straggling``: coordinates of its
    ranks), or of ranks of a compute straggler whose page is open (``paged``: its own
    lateness in a window its compute was not named): the straggler's victim or symptom,
    reported but not paged. Waiting that no straggler explains (a rank late on its own, a
    slow collective or link) still pages.
    """
    fs = [f for f in c.findings if f.level != "L1"]
    if not fs or not all(_waiting(f) for f in fs):
        return False
    ranks = {r for f in fs for r in f.ranks}
    if ranks <= set(paged):
        return True
    return any(
        _reachable(rank_coords.get(r, {}), s, groups) for r in sorted(ranks) for s in straggling
    )


_SEVERITIES = ("warning", "error", "critical")


def _raise_to(sig: str, v: Verdict) -> str:
    """An alert's signature ``"L1+L2|error"`` raised to what verdict ``v`` adds: the union of
    the levels and the higher severity.

    An open alert re-triggers (same dedup key) only when this changes: a new level of
    evidence or a higher severity. A level that comes and goes (an L3 block landing in some
    windows and not others) or a severity that falls back does not repeat the alert. A
    signature of another form (state from an older version) counts as empty.
    """
    levels, _, sev = sig.partition("|")
    old = set(levels.split("+")) - {""} if sev in _SEVERITIES else set()
    rank = _SEVERITIES.index(sev) if sev in _SEVERITIES else -1
    new_levels = "+".join(sorted(old | set(v.culprit.levels)))
    return f"{new_levels}|{_SEVERITIES[max(rank, _SEVERITIES.index(severity(v)))]}"
