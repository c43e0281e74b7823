"""Group-wide and host faults: collectives compared *across* groups and hosts (issue 18).

A fault that slows a whole group equally (a slow NIC slows every ring through it; a slow
link slows one group's collective) leaves no rank standing out inside its group, so L2 does
not see it. Here each comparison group's collective is reduced to its **transfer time** and
compared with the other groups of its kind doing the same work:

* **Transfer time** of a group at a step (ns): for a collective (``stream_kind`` comm) the
  *shortest* member's duration. A collective ends at its last arrival plus the transfer, so
  early members absorb the wait and the last arrival's time is the transfer alone: a
  straggler's waiting does not make its groups look slow. For pipeline p2p (``p2p``), whose
  phases are receive waits, the members' median.
* **Comparison class**: groups of the same kind, phase and size at the same pipeline stage
  (``pp`` fixed in the group id; groups varying ``pp`` are all compared), since stages are
  uneven by design (+15 % first, +25 % last) and their collectives may be too.
* **Slow** (``_slow``): against reference groups ``U``, per step ``ref_s`` = median of
  ``U``'s transfer times, ``l_gs = log(t_gs / ref_s)``; the score ``L`` is the median of the
  ``n`` values ``l_gs`` (one group's steps, or a host's groups of one class and their steps,
  pooled), its z ``L / se`` with ``se = 1.2533 sigma / sqrt(n)`` and ``sigma`` the median
  over steps of ``U``'s robust spread (1.4826 MAD of ``l_us``, floored at ``min_sigma``).
  Slow when ``exp(L) >= min_ratio``, ``z >= z``, the excess (median of ``t_gs - ref_s``) is
  material (``>= min_abs_ms`` and ``>= min_step_share`` of the median iteration time), and
  each pooled group is above ``ref_s`` in more than half its steps.
* **Host** (``group_kind="host"``): a host's *inter-host* groups (members on more than one
  host; a group inside one host does not use its NIC) are compared, class by class, with the
  class's groups holding none of its ranks. A class is *informative* for the host when at
  least ``min_groups`` groups hold none of its ranks. The host is named when at least one
  class is informative and in every informative class each of its groups is slow. Hosts
  with the same evidence (e.g. the nodes of one pipeline, when only the pipeline's p2p
  groups tell them apart) are split by comparing their data-parallel groups *across
  stages*: a tied host is kept when its groups are slow against the class's other groups;
  when none is, none is named and its groups are reported instead.
* **Group** (its own kind and id): a group slow against the rest of its class (leave one
  out), that no named host explains (it holds none of the host's ranks).

Hosts come from the step records' ``host``; a rank without one is on host ``node<rank // 8>``
(``gpus_per_host``, 8 GPUs a node: the default assumption, written down in
``docs/detectors.md``). Findings are level L2 (they are computed from the step records'
phases), kind ``group_divergence``, no ranks (``evidence["members"]``: the host's or group's
ranks), role ``transfer``, phase the slowest collective's, so the funnel makes each a culprit
keyed by host or group (its dedup key leaves the phase out: it may change between windows).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from argus.detectors.findings import Finding
from argus.detectors.l2 import GroupWindow

__all__ = [
    "GroupStat",
    "GroupwideConfig",
    "detect",
    "detect_stats",
    "group_stats",
    "hosts_of",
    "stage_of",
]


@dataclass(frozen=True)
class GroupwideConfig:
    """Gates of the cross-group and cross-host comparison (all ours)."""

    min_ratio: float = 1.2  # transfer time over the reference: a NIC 1.6x slower shows ~1.3-1.6
    z: float = 5.0  # robust z of the median log ratio (Bonferroni over ~1,000 tests)
    min_sigma: float = 0.02  # floor of the per-step spread of log ratios
    min_abs_ms: float = 1.0
    min_step_share: float = 0.002  # excess per step over the median iteration time
    min_groups: int = 4  # reference groups a comparison needs
    group_ratio: float = 2.0  # one group alone (a link): MoE all-to-alls vary 1.2-1.5x
    group_z: float = 8.0
    stage_ratio: float = 1.4  # a stage's groups against the other stages' (design: <= 1.3x)
    min_steps: int = 3
    gpus_per_host: int = 8


@dataclass(frozen=True)
class GroupStat:
    """One group's transfer time of one collective phase over a window.

    ``t_ns`` (S,) float64, ns per step (NaN: no data), on the common ``steps`` of
    :func:`group_stats`; ``stage`` the pp index the group id fixes (None: varies pp).
    """

    group_kind: str
    group_id: str
    phase: str
    members: tuple[int, ...]
    stage: int | None
    t_ns: np.ndarray

    @property
    def cls(self) -> tuple[str, str, int, int | None]:
        return (self.group_kind, self.phase, len(self.members), self.stage)


def hosts_of(records: Iterable[Mapping[str, object]], gpus_per_host: int = 8) -> dict[int, str]:
    """Rank -> host from step records (``host``; ``node<rank // gpus_per_host>`` when empty)."""
    out: dict[int, str] = {}
    for r in records:
        rank = int(r["rank"])  # type: ignore[call-overload]
        h = str(r.get("host") or "")
        out[rank] = h or f"node{rank // gpus_per_host}"
    return out


def stage_of(group_id: str) -> int | None:
    """The pipeline stage a group id fixes (``pp<N>`` in it), None when it varies pp."""
    for part in group_id.split("."):
        if part[:2] == "pp" and part[2:].isdigit():
            return int(part[2:])
    return None


def group_stats(windows: Sequence[GroupWindow]) -> tuple[np.ndarray, list[GroupStat], float]:
    """Transfer time per (group, collective phase) on the union of the windows' steps.

    Returns ``(steps (S,), stats, iter_ns)``: ``iter_ns`` the median iteration time of the
    windows (NaN when none carries it).
    """
    parts = [np.asarray(w.steps, np.int64) for w in windows]
    steps = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
    col = {int(s): i for i, s in enumerate(steps)}
    stats: list[GroupStat] = []
    iters: list[np.ndarray] = []
    for w in windows:
        if w.iter_ns is not None:
            iters.append(np.asarray(w.iter_ns, np.float64).ravel())
        idx = np.array([col[int(s)] for s in w.steps], dtype=np.int64)
        d = np.asarray(w.durations_ns, np.float64)
        for j, (phase, sk) in enumerate(zip(w.phases, w.stream_kinds, strict=True)):
            if sk not in ("comm", "p2p") or d.shape[0] < 2:
                continue
            x = d[:, :, j]
            ok = np.isfinite(x).any(axis=0)
            t = np.full(len(steps), np.nan)
            if ok.any():
                red = np.nanmin if sk == "comm" else _nanmedian
                t[idx[ok]] = red(x[:, ok], axis=0)
            stats.append(
                GroupStat(
                    w.group_kind,
                    w.group_id,
                    phase,
                    tuple(int(r) for r in w.ranks),
                    stage_of(w.group_id),
                    t,
                )
            )
    it = np.concatenate(iters) if iters else np.array([np.nan])
    it = it[np.isfinite(it)]
    return steps, stats, float(np.median(it)) if it.size else math.nan


@dataclass(frozen=True)
class _Window:
    """What every finding of one call shares: the job, the window, the gates, the hosts."""

    job: str
    start_ns: int
    end_ns: int
    steps: np.ndarray
    iter_ns: float
    cfg: GroupwideConfig
    host: Callable[[int], str]


@dataclass(frozen=True)
class _Verdict:
    slow: bool
    ratio: float
    z: float
    excess_ns: float


def _nanmedian(a: np.ndarray, axis: int | None = None) -> np.ndarray:
    """``np.nanmedian`` without its slow masked path when ``a`` holds no NaN."""
    return np.median(a, axis=axis) if not np.isnan(a).any() else np.nanmedian(a, axis=axis)


def _slow(
    ts: Sequence[np.ndarray], ref: Sequence[np.ndarray], iter_ns: float, cfg: GroupwideConfig
) -> _Verdict:
    """Are the transfer times ``ts`` (each (S,)) slow, together, against the reference groups
    ``ref`` (each (S,))? One group is a test of its own; a host's groups of one class are
    pooled (the host hypothesis: all of them slow), each of them slower than the reference
    median in more than half its steps."""
    u = np.vstack(ref)
    t = np.vstack(ts)
    with np.errstate(all="ignore"):
        r = _nanmedian(u, axis=0)
    col = np.isfinite(r) & (r > 0) & (np.isfinite(u).sum(0) >= 2)
    ok = np.isfinite(t) & (t > 0) & col
    if ok.sum() < cfg.min_steps * len(ts) or (ok.sum(axis=1) == 0).any():
        return _Verdict(False, 1.0, 0.0, 0.0)
    rr = np.broadcast_to(r, t.shape)
    lg = np.log(t[ok] / rr[ok])
    with np.errstate(all="ignore"):
        lu = np.log(u[:, col] / r[col])
        sig_s = 1.4826 * _nanmedian(np.abs(lu - _nanmedian(lu, axis=0)), axis=0)
    sigma = max(float(_nanmedian(sig_s)) if np.isfinite(sig_s).any() else 0.0, cfg.min_sigma)
    score = float(np.median(lg))
    z = score / (1.2533 * sigma / math.sqrt(lg.size))
    excess = float(np.median(t[ok] - rr[ok]))
    need = cfg.min_abs_ms * 1e6
    if math.isfinite(iter_ns):
        need = max(need, cfg.min_step_share * iter_ns)
    each = all(float(np.mean(t[k][ok[k]] > r[ok[k]])) > 0.5 for k in range(t.shape[0]))
    slow = math.exp(score) >= cfg.min_ratio and z >= cfg.z and excess >= need and each
    return _Verdict(slow, math.exp(score), z, excess)


def detect(
    windows: Sequence[GroupWindow],
    hosts: Mapping[int, str] | None = None,
    cfg: GroupwideConfig | None = None,
) -> list[Finding]:
    """Hosts and groups whose collectives are slow against the other groups of their kind.

    Parameters
    ----------
    windows : sequence of GroupWindow
        One window of every comparison group of one job (all kinds: L2's input).
    hosts : mapping, optional
        Rank -> host (:func:`hosts_of`); missing ranks are on ``node<rank // gpus_per_host>``.
    cfg : GroupwideConfig

    Returns
    -------
    list of Finding
        ``group_divergence`` findings at level L2, group kind ``host`` (id: the host) or the
        slow group's own; sorted by (group kind, group id).
    """
    if not windows:
        return []
    steps, stats, iter_ns = group_stats(windows)
    return detect_stats(
        windows[0].job,
        steps,
        stats,
        iter_ns,
        (min(int(w.start_ns) for w in windows), max(int(w.end_ns) for w in windows)),
        hosts,
        cfg,
    )


def detect_stats(
    job: str,
    steps: np.ndarray,
    stats: Sequence[GroupStat],
    iter_ns: float,
    span_ns: tuple[int, int],
    hosts: Mapping[int, str] | None = None,
    cfg: GroupwideConfig | None = None,
) -> list[Finding]:
    """:func:`detect` on transfer times already reduced (:func:`group_stats`): ``steps`` (S,),
    every ``stats[i].t_ns`` (S,), ``iter_ns`` the window's median iteration time and
    ``span_ns`` its (start, end) ns. The stream's job tier calls it with the stats its rank
    blocks reduced, so no worker needs every group's raw window."""
    cfg = cfg or GroupwideConfig()
    start_ns, end_ns = span_ns
    if steps.size == 0:
        return []
    hosts = dict(hosts or {})

    def host(r: int) -> str:
        return hosts.get(r) or f"node{r // cfg.gpus_per_host}"

    classes: dict[tuple[str, str, int, int | None], list[GroupStat]] = {}
    for g in stats:
        classes.setdefault(g.cls, []).append(g)
    hosts_in = {id(g): {host(r) for r in g.members} for g in stats}
    inter = [g for g in stats if len(hosts_in[id(g)]) > 1]
    # --- hosts: slow in every informative class --------------------------------------------
    evidence: dict[str, list[tuple[GroupStat, _Verdict]]] = {}
    for h in sorted({host(r) for g in inter for r in g.members}):
        ev: list[tuple[GroupStat, _Verdict]] = []
        informative = failed = False
        for members in classes.values():
            mine, rest = _touching(members, h, hosts_in)
            if not mine or len(rest) < cfg.min_groups:
                continue
            informative = True
            v = _slow([g.t_ns for g in mine], [u.t_ns for u in rest], iter_ns, cfg)
            if not v.slow:
                failed = True
                break
            ev += [(g, v) for g in mine]
        if informative and not failed:
            evidence[h] = ev
    named = _split_ties(evidence, stats, hosts_in, iter_ns, cfg)
    win = _Window(job, start_ns, end_ns, steps, iter_ns, cfg, host)
    out = [_finding(win, "host", h, evidence[h]) for h in sorted(named)]
    # --- groups: slow against the rest of their class, not explained by a named host -------
    gcfg = replace(cfg, min_ratio=cfg.group_ratio, z=cfg.group_z)
    for members in classes.values():
        if len(members) - 1 < cfg.min_groups:
            continue
        for g in members:
            if hosts_in[id(g)] & named:
                continue
            v = _slow([g.t_ns], [u.t_ns for u in members if u is not g], iter_ns, gcfg)
            if v.slow:
                out.append(_finding(win, g.group_kind, g.group_id, [(g, v)]))
    out += _stages(win, stats, hosts_in, named)
    out.sort(key=lambda f: (f.group_kind, f.group_id, f.phase or ""))
    return out


def _stages(
    win: _Window,
    stats: Sequence[GroupStat],
    hosts_in: Mapping[int, set[str]],
    named: set[str],
) -> list[Finding]:
    """One pipeline stage's inter-host groups of a kind, all slow against the other stages'.

    Where no host can be singled out (tp 8: a node's DP groups are all of its stage's, and
    the pipeline's p2p receive waits hide the slower transfer), a slow NIC still makes its
    stage's DP collectives slower than every other stage's. Named as group kind ``kind``,
    id ``pp<stage>`` (its members: every rank of those groups, on the stage's hosts) when
    pooled against the other stages' groups it reaches ``stage_ratio`` (stages are uneven
    by design, up to +25 %) and no named host explains it; one finding per (kind, stage),
    the slowest phase giving the score and the phase.
    """
    cfg, iter_ns = win.cfg, win.iter_ns
    scfg = replace(cfg, min_ratio=cfg.stage_ratio)
    across: dict[tuple[str, str, int], list[GroupStat]] = {}
    for g in stats:
        if g.stage is not None and len(hosts_in[id(g)]) > 1:
            across.setdefault((g.group_kind, g.phase, len(g.members)), []).append(g)
    best: dict[tuple[str, int], list[tuple[GroupStat, _Verdict]]] = {}
    for (kind, _phase, _n), members in across.items():
        stages = sorted({g.stage for g in members if g.stage is not None})
        if len(stages) < 3:
            continue
        for st in stages:
            mine = [g for g in members if g.stage == st]
            rest = [g for g in members if g.stage != st]
            if len(rest) < cfg.min_groups or any(hosts_in[id(g)] & named for g in mine):
                continue
            v = _slow([g.t_ns for g in mine], [u.t_ns for u in rest], iter_ns, scfg)
            if v.slow:
                best.setdefault((kind, st), []).extend((g, v) for g in mine)
    out = []
    for (kind, st), ev in sorted(best.items()):
        f = _finding(win, kind, f"pp{st}", ev)
        out.append(f)
    return out


def _touching(
    members: Sequence[GroupStat], h: str, hosts_in: Mapping[int, set[str]]
) -> tuple[list[GroupStat], list[GroupStat]]:
    """``members`` split into the inter-host groups holding a rank of host ``h`` and the
    groups holding none."""
    mine = [g for g in members if h in hosts_in[id(g)] and len(hosts_in[id(g)]) > 1]
    return mine, [g for g in members if h not in hosts_in[id(g)]]


def _split_ties(
    evidence: Mapping[str, list[tuple[GroupStat, _Verdict]]],
    stats: Sequence[GroupStat],
    hosts_in: Mapping[int, set[str]],
    iter_ns: float,
    cfg: GroupwideConfig,
) -> set[str]:
    """Candidate hosts, ties on the same evidence split across pipeline stages.

    Hosts whose slow groups are the same (the nodes of one pipeline, when only its p2p
    groups tell them apart) are compared by their data-parallel groups *across* stages: each
    tied host's groups of a class pooled against the rest of the class (``_slow``'s score);
    the host whose score is highest in every such class and beats the runner-up by
    ``min_ratio`` is named. Stages uneven by design (+25 % on the last) do not reach that
    against a host's 1.6x, nor does the waiting of a straggler's pipeline (its p2p groups
    slow, no stage standing out); then no host of the tie is named.
    """
    by_ev: dict[frozenset[int], list[str]] = {}
    for h, ev in evidence.items():
        by_ev.setdefault(frozenset(id(g) for g, _ in ev), []).append(h)
    named: set[str] = set()
    across: dict[tuple[str, str, int], list[GroupStat]] = {}
    for g in stats:
        if g.stage is not None:
            across.setdefault((g.group_kind, g.phase, len(g.members)), []).append(g)
    for tied in by_ev.values():
        if len(tied) == 1:
            named.update(tied)
            continue
        winners: set[str] = set()
        any_class = False
        for members in across.values():
            scores: dict[str, float] = {}
            for h in tied:
                mine, rest = _touching(members, h, hosts_in)
                if mine and len(rest) >= cfg.min_groups:
                    v = _slow([g.t_ns for g in mine], [u.t_ns for u in rest], iter_ns, cfg)
                    scores[h] = v.ratio if v.slow else min(v.ratio, cfg.min_ratio)
            if len(scores) < 2:
                continue
            any_class = True
            ranked = sorted(scores.items(), key=lambda kv: -kv[1])
            top, second = ranked[0][1], max(ranked[1][1], 1.0)  # slow or not, its ratio
            if top >= cfg.min_ratio * second:
                winners.add(ranked[0][0])
            else:
                winners.add("")  # this class singles out nobody
        if any_class and len(winners) == 1 and "" not in winners:
            named.update(winners)
    return named


def _finding(
    win: _Window, kind: str, gid: str, ev: Sequence[tuple[GroupStat, _Verdict]]
) -> Finding:
    """One finding naming host or group ``gid`` from its slow groups ``ev`` (the strongest
    gives the score, phase and durations)."""
    job, steps, iter_ns, cfg, host = win.job, win.steps, win.iter_ns, win.cfg, win.host
    start_ns, end_ns = win.start_ns, win.end_ns
    g0, v0 = max(ev, key=lambda gv: gv[1].z)
    members = sorted({r for g, _ in ev for r in g.members if kind != "host" or host(r) == gid})
    phases = sorted({g.phase for g, _ in ev})
    return Finding(
        job=job,
        level="L2",
        kind="group_divergence",
        group_kind=kind,
        group_id=gid,
        ranks=(),
        phase=g0.phase,  # the slowest; the funnel keys transfer culprits without it
        window_start_step=int(steps[0]),
        window_end_step=int(steps[-1]),
        window_start_ns=start_ns,
        window_end_ns=end_ns,
        score=v0.z,
        threshold=cfg.z,
        baseline=float(np.nanmean(g0.t_ns) - v0.excess_ns) / 1e6
        if np.isfinite(g0.t_ns).any()
        else 0.0,
        observed=float(np.nanmean(g0.t_ns)) / 1e6 if np.isfinite(g0.t_ns).any() else 0.0,
        unit="ms",
        evidence={
            "role": "transfer",
            "collective": "true",
            "members": json.dumps(members),
            "phases": json.dumps(phases),
            "groups": json.dumps(sorted({f"{g.group_kind}:{g.group_id}" for g, _ in ev})[:64]),
            "ratio": f"{v0.ratio:.3f}",
            "excess_ms": f"{v0.excess_ns / 1e6:.3f}",
            "step_ms": f"{iter_ns / 1e6:.3f}" if math.isfinite(iter_ns) else "",
        },
    )
