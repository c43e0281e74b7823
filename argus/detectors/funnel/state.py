"""The funnel's state machine: ``(state, findings of the next window) -> (state, output)``.

Counts how many consecutive windows each culprit repeated (**persistence**), computes a
**confidence**, and emits ``alert`` records: ``trigger`` when a culprit's confidence first
reaches ``trigger_confidence`` or its levels or severity change, ``resolve`` after
``resolve_after`` windows without it (see the package notes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    """Funnel state of one job: a window counter and the open culprits by dedup key."""

    window: int = 0
    culprits: Mapping[str, CulpritState] = field(default_factory=dict)

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
        return cls(window=int(d.get("window", 0)), culprits=cs)


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
    culprits_now = join(findings, groups, coords)
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
    for c in culprits_now:
        key = c.dedup_key
        if key in seen:
            continue
        seen.add(key)
        prev = culprits.get(key)
        pers = prev.persistence + 1 if prev is not None and prev.last_window == w - 1 else 1
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
            and not _explained_victim(c, straggling, groups, rank_coords)
            and (pers >= cfg.l3_only_persistence or not _l3_only(c))
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
    return FunnelState(window=w, culprits=culprits), FunnelOutput(verdicts, alerts)


def _l3_only(c: Culprit) -> bool:
    """The culprit's only evidence naming a rank or group is L3 (kernel or group divergence).

    L1 findings attach to every culprit of their window but name no rank, so they do not
    corroborate which rank or group is at fault.
    """
    fs = [f for f in c.findings if f.level != "L1"]
    return bool(fs) and all(f.level == "L3" for f in fs)


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
) -> bool:
    """The culprit's only evidence is waiting (late arrivals, one rank's collective kernels)
    of ranks reachable (:func:`_reachable`: a comparison group, or one model replica) from a
    compute straggler of this window or the previous one (``straggling``: coordinates of its
    ranks): the straggler's victim, reported but not paged. Waiting that no straggler
    explains (a rank late on its own, a slow collective or link) still pages.
    """
    fs = [f for f in c.findings if f.level != "L1"]
    if not fs or not all(_waiting(f) for f in fs):
        return False
    ranks = {r for f in fs for r in f.ranks}
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
