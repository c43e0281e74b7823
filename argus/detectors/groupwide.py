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
* **Receives** (:func:`receive_rows`, :func:`receive_stats`): a pipeline group's summed
  receive phases are mostly waits (1F1B bubbles of 70-300 ms hide a transfer of a few ms),
  so the step records' receive *entries* are used too: per rank, p2p phase and step the
  shortest entry, the transfer alone whenever the receiver posted after the sender sent,
  compared across the ranks receiving at the same stage. A class whose shortest receives
  are ``wait_ratio`` x the kind's shortest class (backward receives wait in every
  micro-batch) is left out; the receives replace the pipeline groups' summed phases.
* **Host** (``group_kind="host"``): a host's *inter-host* groups (members on more than one
  host; a group inside one host does not use its NIC) and its ranks' receive links
  (receiver, sender) are compared, class by class, with the class's groups holding none of
  its ranks. A class is *informative* for the host when at least ``min_groups`` groups hold
  none of its ranks. The host is a candidate when its groups, pooled, are slow in at least
  one informative class and clearly not slow (ratio under ``sqrt(min_ratio)``) in none: "a
  node whose ranks are slow in every group they belong to", where a class too noisy to
  tell (an all-to-all's summed micro-batches hold waits) neither counts nor vetoes, nor do
  links on which the host only sends (its receivers time them; whether the sender's NIC
  shows there depends on the transport). When only receives tell it apart (tp 8: its DP groups are all of
  its stage's), its collectives must also be slow against the other stages' (a NIC carries
  its rings too; a pipeline waiting on a straggler does not slow its stage's rings). Receive
  classes identify (no materiality gate: a transfer may be a fraction of a ms); the
  collective evidence must be material. Candidates with the same evidence are split by
  comparing their data-parallel groups *across stages*: a tied host is kept when its groups
  are slow against the class's other groups; when none is, none is named.
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
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from argus.detectors.findings import Finding
from argus.detectors.l2 import GroupWindow
from argus.routing import Routing

if TYPE_CHECKING:
    from argus.detectors.columnar import Cell

__all__ = [
    "GroupStat",
    "GroupwideConfig",
    "ReceiveColumns",
    "ReceivePart",
    "ReceiveRow",
    "cell_receive_rows",
    "detect",
    "detect_stats",
    "group_stats",
    "hosts_of",
    "receive_column_stats",
    "receive_part_stats",
    "receive_rows",
    "receive_stats",
    "stage_of",
]

ReceiveRow = tuple[str, str, str, int, int, int, float]
"""One rank's pipeline receives of one phase at one step: (group kind, group id, phase, rank,
stage, entries, shortest entry ns) (:func:`receive_rows`)."""


@dataclass(frozen=True)
class GroupwideConfig:
    """Gates of the cross-group and cross-host comparison (all ours)."""

    min_ratio: float = 1.2  # transfer time over the reference: a NIC 1.6x slower shows ~1.3-1.6
    z: float = 5.0  # robust z of the median log ratio (Bonferroni over ~1,000 tests)
    min_sigma: float = 0.02  # floor of the per-step spread of log ratios
    min_abs_ms: float = 1.0
    min_step_share: float = 0.002  # excess per step over the median iteration time
    min_groups: int = 4  # reference groups a comparison needs
    wait_ratio: float = 2.0  # receive class whose shortest receive is this x the kind's: waits
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

    A *receive* stat (``rank`` set, :func:`receive_stats`) is one rank's pipeline receives
    of one phase: ``members`` ``(receiver, sender)``, ``stage`` the receiver's, ``t_ns`` the
    receives' shortest entry per step (ns; ``weight`` entries a step, so the step pays
    ``weight`` times an excess).
    """

    group_kind: str
    group_id: str
    phase: str
    members: tuple[int, ...]
    stage: int | None
    t_ns: np.ndarray
    rank: int | None = None
    weight: float = 1.0

    @property
    def cls(self) -> tuple[str, str, int, int | None]:
        kind = self.group_kind if self.rank is None else f"{self.group_kind}>rx"
        return (kind, self.phase, len(self.members), self.stage)


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


def transfer_times(durations_ns: np.ndarray, stream_kinds: Sequence[str]) -> dict[int, np.ndarray]:
    """:func:`group_stats`'s transfer time of G same-shape groups at one step, at once.

    ``durations_ns`` (G, R, P): each group's ranks' phases at that step (NaN: missing);
    returns per collective or p2p phase index its (G,) times (NaN: no data, as ``t_ns`` of
    a group with no rank reporting it), the same values as ``group_stats`` of each group's
    window: the fastest rank of a collective, the median rank of a p2p phase. Groups of
    fewer than 2 ranks have none (``{}``).
    """
    out: dict[int, np.ndarray] = {}
    if durations_ns.shape[1] < 2:
        return out
    for j, sk in enumerate(stream_kinds):
        if sk not in ("comm", "p2p"):
            continue
        x = durations_ns[:, :, j]
        t = np.full(x.shape[0], np.nan)
        ok = np.isfinite(x).any(axis=1)
        if sk == "comm":
            if ok.any():
                t[ok] = np.nanmin(x[ok], axis=1)
        else:
            gaps = np.isnan(x).any(axis=1)
            full = ok & ~gaps
            if full.any():
                t[full] = np.median(x[full], axis=1)
            for g in np.flatnonzero(ok & gaps).tolist():  # as group_stats: one group a call
                t[g] = _nanmedian(x[g][:, None], axis=0)[0]
        out[j] = t
    return out


def receive_rows(
    records: Iterable[Mapping[str, object]], routing: Routing | None = None
) -> list[ReceiveRow]:
    """Pipeline receives of step records (one step, any ranks), one row per (rank, p2p phase).

    A receive entry lasts from its posting to the data's arrival: the wait for the sender
    plus the transfer. In a micro-batch where the receiver posts after the sender sent
    (1F1B's steady state, for forward activations), it is the transfer alone, so a step's
    *shortest* entry of a phase is that rank's transfer time through both NICs - a per-op
    view that summed phases (Megatron's per-iteration timers) lose. Rows:
    ``(kind, group id, phase, rank, stage, entries, shortest ns)``.
    """
    routing = routing or Routing.default()
    out: list[ReceiveRow] = []
    for rec in records:
        coords = rec.get("coords") or {}
        if not isinstance(coords, Mapping):
            continue
        p2p = [
            (ph["name"], ph["duration_ns"])
            for ph in rec.get("phases") or ()  # type: ignore[attr-defined]
            if ph.get("stream_kind") == "p2p"
        ]
        if p2p:
            _receives(out, rec["rank"], coords, p2p, routing.kind_of, routing.group_for_kind)
    return out


def cell_receive_rows(
    cells: Iterable[Cell],
    kind_of: Callable[[str, str], str],
    gid_of: Callable[[Mapping[str, Any], str], str],
) -> list[ReceiveRow]:
    """:func:`receive_rows` of step cells (:data:`argus.detectors.columnar.Cell`, phases as
    tuples), the routing's ``kind_of(name, stream kind)`` and ``gid_of(coords, kind)``
    given (a :class:`~argus.detectors.columnar.Topology`'s lookup tables)."""
    out: list[ReceiveRow] = []
    for cell in cells:
        p2p = [(ph[0], ph[2]) for ph in cell[5] if ph[1] == "p2p"]
        if p2p:
            _receives(out, cell[0], cell[4], p2p, kind_of, gid_of)
    return out


def _receives(
    out: list[ReceiveRow],
    rank: Any,
    coords: Mapping[str, Any],
    p2p: Sequence[tuple[Any, Any]],
    kind_of: Callable[[str, str], str],
    gid_of: Callable[[Mapping[str, Any], str], str],
) -> None:
    """Append one record's rows (rank ``rank``, its p2p phases' ``(name, duration ns)``)."""
    best: dict[str, list[float]] = {}
    for name, dur in p2p:
        d = float(dur)
        b = best.get(name)
        if b is None:
            best[str(name)] = [1, d]
        else:
            b[0] += 1
            if d < b[1]:
                b[1] = d
    stage = int(coords.get("pp_rank", 0) or 0)
    gids: dict[str, str] = {}  # kind -> group id, once per record
    for name, (n, t) in sorted(best.items()):
        kind = kind_of(name, "p2p")
        gid = gids.get(kind)
        if gid is None:
            gid = gids[kind] = gid_of(coords, kind)
        out.append((kind, gid, name, int(rank), stage, int(n), t))


def receive_stats(rows: Sequence[tuple[int, Sequence[ReceiveRow]]], n: int) -> list[GroupStat]:
    """Receive rows of ``n`` steps (``(step index, rows)``) -> one receive :class:`GroupStat`
    per (rank, phase), members ``(receiver, sender)``: :func:`receive_column_stats` of the
    rows as columns."""
    flat = [(i, *r) for i, rs in rows for r in rs]
    if not flat:
        return []
    return receive_column_stats(tuple(zip(*flat, strict=True)), n)  # type: ignore[arg-type]


ReceiveColumns = tuple[
    Sequence[int],
    Sequence[str],
    Sequence[str],
    Sequence[str],
    Sequence[int],
    Sequence[int],
    Sequence[int],
    Sequence[float],
]
"""Receive rows as columns, rows in order: (step index, group kind, group id, phase, rank,
stage, entries, shortest entry ns) (:data:`ReceiveRow` and its step index)."""


def receive_column_stats(cols: ReceiveColumns, n: int) -> list[GroupStat]:
    """Receive rows of ``n`` steps as columns (:data:`ReceiveColumns`) -> one receive
    :class:`GroupStat` per (rank, phase), members ``(receiver, sender)``.

    The sender is the receiver's neighbour in its pipeline group, on the side the data comes
    from: a phase no rank of the first stage has comes from the stage before (forward
    activations), one the last stage lacks from the stage after (gradients); a phase every
    stage (or none of the ends) has tells no direction and is left out. A rank's neighbour is
    the rank of the same group id one stage over (any phase's rows name it). The direction
    is found from the columns whole (dicts and sets of them, a rank's first stage per
    phase); the rows are walked one by one only when a phase has one.
    """
    keys = cols[1:6]
    return _receive_stats([keys], [keys], zip(*cols, strict=True), n)


ReceivePart = Sequence[Sequence[Any]]
"""One part's receive rows of one step as columns: (group kind, group id, phase, rank, stage,
entries, shortest entry ns) (:data:`ReceiveRow`'s fields)."""


def receive_part_stats(parts: Sequence[tuple[int, ReceivePart]], n: int) -> list[GroupStat]:
    """:func:`receive_column_stats` of parts' receive columns (``(step index, columns)``, in
    row order): a part whose key columns (kind to stage) are the very lists of an earlier
    part's (a block's receive rows step after step) adds nothing to the directions and the
    neighbours, so those are found from each distinct set of key columns once."""
    firsts: dict[tuple[int, ...], ReceivePart] = {}  # key columns' ids -> first part
    lasts: dict[tuple[int, ...], ReceivePart] = {}  # in the order of their last parts
    for _i, c in parts:
        key = tuple(map(id, c[:5]))
        firsts.setdefault(key, c)
        lasts.pop(key, None)
        lasts[key] = c
    rows = chain.from_iterable(zip(repeat(i, len(c[0])), *c, strict=True) for i, c in parts)
    return _receive_stats(list(firsts.values()), list(lasts.values()), rows, n)


def _receive_stats(
    firsts: Sequence[Sequence[Sequence[Any]]],
    lasts: Sequence[Sequence[Sequence[Any]]],
    rows: Iterable[tuple[Any, ...]],
    n: int,
) -> list[GroupStat]:
    """The receive stats of ``rows`` (``(step index, kind, group id, phase, rank, stage,
    entries, ns)``), whose key columns (kind, group id, phase, rank, stage), concatenated, are
    ``firsts`` with each row's first occurrence kept and ``lasts`` with each row's last."""
    # (kind, gid, phase, rank) -> its first stage
    known: dict[str, set[int]] = {}
    first: dict[tuple[str, str, str, int], int] = {}
    for c in reversed(firsts):
        for kind, stage in set(zip(c[0], c[4], strict=True)):
            known.setdefault(kind, set()).add(stage)
        keys = list(zip(c[0], c[1], c[2], c[3], strict=True))
        first.update(zip(reversed(keys), reversed(c[4]), strict=True))
    has: dict[tuple[str, str], set[int]] = {}
    for (kind, _gid, phase, _rank), stage in first.items():
        has.setdefault((kind, phase), set()).add(stage)
    sides: dict[tuple[str, str], int] = {}  # (kind, phase) -> where its sender is: -1, +1
    for (kind, phase), here in has.items():
        lo, hi = min(known[kind]), max(known[kind])
        if lo == hi:
            continue
        if lo not in here and hi in here:
            sides[(kind, phase)] = -1  # from the stage before
        elif hi not in here and lo in here:
            sides[(kind, phase)] = 1
    if not sides:  # no phase tells a direction (one every stage has): nothing to compare
        return []
    at: dict[tuple[str, str, int], int] = {}  # (kind, gid, stage) -> its last rank
    for c in lasts:
        at.update(zip(zip(c[0], c[1], c[4], strict=True), c[3], strict=True))
    by: dict[tuple[str, str, str, int], tuple[int, list[int], np.ndarray]] = {}
    for i, kind, gid, phase, rank, stage, entries, ns in rows:
        if (kind, phase) not in sides:
            continue
        key = (kind, gid, phase, rank)
        if key not in by:
            by[key] = (stage, [], np.full(n, np.nan))
        by[key][1].append(entries)
        by[key][2][i] = ns
    out: list[GroupStat] = []
    for (kind, gid, phase, rank), (stage, cnt, t) in sorted(by.items(), key=lambda kv: kv[0]):
        sender = at.get((kind, gid, stage + sides[(kind, phase)]))
        if sender is None:
            continue
        r, w = int(rank), float(np.median(cnt))
        out.append(GroupStat(kind, gid, phase, (r, int(sender)), int(stage), t, r, w))
    return out


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
    ts: Sequence[np.ndarray],
    ref: Sequence[np.ndarray],
    iter_ns: float,
    cfg: GroupwideConfig,
    weight: float = 1.0,
) -> _Verdict:
    """Are the transfer times ``ts`` (each (S,)) slow, together, against the reference groups
    ``ref`` (each (S,))? One group is a test of its own; a host's groups of one class are
    pooled (the host hypothesis: all of them slow), each of them slower than the reference
    median in more than half its steps. ``weight``: times a step pays the excess (a rank's
    receives of one phase)."""
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
    excess = float(np.median(t[ok] - rr[ok])) * weight
    need = cfg.min_abs_ms * 1e6
    if math.isfinite(iter_ns):
        need = max(need, cfg.min_step_share * iter_ns)
    each = all(float(np.mean(t[k][ok[k]] > r[ok[k]])) > 0.5 for k in range(t.shape[0]))
    slow = math.exp(score) >= cfg.min_ratio and z >= cfg.z and excess >= need and each
    return _Verdict(slow, math.exp(score), z, excess)


def _may_be_slow(t: np.ndarray, cfg: GroupwideConfig) -> np.ndarray:
    """(G,) bool: which of a class's groups (``t`` (G, S), transfer ns per step, NaN: none)
    :func:`_slow` may find slow against the rest of the class (leave one out), from one sort
    of the class; the groups it leaves out are not slow, so only the others need ``_slow``.

    A necessary condition, with a margin for rounding. Of a step's ``n`` non-NaN values
    ``x`` (sorted, the group's own included), the others' median ``ref`` lies in
    ``[x[(n - 2) // 2], x[(n + 1) // 2]]``; the step is usable (``ref`` finite and > 0, two
    other finite values) when the group's value is finite and > 0 and that bracket says so,
    or maybe usable when it cannot tell. A slow group's score (the median of ``log(t / ref)``
    over its ``c`` usable steps, ``c >= min_steps``) reaches ``log(min_ratio)``, so
    ``t >= min_ratio * ref >= min_ratio * x[(n - 2) // 2]`` in at least ``ceil(c / 2)`` steps.
    """
    g, s = t.shape
    x = np.sort(t, axis=0)  # NaN last
    n = (~np.isnan(t)).sum(axis=0)  # (S,)
    cols = np.arange(s)
    low = x[np.clip((n - 2) // 2, 0, g - 1), cols]
    high = x[np.clip((n + 1) // 2, 0, g - 1), cols]
    fin = np.isfinite(t)
    with np.errstate(invalid="ignore", over="ignore"):
        mine = fin & (t > 0) & (n >= 2)
        usable = mine & (low > 0) & (high < 1e300) & (fin.sum(axis=0) >= 3)
        factor = 0.99 * cfg.min_ratio
        hit = mine & (t >= factor * low) if factor > 0 else mine
    need = np.maximum(max(1, math.ceil(cfg.min_steps / 2)), (usable.sum(axis=1) + 1) // 2)
    return hit.sum(axis=1) >= need


def _hosts_may_be_slow(
    classes: Mapping[tuple[str, str, int, int | None], Sequence[GroupStat]],
    touched: Mapping[str, Sequence[tuple[str, str, int, int | None]]],
    hosts_in: Mapping[int, set[str]],
    cfg: GroupwideConfig,
) -> set[str]:
    """The hosts whose inter-host groups of a class they touch (``touched``) :func:`_slow`
    may find slow, pooled, against the class's groups holding none of their ranks, from one
    sort per class; the other hosts gather no evidence, so only these need the host loop.

    A necessary condition, as :func:`_may_be_slow`'s: of a step's ``n`` non-NaN values ``x``
    (sorted), the reference (the median of the ``n' >= n - m`` non-NaN values of the groups
    not touching the host, ``m`` the groups touching it) is at least ``x[(n - m - 1) // 2]``;
    a slow verdict over the ``k`` pooled groups' ``c >= k * min_steps`` usable values needs
    ``t >= min_ratio * ref`` in at least ``ceil(c / 2)`` of them.
    """
    out: set[str] = set()
    by_class: dict[tuple[str, str, int, int | None], list[str]] = {}
    for h, keys in touched.items():
        for key in keys:
            by_class.setdefault(key, []).append(h)
    factor = 0.99 * cfg.min_ratio
    for key, hs in by_class.items():
        members = classes[key]
        pos = {h: i for i, h in enumerate(hs)}
        touch = np.zeros(len(hs), np.int64)  # groups touching the host
        pair_h: list[int] = []  # (host, group) pairs of the host's inter-host groups
        pair_g: list[int] = []
        for j, g in enumerate(members):
            hg = hosts_in[id(g)]
            for h in hg:
                i = pos.get(h, -1)
                if i >= 0:
                    touch[i] += 1
                    if len(hg) > 1:
                        pair_h.append(i)
                        pair_g.append(j)
        t = np.vstack([g.t_ns for g in members])
        x = np.sort(t, axis=0)  # NaN last
        n = (~np.isnan(t)).sum(axis=0)[None, :]
        fin = np.isfinite(t)
        cols = np.arange(t.shape[1])
        m = touch[:, None]
        low = x[np.clip((n - m - 1) // 2, 0, None), cols]  # (H, S)
        high = x[np.clip(n - (n - m + 1) // 2, 0, len(members) - 1), cols]
        ph = np.asarray(pair_h, np.int64)
        tp = t[np.asarray(pair_g, np.int64)]
        lp = low[ph]
        with np.errstate(invalid="ignore", over="ignore"):
            mine = np.isfinite(tp) & (tp > 0)
            sure = (lp > 0) & (high[ph] < 1e300) & (fin.sum(axis=0) - m >= 2)[ph]
            above = mine & (tp > lp)  # each pooled group: above the reference in most steps
            each = (above.sum(axis=1) > 0) & (2 * above.sum(axis=1) > (mine & sure).sum(axis=1))
            hit = mine & (tp >= factor * lp) if factor > 0 else mine
        hits = np.bincount(ph, hit.sum(axis=1), len(hs))
        usable = np.bincount(ph, (mine & sure).sum(axis=1), len(hs))
        k = np.bincount(ph, minlength=len(hs))
        all_each = np.bincount(ph, ~each, len(hs)) == 0
        need = np.maximum(np.maximum(1, np.ceil(k * cfg.min_steps / 2)), np.ceil(usable / 2))
        ok = (k > 0) & (len(members) - touch >= cfg.min_groups) & (hits >= need) & all_each
        out.update(hs[i] for i in np.flatnonzero(ok).tolist())
    return out


def detect(
    windows: Sequence[GroupWindow],
    hosts: Mapping[int, str] | None = None,
    cfg: GroupwideConfig | None = None,
    records: Iterable[Mapping[str, object]] = (),
    routing: Routing | None = None,
) -> list[Finding]:
    """Hosts and groups whose collectives are slow against the other groups of their kind.

    Parameters
    ----------
    windows : sequence of GroupWindow
        One window of every comparison group of one job (all kinds: L2's input).
    hosts : mapping, optional
        Rank -> host (:func:`hosts_of`); missing ranks are on ``node<rank // gpus_per_host>``.
    cfg : GroupwideConfig
    records : iterable of step_record dicts, optional
        The window's records: their pipeline receives (:func:`receive_rows`) tell a host's
        p2p transfers apart, where the windows' summed phases hold only the waits.
    routing : Routing, optional
        For the receives' group ids (default routing).

    Returns
    -------
    list of Finding
        ``group_divergence`` findings at level L2, group kind ``host`` (id: the host) or the
        slow group's own; sorted by (group kind, group id).
    """
    if not windows:
        return []
    steps, stats, iter_ns = group_stats(windows)
    col = {int(x): i for i, x in enumerate(steps)}
    per_step: dict[int, list[Mapping[str, object]]] = {}
    for rec in records:
        per_step.setdefault(int(rec["step"]), []).append(rec)  # type: ignore[call-overload]
    rows = [(col[s], receive_rows(rs, routing)) for s, rs in per_step.items() if s in col]
    stats = [*stats, *receive_stats(rows, len(steps))]
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
    given = hosts or {}

    def name_of(r: int) -> str:
        return given.get(r) or f"node{r // cfg.gpus_per_host}"

    # every member rank's host, named once (a lookup per member below, not a call)
    at = {r: name_of(r) for r in set().union(*(g.members for g in stats))}

    def host(r: int) -> str:
        return at.get(r) or name_of(r)

    classes: dict[tuple[str, str, int, int | None], list[GroupStat]] = {}
    for g in stats:
        classes.setdefault(g.cls, []).append(g)
    of: dict[int, set[str]] = {}  # a members tuple's id -> its hosts (a group's phases share it)
    hosts_in = {
        id(g): of.get(id(g.members)) or of.setdefault(id(g.members), {at[r] for r in g.members})
        for g in stats
    }
    inter = [g for g in stats if len(hosts_in[id(g)]) > 1]
    waits = _wait_classes(classes, cfg)
    # a pipeline group's summed receives are mostly waits: its ranks' receives replace them
    rx = {(g.group_kind, g.phase) for g in stats if g.rank is not None}
    waits |= {k for k, gs in classes.items() if gs[0].rank is None and k[:2] in rx}
    # --- hosts: slow in every informative class --------------------------------------------
    evidence: dict[str, list[tuple[GroupStat, _Verdict]]] = {}
    touched: dict[str, list[tuple[str, str, int, int | None]]] = {}  # host -> its classes
    for key, members in classes.items():
        if key not in waits:
            for hh in set().union(*(hosts_in[id(g)] for g in members if len(hosts_in[id(g)]) > 1)):
                touched.setdefault(hh, []).append(key)
    maybe = _hosts_may_be_slow(classes, touched, hosts_in, cfg)
    for h in sorted(set().union(*(hosts_in[id(g)] for g in inter)) & maybe):
        ev: list[tuple[GroupStat, _Verdict]] = []
        failed = collective = False
        for key in touched.get(h, ()):
            members = classes[key]
            mine, rest = _touching(members, h, hosts_in)
            if not mine or len(rest) < cfg.min_groups:
                continue
            rx_class = mine[0].rank is not None  # receives identify; collectives must matter
            v = _slow(
                [g.t_ns for g in mine],
                [u.t_ns for u in rest],
                iter_ns,
                replace(cfg, min_abs_ms=0.0, min_step_share=0.0) if rx_class else cfg,
                mine[0].weight,
            )
            if not v.slow:
                # clearly not slow: under half the least slowdown it looks for; else a class
                # too noisy to tell (an all-to-all's summed micro-batches hold waits). Links
                # it only sends on count when slow: whether a sender's NIC shows in its
                # receiver's time depends on the transport (and on how a workload models it)
                sends = rx_class and host(mine[0].members[0]) != h
                if not sends and math.log(v.ratio) < 0.5 * math.log(cfg.min_ratio):
                    failed = True
                    break
                continue
            collective = collective or not rx_class
            ev += [(g, v) for g in mine]
        if ev and not failed and not collective:
            # only its pipeline receives tell it apart (tp 8: its collectives are those of
            # its whole stage): its collectives must then be slow against the other stages'
            more = _across_stages(h, stats, hosts_in, iter_ns, cfg)
            failed = not more
            ev += more
        if ev and not failed:
            evidence[h] = ev
    named = _split_ties(evidence, stats, hosts_in, iter_ns, cfg)
    win = _Window(job, start_ns, end_ns, steps, iter_ns, cfg, host)
    out = [_finding(win, "host", h, evidence[h]) for h in sorted(named)]
    # --- groups: slow against the rest of their class, not explained by a named host -------
    gcfg = replace(cfg, min_ratio=cfg.group_ratio, z=cfg.group_z)
    for members in classes.values():
        if len(members) - 1 < cfg.min_groups or members[0].rank is not None:
            continue
        screened = _may_be_slow(np.vstack([g.t_ns for g in members]), gcfg)
        for i in np.flatnonzero(screened).tolist():
            g = members[i]
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
        if g.stage is not None and g.rank is None and len(hosts_in[id(g)]) > 1:
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


def _wait_classes(
    classes: Mapping[tuple[str, str, int, int | None], Sequence[GroupStat]], cfg: GroupwideConfig
) -> set[tuple[str, str, int, int | None]]:
    """Receive classes that measure waits, not transfers: their typical shortest receive is
    ``wait_ratio`` x the shortest class's of the same group kind. A forward activation and
    its gradient have the same shape, so every receive of a pipeline moves the same bytes;
    a class far above the others never posts after its sender (1F1B's backward receives
    wait for the later stages' compute) and says nothing about a NIC."""
    med: dict[tuple[str, str, int, int | None], float] = {}
    for key, gs in classes.items():
        if gs[0].rank is None:
            continue
        t = np.concatenate([g.t_ns for g in gs])
        t = t[np.isfinite(t)]
        if t.size:
            med[key] = float(np.median(t))
    floor: dict[str, float] = {}
    for key, m in med.items():
        floor[key[0]] = min(floor.get(key[0], math.inf), m)
    return {k for k, m in med.items() if m > cfg.wait_ratio * floor[k[0]]}


def _across_stages(
    h: str,
    stats: Sequence[GroupStat],
    hosts_in: Mapping[int, set[str]],
    iter_ns: float,
    cfg: GroupwideConfig,
) -> list[tuple[GroupStat, _Verdict]]:
    """Host ``h``'s inter-host collective groups that share their class at their stage with
    no group free of ``h`` (tp 8: every DP group of a stage holds one rank of each of its
    hosts), pooled per (kind, phase, size) against the other stages' groups: the slow ones'
    evidence when at least one such comparison exists and every one is slow, else []. A NIC
    carries its host's rings as well as its receives; a pipeline waiting on a straggler
    upstream has slow receives but collectives of the stage's usual speed."""
    across: dict[tuple[str, str, int], list[GroupStat]] = {}
    for g in stats:
        if g.stage is not None and g.rank is None and len(hosts_in[id(g)]) > 1:
            across.setdefault((g.group_kind, g.phase, len(g.members)), []).append(g)
    ev: list[tuple[GroupStat, _Verdict]] = []
    for members in across.values():
        mine = [g for g in members if h in hosts_in[id(g)]]
        if not mine:
            continue
        stages = {g.stage for g in mine}
        same = [g for g in members if g.stage in stages]
        if any(h not in hosts_in[id(g)] for g in same):
            continue  # informative at its stage: judged there
        rest = [g for g in members if g.stage not in stages]
        if len(rest) < cfg.min_groups:
            continue
        v = _slow([g.t_ns for g in mine], [u.t_ns for u in rest], iter_ns, cfg)
        if not v.slow:
            return []
        ev += [(g, v) for g in mine]
    return ev


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
        if g.stage is not None and g.rank is None:
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
    gives the score, phase and durations; a collective before a receive link: it is what the
    step pays, the receives only tell the host apart)."""
    job, steps, iter_ns, cfg, host = win.job, win.steps, win.iter_ns, win.cfg, win.host
    start_ns, end_ns = win.start_ns, win.end_ns
    g0, v0 = max(ev, key=lambda gv: (gv[0].rank is None, gv[1].z))
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
