"""The funnel's join: one window's findings -> :class:`Culprit` objects.

Findings that name ranks (L2 stragglers, L3 kernel divergences) are joined when their rank sets
overlap; group-level findings (L3 group divergence) are culprits of their own, keyed by group;
L1 windows are attached to the culprits whose window they overlap, and become a job-level
culprit when nothing else explains them. Waiting (late arrivals, collective kernels of one rank)
is attached to the straggler it descends from (:func:`_attach_waiting`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from argus.detectors.findings import Finding, finding_id
from argus.routing import DEFAULT_GROUPS, DIMS

__all__ = ["Culprit", "join"]


@dataclass(frozen=True)
class Culprit:
    """Findings of one window explained by one culprit.

    Attributes
    ----------
    job, group_kind, group_id : str
        The primary finding's group.
    ranks : tuple of int
        Culprit ranks (empty: the whole group/job).
    phase : str or None
        Bottleneck phase (compute phase named by L2, else the collective a rank was late to).
    kernels : tuple of str
        Kernels L3 found on these ranks (or this group), most divergent first.
    levels : tuple of str
        Levels that fired (sorted).
    findings : tuple of Finding
    """

    job: str
    group_kind: str
    group_id: str
    ranks: tuple[int, ...]
    phase: str | None
    kernels: tuple[str, ...]
    levels: tuple[str, ...]
    findings: tuple[Finding, ...]

    @property
    def kind(self) -> str:
        return self.primary.kind

    @property
    def primary(self) -> Finding:
        return _primary(self.findings)

    @property
    def dedup_key(self) -> str:
        """Stable per culprit: ``job/group_kind/group_id/ranks/phase-or-kernel``; a host's,
        group's or stage's slow transfer (:mod:`argus.detectors.groupwide`) is keyed by its
        kind instead of its slowest phase, which may change between windows."""
        if self.primary.evidence.get("role") == "transfer":
            what = self.kind
        else:
            what = self.phase or (self.kernels[0] if self.kernels else self.kind)
        ranks = ",".join(str(r) for r in self.ranks) or "-"
        return f"{self.job}/{self.group_kind}/{self.group_id}/{ranks}/{what}"

    @property
    def window_start_step(self) -> int:
        return min(f.window_start_step for f in self.findings)

    @property
    def window_end_step(self) -> int:
        return max(f.window_end_step for f in self.findings)

    @property
    def window_start_ns(self) -> int:
        return min(f.window_start_ns for f in self.findings)

    @property
    def window_end_ns(self) -> int:
        return max(f.window_end_ns for f in self.findings)


def _rank_of_level(f: Finding) -> int:
    return {"L2": 0, "L3": 1, "L1": 2}.get(f.level, 3)


def _primary(findings: Sequence[Finding]) -> Finding:
    """L2 compute > L2 late arrival > L3 > L1; then by margin, then by how many times its
    baseline it observed, then by name: never by arrival order (L2's exact tests give every
    finding of a small group the same margin, and a culprit whose phase flipped between
    windows with the order its findings came in never persisted)."""

    def key(f: Finding) -> tuple[int, int, int, float, float, str, str]:
        role = 0 if f.evidence.get("role") == "compute" else 1
        group = 0 if f.kind == "group_divergence" else 1
        ratio = abs(f.observed / f.baseline) if f.baseline else 0.0
        return (
            _rank_of_level(f),
            role,
            group,
            -f.margin,
            -ratio,
            f.phase or "",
            f.kernel or "",
        )

    return min(findings, key=key)


def _overlaps(a: Finding, b: Culprit) -> bool:
    """Whether L1 window ``a`` is evidence for culprit ``b``: a regression (a lasting
    slowdown) when their windows overlap; step-time spikes (``jitter``) only when ``b``
    itself made a spike at one of those steps (an L2 ``jitter`` of its ranks,
    :func:`argus.detectors.l2.spikes`), never because it happens to share the window."""
    if not (a.window_start_step <= b.window_end_step and b.window_start_step <= a.window_end_step):
        return False
    if a.kind != "jitter":
        return True
    spikes = set(_steps_of(a.evidence.get("spike_steps")))
    return any(
        f.level == "L2"
        and f.kind == "jitter"
        and spikes & set(_steps_of(f.evidence.get("spike_steps")))
        for f in b.findings
    )


def _steps_of(raw: str | None) -> list[int]:
    """Steps of a ``spike_steps`` evidence: a list (L1) or rank -> list (L2), as JSON."""
    try:
        v = json.loads(raw or "[]")
    except ValueError:
        return []
    if isinstance(v, dict):
        return [int(s) for steps in v.values() for s in steps]
    return [int(s) for s in v]


def _union(findings: Sequence[Finding]) -> list[list[Finding]]:
    """Cluster findings that share a rank (union-find)."""
    parent = list(range(len(findings)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[int, int] = {}
    for i, f in enumerate(findings):
        for r in f.ranks:
            j = owner.setdefault(r, i)
            if j != i:
                parent[find(i)] = find(j)
    clusters: dict[int, list[Finding]] = {}
    for i, f in enumerate(findings):
        clusters.setdefault(find(i), []).append(f)
    return list(clusters.values())


def _members(fs: Sequence[Finding]) -> set[int]:
    return {r for g in fs for r in json.loads(g.evidence.get("members", "[]"))}


def _transfer_groups(fs: Sequence[Finding]) -> list[dict[str, int]]:
    """Coordinates the groups fix that a host's or group's slow transfer was measured on
    (:mod:`argus.detectors.groupwide`, ``evidence["groups"]``: ``kind:id``); [] for others."""
    out = []
    for f in fs:
        if f.evidence.get("role") != "transfer":
            continue
        for g in json.loads(f.evidence.get("groups", "[]")):
            dims = _fixed_dims(str(g).partition(":")[2])
            if dims is not None:
                out.append(dims)
    return out


def _compute_ranks(cl: Sequence[Finding]) -> set[int]:
    return {
        r for f in cl if f.level == "L2" and f.evidence.get("role") == "compute" for r in f.ranks
    }


def _fixed_dims(group_id: str) -> dict[str, int] | None:
    """Dimensions a routing group id fixes: ``"pp2.tp0"`` -> ``{"pp": 2, "tp": 0}``.

    ``"all"`` fixes none (``{}``); None when ``group_id`` is not a routing id
    (:func:`argus.routing.group_id`), e.g. a hand-made test group.
    """
    if group_id == "all":
        return {}
    out: dict[str, int] = {}
    for part in group_id.split("."):
        dim, idx = part[:2], part[2:]
        if dim not in DIMS or not idx.isdigit() or dim in out:
            return None
        out[dim] = int(idx)
    return out


def _coords(group_ids: Iterable[str]) -> dict[str, int]:
    """What the group ids naming one rank tell of its coordinates (every dimension they fix)."""
    out: dict[str, int] = {}
    for g in group_ids:
        for d, v in (_fixed_dims(g) or {}).items():
            out.setdefault(d, v)
    return out


def _peers(a: Mapping[str, int], b: Mapping[str, int], groups: Mapping[str, Sequence[str]]) -> bool:
    """Ranks at (partly known) coordinates ``a`` and ``b`` can share a comparison group.

    The dimensions where both are known and differ must all be varied by one group kind of
    ``groups`` (kind -> dims it varies, the routing's; by default
    :data:`argus.routing.DEFAULT_GROUPS`: ``tp``, ``pp``, ``ep``, ``edp`` one
    dimension, ``dp`` dp and ep): e.g. a rank and its TP partner, its pipeline neighbour,
    its EP peers. The ``job`` kind (every rank) does not count. Unknown dimensions do not
    separate them.
    """
    diff = {d for d in a.keys() & b.keys() if a[d] != b[d]}
    return any(diff <= set(v) for k, v in groups.items() if k != "job")


def _replica_dims(groups: Mapping[str, Sequence[str]]) -> frozenset[str]:
    """Dimensions of one model replica: those varied by a group kind that keeps the
    data-parallel index ``dp`` fixed (by default ``tp``, ``pp``, ``ep``, ``cp``; a custom kind
    without ``dp`` adds its dimensions). Ranks differing only in these exchange data every
    micro-batch (TP all-reduces, pipeline p2p, MoE all-to-all), so one rank's delay reaches
    the whole replica within the step."""
    return frozenset(d for k, v in groups.items() if k != "job" and "dp" not in v for d in v)


def _reachable(
    a: Mapping[str, int], b: Mapping[str, int], groups: Mapping[str, Sequence[str]]
) -> bool:
    """A rank at ``a`` can be waiting that descends from a straggler at ``b`` (or the reverse):
    its delay travels along the layout's communication graph.

    True when they are :func:`_peers` (one comparison group: the straggler's TP partners,
    pipeline neighbours, EP peers, DP/EDP replicas, who wait for it directly), or when they
    differ only in the dimensions of one model replica (:func:`_replica_dims`): a 1F1B
    pipeline passes a stage's delay to every stage of its pipeline, each stage's TP group
    waits with it, EP peers pass it to their pipelines, and all of that replica's ranks then
    arrive late at their own stage's gradient sync (DP/EDP), a group the straggler is not in.
    A DP replica of a replica member is *not* reachable (after the gradient sync every
    replica starts the next step together): it would make every rank reachable. Unknown
    dimensions do not separate ranks.
    """
    if _peers(a, b, groups):
        return True
    diff = {d for d in a.keys() & b.keys() if a[d] != b[d]}
    return diff <= _replica_dims(groups)


def _waiting(f: Finding) -> bool:
    """A victim's symptom: late into a collective (L2), or one rank's collective kernel (L3)."""
    if f.level == "L2":
        return f.evidence.get("role") == "late_arrival"
    return f.level == "L3" and bool(f.ranks) and f.evidence.get("collective") == "true"


def _core_ranks(cl: Sequence[Finding]) -> set[int]:
    """Ranks slow themselves: L2 compute stragglers, else ranks with slow compute kernels."""
    return _compute_ranks(cl) or {
        r for f in cl if f.level == "L3" and f.evidence.get("collective") != "true" for r in f.ranks
    }


def _rank_coords(
    window: Sequence[Finding], known: Mapping[int, Mapping[str, int]] | None = None
) -> dict[int, dict[str, int]]:
    """Coordinates of every rank an L2/L3 finding of ``window`` names: what the group ids
    naming it fix (:func:`_coords`), overridden by ``known`` (rank -> ``{dim: index}``, e.g.
    the step records' ``coords``) where the caller has them."""
    groups_of_rank: dict[int, set[str]] = {}
    for f in window:
        if f.level in ("L2", "L3"):
            for r in f.ranks:
                groups_of_rank.setdefault(r, set()).add(f.group_id)
    out = {r: _coords(gs) for r, gs in groups_of_rank.items()}
    for r, c in (known or {}).items():
        if r in out:
            out[r] = {**out[r], **_dims_of(c)}
    return out


def _dims_of(c: Mapping[str, int]) -> dict[str, int]:
    """``{dim: index}`` from ``{"tp": 1}`` or the wire's ``{"tp_rank": 1, "tp_size": 2}``
    (sizes are ignored)."""
    out: dict[str, int] = {}
    for k, v in c.items():
        d = k[:-5] if k.endswith("_rank") else k
        if d in DIMS:
            out[d] = int(v)
    return out


def _attach_waiting(
    waiting: Sequence[Finding],
    hosts: Sequence[list[Finding]],
    window: Sequence[Finding],
    groups: Mapping[str, Sequence[str]],
    known: Mapping[int, Mapping[str, int]] | None = None,
) -> list[Finding]:
    """Attach each waiting finding to the slow culprit that explains it; return the others.

    ``hosts`` are the window's clusters of culprits slow themselves (extended in place).
    A rank's coordinates are what the group ids of the ``window`` findings naming it fix
    (:func:`_coords`). In order, each rule to a fixed point, the strongest host (largest
    margin) first, and again while any attached:

    1. an L2 compute straggler sharing a rank with the finding (its ranks include the
       waiting already attached to it);
    2. an L2 compute straggler *reachable* from a rank the finding names (:func:`_reachable`:
       they share a comparison group, where the waiting rank waited for it, then was late
       into the next collective; or they sit in one model replica, along whose TP, pipeline
       and EP collectives the delay travelled before the replica arrived late at its
       gradient sync);
    3. a slow-kernel (L3-only) culprit: L3 waiting sharing a rank or a peer; an L2 late
       arrival only when it names all the culprit's ranks (one random L3 flag among many
       ranks does not explain a rank late into a collective).

    What is left is not explained by a straggler: a late rank of its own, or a slow
    collective or link.
    """

    def strength(h: list[Finding]) -> float:
        return -max(f.margin for f in h)

    l2 = sorted((h for h in hosts if _compute_ranks(h)), key=strength)
    l3 = sorted((h for h in hosts if not _compute_ranks(h)), key=strength)
    coords = _rank_coords(window, known)
    core = {id(h): _core_ranks(h) for h in hosts}
    ranks = {id(h): {r for f in h for r in f.ranks} for h in hosts}  # grows as waiting joins

    def shares(f: Finding, h: list[Finding]) -> bool:
        return not ranks[id(h)].isdisjoint(f.ranks)

    def peers(f: Finding, h: list[Finding]) -> bool:
        return any(
            _peers(coords.get(w, {}), coords.get(s, {}), groups)
            for w in f.ranks
            for s in core[id(h)]
        )

    def reaches(f: Finding, h: list[Finding]) -> bool:
        return any(
            _reachable(coords.get(w, {}), coords.get(s, {}), groups)
            for w in f.ranks
            for s in core[id(h)]
        )

    def l3_explains(f: Finding, h: list[Finding]) -> bool:
        if f.level == "L3":
            return shares(f, h) or peers(f, h)
        return core[id(h)] <= set(f.ranks)

    rules = (
        (l2, shares),
        (l2, reaches),
        (l3, l3_explains),
    )
    pending = list(waiting)
    again = True
    while pending and again:  # a rule's attachments can let an earlier rule attach more
        again = False
        for cands, explains in rules:
            moved = True
            while pending and moved:
                moved = False
                left = []
                for f in pending:
                    host = next((h for h in cands if explains(f, h)), None)
                    if host is None:
                        left.append(f)
                    else:
                        host.append(f)
                        ranks[id(host)].update(f.ranks)
                        moved = again = True
                pending = left
    return pending


def join(
    findings: Sequence[Finding],
    groups: Mapping[str, Sequence[str]] = DEFAULT_GROUPS,
    coords: Mapping[int, Mapping[str, int]] | None = None,
) -> list[Culprit]:
    """Join one window's findings into culprits.

    Parameters
    ----------
    findings : sequence of Finding
        L1, L2 and L3 findings of one window (several jobs are kept apart).
    groups : mapping
        Group kind -> dimensions it varies (``Routing.groups``): who are peers.
    coords : mapping, optional
        Rank -> ``{dim: index}`` (``tp``, ``cp``, ``ep``, ``dp``, ``pp``; or the step records'
        ``coords``, ``{"tp_rank": .., "tp_size": ..}``) where the caller knows them; otherwise a rank's coordinates are what the group ids
        of the findings naming it fix, and unknown dimensions do not separate ranks.

    Returns
    -------
    list of Culprit
        Sorted by dedup key.

    Notes
    -----
    The rules, in order (per job):

    1. L2 compute stragglers and L3 kernel divergences that share a rank form one culprit.
    2. A cluster of L3 rank findings inside a divergent group (L3 group divergence) is that
       group's symptom; a divergent group holding a rank L2 named for compute is that
       straggler's symptom (its peers wait in the group's collectives); a group whose
       *collective kernels* diverge (L3) while the window has a compute straggler is
       attached to the strongest straggler (waiting propagates through collectives). A
       host's or group's slow *transfer* (:mod:`argus.detectors.groupwide`, L2) is not:
       only a compute straggler whose delay reaches the groups it was measured on
       (:func:`_reachable` from their ids, ``evidence["groups"]``: a straggler's pipeline
       waits in every p2p receive) explains it.
    3. L2 late arrivals (a rank short in a collective) and L3 divergences of collective
       kernels on single ranks are *propagated* waiting when a culprit slow itself explains
       them: a compute straggler sharing their ranks, sharing a comparison group with
       them, or in the same model replica (:func:`_attach_waiting`, :func:`_reachable`);
       they are its victims (evidence, not culprits).
       Waiting nothing explains is a culprit itself (a rank late for a reason no phase
       measured, a slow collective).
    4. L1 regressions attach to every culprit whose window they overlap, L1 spikes only to
       a culprit that made a spike at one of their steps (:func:`_overlaps`); unexplained L1
       windows are job-level culprits, one per kind. ``missing_rank`` (L1: ranks that stopped
       reporting) is not a step-time window: its ranks are a culprit of their own.
    """
    out: list[Culprit] = []
    for job in sorted({f.job for f in findings}):
        fs = [f for f in findings if f.job == job]
        compute = [
            f
            for f in fs
            if f.level == "L2" and f.evidence.get("role") != "late_arrival" and f.ranks
        ]
        late = [
            f
            for f in fs
            if f.level == "L2" and f.evidence.get("role") == "late_arrival" and f.ranks
        ]
        k3 = [f for f in fs if f.level == "L3" and f.ranks]
        by_group: dict[tuple[str, str], list[Finding]] = {}
        for f in fs:
            if f.level in ("L2", "L3") and not f.ranks:
                by_group.setdefault((f.group_kind, f.group_id), []).append(f)
        parts: list[list[Finding]] = []
        k3_coll = [f for f in k3 if f.evidence.get("collective") == "true"]
        k3 = [f for f in k3 if f.evidence.get("collective") != "true"]
        for cl in _union([*compute, *k3]):
            home = None
            if not _compute_ranks(cl):
                ranks = {r for f in cl for r in f.ranks}
                home = next((g for g, gfs in by_group.items() if ranks <= _members(gfs)), None)
            if home is None:
                parts.append(cl)
            else:
                by_group[home].extend(cl)
        # culprits that are slow themselves: L2 compute stragglers, or L3 compute kernels
        with_compute = [
            cl
            for cl in parts
            if _compute_ranks(cl)
            or any(f.level == "L3" and f.evidence.get("collective") != "true" for f in cl)
        ]
        strongest = (
            max(
                with_compute,
                key=lambda cl: (bool(_compute_ranks(cl)), max(f.margin for f in cl)),
            )
            if with_compute
            else None
        )
        rc = _rank_coords(fs, coords)
        for gkey in list(by_group):
            members = _members(by_group[gkey])
            host = next((cl for cl in parts if _compute_ranks(cl) & members), None)
            if host is None:  # a slow transfer on groups a straggler's delay reaches
                spans = _transfer_groups(by_group[gkey])
                host = next(
                    (
                        cl
                        for cl in parts
                        if any(
                            _reachable(g, rc.get(r, {}), groups)
                            for g in spans
                            for r in _compute_ranks(cl)
                        )
                    ),
                    None,
                )
            if (
                host is None
                and strongest is not None
                and all(
                    f.level == "L3" and f.evidence.get("collective") == "true"
                    for f in by_group[gkey]
                )
            ):
                host = strongest  # collectives slow while a straggler holds everyone up
            if host is not None:
                host.extend(by_group.pop(gkey))
        # rule 3: waiting (late arrivals, one rank's collective kernels) goes to the straggler
        # it is explained by; what nothing explains is a culprit of its own
        rest = _attach_waiting([*late, *k3_coll], with_compute, fs, groups, coords)
        for cl in _union(rest):
            ranks = {r for f in cl for r in f.ranks}
            host = None
            if all(f.level == "L3" for f in cl):
                home = next((g for g, gfs in by_group.items() if ranks <= _members(gfs)), None)
                host = by_group[home] if home is not None else None
            if host is None:
                parts.append(cl)
            else:
                host.extend(cl)
        parts.extend(by_group.values())
        made = [_make(p) for p in parts]
        # a rank that stopped reporting is a culprit of its own (one per set of ranks), not
        # step-time evidence of whatever else the window holds
        missing: dict[tuple[int, ...], list[Finding]] = {}
        for f in fs:
            if f.kind == "missing_rank":
                missing.setdefault(tuple(sorted(f.ranks)), []).append(f)
        l1 = [f for f in fs if f.level == "L1" and f.kind != "missing_rank"]
        used: set[int] = set()
        for i, f in enumerate(l1):
            for j, c in enumerate(made):
                if _overlaps(f, c):
                    made[j] = _make([*c.findings, f])
                    used.add(i)
        by_kind: dict[str, list[Finding]] = {}
        for i, f in enumerate(l1):
            if i not in used:
                by_kind.setdefault(f.kind, []).append(f)
        made.extend(_make(p) for p in by_kind.values())
        made.extend(_make(p) for p in missing.values())
        out.extend(made)
    out.sort(key=lambda c: c.dedup_key)
    return out


def _make(fs: Sequence[Finding]) -> Culprit:
    prim = _primary(fs)
    comp = _compute_ranks(fs)
    if prim.kind == "group_divergence":
        ranks: list[int] = []
    elif comp:
        ranks = sorted(comp)
    elif any(f.level == "L3" and f.ranks and f.evidence.get("collective") != "true" for f in fs):
        # ranks whose own kernels are slow; peers waiting in collectives are not culprits
        ranks = sorted(
            {
                r
                for f in fs
                if f.level == "L3" and f.evidence.get("collective") != "true"
                for r in f.ranks
            }
        )
    elif any(f.level == "L3" and f.ranks for f in fs):
        ranks = sorted({r for f in fs if f.level == "L3" for r in f.ranks})
    else:
        ranks = sorted({r for f in fs if f.level == "L2" for r in f.ranks})
    if prim.level == "L2":
        # a rank's compute bottleneck beats the collective it was late to
        comp_f = [f for f in fs if f.level == "L2" and f.evidence.get("role") == "compute"]
        if comp_f:
            bott = [f for f in comp_f if json.loads(f.evidence.get("bottleneck", "[]"))]
            phase = _primary(bott or comp_f).phase
        else:
            phase = prim.phase
    else:
        phase = prim.phase
    l3 = sorted((f for f in fs if f.level == "L3" and f.kernel), key=lambda f: -f.margin)
    kernels = tuple(dict.fromkeys(f.kernel for f in l3 if f.kernel))
    levels = tuple(sorted({f.level for f in fs}))
    return Culprit(
        job=prim.job,
        group_kind=prim.group_kind,
        group_id=prim.group_id,
        ranks=tuple(ranks) if prim.level != "L1" else prim.ranks,
        phase=phase,
        kernels=kernels,
        levels=levels,
        findings=tuple(sorted(fs, key=finding_id)),
    )
