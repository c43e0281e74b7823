"""Group-wide and host faults in the steps roles: collectives compared across groups.

:mod:`argus.detectors.groupwide` compares every comparison group's *transfer time* with the
other groups of its kind, so it needs every group of the job at once, while the rank blocks
hold only their own groups. So each block reduces its own groups' collectives to one transfer
time per (group, phase) and step (:func:`transfer_rows`, a few bytes a group; :func:`batch_rows`
of the columnar batches the roles hold) and sends them in its digest; the job tier adds the
groups that span blocks (their windows are joined there anyway) and, when a step closes the
last step of a funnel window (``funnel_window_steps``), judges that window with
:func:`argus.detectors.groupwide.detect_stats`. The findings' window is the funnel's, so they
join the culprits of that window.

A block also reduces its ranks' pipeline receives (:func:`argus.detectors.groupwide.receive_rows`:
per rank and p2p phase the step's shortest receive, the transfer without the wait) to one row
each, kind ``<kind>>rx`` and members ``[rank, stage, entries]``: the step records' summed
receive phases are mostly waits, so only these tell a slow NIC's pipeline links apart (tp 8,
where a node's collectives are its whole stage's).

A group row's members travel with the block's hosts (its first digest, then every 64 steps);
other rows leave them empty (``[]``) and the job tier keeps them in ``steps-members``
(``job`` -> ``{"<kind>|<group id>": members}``).

A part's rows of a step travel and wait as columns (:func:`columns`,
:class:`~argus.streams.roles.state.TransferPart`: one list per field, not one tuple per row),
in the table ``steps-transfer`` under ``job|<step>|<part>`` (``b<block>``, ``job`` for the
spanning groups, ``m`` for the step's iteration time and span) until their window is judged;
the ranks' hosts under ``job`` in ``steps-hosts``. A part's key columns (kinds, group ids,
phases; the receive rows' up to the stage) are those of its previous step nearly always: the
job tier then keeps the previous step's lists (:meth:`TransferWindows.keep`), so a window
holds them once and :func:`_stats` finds a part's rows' places once. A digest or a state
from before columns (a list of rows) is read as its columns: nothing to drain or convert.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from argus.detectors import groupwide
from argus.detectors.columnar import GroupBatch
from argus.detectors.findings import Finding
from argus.detectors.l2 import GroupWindow
from argus.streams import metrics
from argus.streams.roles.context import RoleContext
from argus.streams.roles.state import TransferPart, TransferRow

__all__ = ["TransferWindows", "batch_columns", "batch_rows", "columns", "transfer_rows"]


RX = ">rx"  # kind suffix of a receive row


def transfer_rows(
    windows: Sequence[GroupWindow],
    records: Iterable[Mapping[str, Any]] = (),
    *,
    members: bool = True,
    receives: Sequence[groupwide.ReceiveRow] | None = None,
) -> list[TransferRow]:
    """One step's transfer time per (group, collective or p2p phase) of ``windows`` (windows
    of that one step): ``(kind, group id, phase, members, ns or None)``, members ``[]``
    unless ``members``; then one receive row per (rank, p2p phase) of ``records`` (that
    step's): ``(kind + ">rx", group id, phase, [rank, stage, entries], shortest ns)``;
    ``receives``: those records' :func:`~argus.detectors.groupwide.receive_rows`, already
    made (then ``records`` is not read)."""
    _steps, stats, _it = groupwide.group_stats(windows)
    rows: list[TransferRow] = [
        (
            g.group_kind,
            g.group_id,
            g.phase,
            list(g.members) if members else [],
            float(g.t_ns[0]) if g.t_ns.size and math.isfinite(g.t_ns[0]) else None,
        )
        for g in stats
    ]
    return rows + _rx_rows(records, receives)


def batch_rows(
    batches: Sequence[GroupBatch],
    records: Iterable[Mapping[str, Any]] = (),
    *,
    members: bool = True,
    receives: Sequence[groupwide.ReceiveRow] | None = None,
) -> list[TransferRow]:
    """:func:`transfer_rows` of the groups of ``batches`` (:mod:`argus.detectors.columnar`,
    one step): each batch's collectives reduced over all its groups at once
    (:func:`argus.detectors.groupwide.transfer_times`); the same rows in the same order
    (groups by kind and id). Batches of other than one common step take the windows' path."""
    steps = {tuple(b.steps.tolist()) for b in batches}
    if len(steps) > 1 or any(len(s) != 1 for s in steps):
        wins = sorted((w for b in batches for w in b.windows()), key=_group_key)
        return transfer_rows(wins, records, members=members, receives=receives)
    keyed: list[tuple[tuple[str, str], TransferRow]] = []
    for b in batches:
        times = groupwide.transfer_times(b.durations_ns[:, :, 0, :], b.stream_kinds)
        if not times:
            continue
        kind = b.group_kind
        ranks = b.ranks.tolist() if members else None  # a group's rows share its list
        cols = [(b.phases[j], t.tolist()) for j, t in times.items()]
        for i, gid in enumerate(b.group_ids):
            mem = ranks[i] if ranks is not None else []
            key = (kind, gid)
            for phase, ts in cols:
                ns = ts[i]
                keyed.append((key, (kind, gid, phase, mem, ns if math.isfinite(ns) else None)))
    keyed.sort(key=_first)  # stable: a group's phases stay in their order
    rows = [row for _, row in keyed]
    return rows + _rx_rows(records, receives)


def _rx_rows(
    records: Iterable[Mapping[str, Any]], receives: Sequence[groupwide.ReceiveRow] | None
) -> list[TransferRow]:
    """The receive rows (kind ``<kind>>rx``) of ``records``, or of ``receives`` if made."""
    if receives is None:
        receives = groupwide.receive_rows(records)
    return [
        (kind + RX, gid, ph, [rank, stage, n], ns) for kind, gid, ph, rank, stage, n, ns in receives
    ]


def columns(rows: Sequence[TransferRow]) -> TransferPart:
    """A part's rows of one step (:func:`batch_rows`) as columns
    (:class:`~argus.streams.roles.state.TransferPart`): its group rows and its receive rows
    each in their order; ``m`` only when a group row carries members."""
    grp, rxs = _split_rx(rows)
    if grp:
        kinds, gids, phases, ms, ts = zip(*grp, strict=True)
        out = TransferPart(k=list(kinds), g=list(gids), p=list(phases), t=list(ts))
        if any(ms):
            out["m"] = list(ms)
    else:
        out = TransferPart(k=[], g=[], p=[], t=[])
    if rxs:
        kinds, gids, phases, ms, ts = zip(*rxs, strict=True)
        strip = {k: k[: -len(RX)] for k in set(kinds)}
        ranks, stages, entries = zip(*ms, strict=True)
        out["rx"] = [
            list(map(strip.__getitem__, kinds)),
            list(gids),
            list(phases),
            list(ranks),
            list(stages),
            list(entries),
            list(ts),
        ]
    return out


def batch_columns(
    batches: Sequence[GroupBatch],
    records: Iterable[Mapping[str, Any]] = (),
    *,
    members: bool = True,
    receives: Sequence[groupwide.ReceiveRow] | None = None,
) -> TransferPart:
    """:func:`columns` of :func:`batch_rows` (what a digest carries), made from the batches'
    times at once: a part's groups and phases are the same step after step, so its key
    columns (and members) are made once per shape of its batches and are the very lists
    each step (:data:`_LAYOUTS`); only the times are new."""
    steps = {tuple(b.steps.tolist()) for b in batches}
    if len(steps) > 1 or any(len(s) != 1 for s in steps):
        return columns(batch_rows(batches, records, members=members, receives=receives))
    times: list[np.ndarray] = []  # per batch with transfer phases: (G, P') raveled
    shape: list[Any] = [members]
    for b in batches:
        ts = groupwide.transfer_times(b.durations_ns[:, :, 0, :], b.stream_kinds)
        if not ts:
            continue
        times.append(np.stack(list(ts.values()), axis=1).ravel())
        shape += [b.group_kind, b.group_ids, tuple(ts), b.phases]
        if members:
            shape.append(b.ranks.tobytes())
    key = tuple(shape)
    lay = _LAYOUTS.get(key)
    if lay is None:
        lay = _layout(batches, members)
        if len(_LAYOUTS) >= _MAX_LAYOUTS:
            _LAYOUTS.clear()
        _LAYOUTS[key] = lay
    k, g, p, m, order = lay
    if times:
        t = np.concatenate(times)[order]
        ok = np.isfinite(t)
        ns: list[float | None] = t.tolist()
        if not ok.all():
            ns = [x if keep else None for x, keep in zip(ns, ok.tolist(), strict=True)]
    else:
        ns = []
    out = TransferPart(k=k, g=g, p=p, t=ns)
    if m is not None:
        out["m"] = m
    rx = _rx_rows(records, receives)
    if rx:
        out["rx"] = columns(rx)["rx"]
    return out


_Layout = tuple[list[str], list[str], list[str], list[list[int]] | None, np.ndarray]
_LAYOUTS: dict[tuple[Any, ...], _Layout] = {}
"""A shape of batches (kinds, group ids, transfer phases, members) -> its part's key columns,
members and the order of its rows among the batches' times (:func:`batch_columns`)."""
_MAX_LAYOUTS = 4096


def _layout(batches: Sequence[GroupBatch], members: bool) -> _Layout:
    """The key columns, members (None: not sent) and row order of :func:`batch_columns`:
    groups by (kind, id), each group's transfer phases in the batch's order, as
    :func:`batch_rows` makes them."""
    groups: list[tuple[tuple[str, str], int, list[str], list[int]]] = []
    at = 0  # a group's first row among the batches' raveled times
    for b in batches:
        ts = groupwide.transfer_times(b.durations_ns[:, :, 0, :], b.stream_kinds)
        if not ts:
            continue
        phases = [b.phases[j] for j in ts]
        ranks = b.ranks.tolist() if members else [[]] * len(b.group_ids)
        for i, gid in enumerate(b.group_ids):
            groups.append(((b.group_kind, gid), at, phases, ranks[i]))
            at += len(phases)
    groups.sort(key=_first)  # stable: as batch_rows
    k: list[str] = []
    g: list[str] = []
    p: list[str] = []
    m: list[list[int]] = []
    order: list[int] = []
    for (kind, gid), first, phases, mem in groups:
        n = len(phases)
        k += [kind] * n
        g += [gid] * n
        p += phases
        m += [mem] * n
        order += range(first, first + n)
    return k, g, p, (m if members else None), np.asarray(order, np.int64)


def _part(v: TransferPart | Sequence[TransferRow]) -> TransferPart:
    """A stored or sent part as columns (a list of rows: from before columns)."""
    return v if isinstance(v, dict) else columns(v)


def _group_key(w: GroupWindow) -> tuple[str, str]:
    return (w.group_kind, w.group_id)


def _first(x: Sequence[Any]) -> Any:
    return x[0]


_KEY_COLS = ("k", "g", "p")  # a part's group rows' key columns
_RX_KEYS = 5  # a part's receive columns up to the stage are its keys
_SHARED_PARTS = 1 << 16  # (job, part)s whose last key columns the job tier keeps


class TransferWindows:
    """The job tier's cross-group comparison, one judgement per funnel window."""

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.width = ctx.pcfg.funnel_window_steps
        self.cfg = groupwide.GroupwideConfig()
        self.table = ctx.table("steps-transfer")
        self.hosts = ctx.table("steps-hosts")
        self.members = ctx.table("steps-members")
        # (job, part) -> the part's last kept columns, in this process only
        self.last: dict[tuple[str, str], TransferPart] = {}

    def keep(
        self, job: str, step: int, part: str, rows: TransferPart | Sequence[TransferRow]
    ) -> None:
        """Rows of ``step`` from ``part`` (a block, or ``job`` for the spanning groups), as
        columns or a list of rows; the groups' members the rows carry are kept for the rows
        that do not. Key columns equal to the part's previous ones are kept as those lists."""
        cols = _part(rows)
        if not cols["k"] and not cols.get("rx"):
            return
        cols = self._share(job, part, cols)
        self.table[f"{job}|{step}|{part}"] = cols
        ms = cols.get("m")
        if not ms or part == "job":  # the job tier's own rows always carry their members
            return
        known = self.members.get(job) or {}
        new: dict[str, list[int]] = {}
        last = None  # a group's rows (one per phase) are adjacent and carry the same members
        for k, g, m in zip(cols["k"], cols["g"], ms, strict=True):
            if not m or (k, g) == last:
                continue
            last = (k, g)
            key = f"{k}|{g}"
            mem = m if isinstance(m, list) else list(m)
            if known.get(key) != mem:
                new[key] = list(mem)
        if new:
            self.members[job] = {**known, **new}

    def _share(self, job: str, part: str, cols: TransferPart) -> TransferPart:
        """``cols`` with each key column equal to the part's last kept one replaced by it."""
        prev = self.last.get((job, part))
        if prev is not None:
            cols = TransferPart(**cols)
            for name in _KEY_COLS:
                c, w = cols[name], prev[name]  # type: ignore[literal-required]
                if c is not w and c == w:
                    cols[name] = w  # type: ignore[literal-required]
            rx, was = cols.get("rx"), prev.get("rx")
            if rx and was:
                cols["rx"] = [
                    w if j < _RX_KEYS and (c is w or c == w) else c
                    for j, (c, w) in enumerate(zip(rx, was, strict=True))
                ]
        elif len(self.last) >= _SHARED_PARTS:
            self.last.clear()
        self.last[(job, part)] = cols
        return cols

    def keep_hosts(self, job: str, hosts: Mapping[str, str]) -> None:
        known = self.hosts.get(job) or {}
        if any(known.get(r) != h for r, h in hosts.items()):
            self.hosts[job] = {**known, **hosts}

    def closed(
        self, job: str, step: int, iter_ns: float, span: tuple[int, int], blocks: int
    ) -> list[Finding]:
        """``step`` closed (``iter_ns``, its (start, end) ns; the job has ``blocks`` blocks):
        the findings of its funnel window when it is the window's last step, else none."""
        self.table[f"{job}|{step}|m"] = [iter_ns, span[0], span[1]]
        if (step + 1) % self.width:
            return []
        steps = list(range(step + 1 - self.width, step + 1))
        parts = [*(f"b{b}" for b in range(blocks)), "job"]
        meta: list[list[float]] = []
        rows: list[tuple[int, TransferPart | list[TransferRow]]] = []
        for i, s in enumerate(steps):
            for part in [*parts, "m"]:
                v = self.table.get(f"{job}|{s}|{part}")
                if v is None:
                    continue
                del self.table[f"{job}|{s}|{part}"]
                if part == "m":
                    meta.append(v)
                else:
                    rows.append((i, v))
        if not rows or not meta:
            return []
        t0 = time.perf_counter()
        found = groupwide.detect_stats(
            job,
            np.asarray(steps, np.int64),
            _stats(rows, len(steps), self.members.get(job) or {}),
            float(np.median([m[0] for m in meta])),
            (int(min(m[1] for m in meta)), int(max(m[2] for m in meta))),
            {int(r): h for r, h in (self.hosts.get(job) or {}).items()},
            self.cfg,
        )
        metrics.DETECT_S.labels("L2").observe(time.perf_counter() - t0)
        return found


def _stats(
    parts: Sequence[tuple[int, TransferPart | Sequence[TransferRow]]],
    n: int,
    members: Mapping[str, list[int]],
) -> list[groupwide.GroupStat]:
    """Parts of ``n`` steps (``(step index, columns or rows)``) -> one GroupStat per (group,
    phase), and one receive GroupStat per (rank, p2p phase)
    (:func:`argus.detectors.groupwide.receive_part_stats`); a group row without members
    takes them from ``members`` (``"<kind>|<id>"``), or is left out when they are unknown.

    A part's group rows of a (group, phase) already met are found with one lookup each (once
    per distinct key columns: a part's are the same lists step after step) and their times
    written at once; only a (group, phase)'s first row is looked at alone."""
    acc = _Groups(members)
    rx: list[tuple[int, list[list[Any]]]] = []
    for i, v in parts:
        cols = _part(v)
        if cols["k"]:
            acc.fill(cols, i)
        r = cols.get("rx")
        if r:
            if None in r[6]:  # rows without a time are left out
                keep = [j for j, t in enumerate(r[6]) if t is not None]
                r = [[c[j] for j in keep] for c in r]
            if r[0]:
                rx.append((i, r))
    rx.sort(key=_first_of)  # stable: a step's parts in their order
    return acc.stats(n) + groupwide.receive_part_stats(rx, n)


def _first_of(x: tuple[int, Any]) -> int:
    return x[0]


def _split_rx(rs: Sequence[TransferRow]) -> tuple[Sequence[TransferRow], Sequence[TransferRow]]:
    """A part's group rows and its receive rows, in their order; a slice each when the
    receive rows are the part's last (as :func:`batch_rows` makes them)."""
    kinds = [r[0] for r in rs]
    rxk = [k for k in set(kinds) if k.endswith(RX)]
    if not rxk:
        return rs, ()
    b = min(kinds.index(k) for k in rxk)
    if sum(kinds.count(k) for k in rxk) == len(rs) - b:  # every row from b on is a receive
        return rs[:b], rs[b:]
    return [r for r in rs if not r[0].endswith(RX)], [r for r in rs if r[0].endswith(RX)]


class _Groups:
    """The group rows of a window's parts, gathered for :func:`_stats`."""

    def __init__(self, members: Mapping[str, list[int]]) -> None:
        self.members = members  # "<kind>|<id>" -> members, for rows without
        self.index: dict[tuple[str, str, str], int] = {}  # (kind, gid, phase) -> its row
        self.mems: list[tuple[int, ...]] = []  # per row of the times
        self.fills: list[tuple[np.ndarray, int, np.ndarray]] = []  # (rows, step index, ns)
        self.places: dict[tuple[int, int, int], np.ndarray] = {}  # key columns' ids -> rows
        self.tuples: dict[int, tuple[int, ...]] = {}  # a members list's id -> its tuple

    def fill(self, cols: TransferPart, i: int) -> None:
        """A part's group rows (``cols``) of step index ``i``: their (group, phase)s' rows
        (a new one added at its first row with members, from the row or ``members``; rows
        before it are left out), and their times to write (None: not written). The rows
        found for key columns met before (the very lists) are reused when every row had one
        (rows are only added, so they stay right)."""
        kinds, gids, phases = cols["k"], cols["g"], cols["p"]
        ids = (id(kinds), id(gids), id(phases))
        at = self.places.get(ids)
        if at is None:
            at = self._find(cols)
            if (at >= 0).all():
                self.places[ids] = at
        ns = np.array(cols["t"], np.float64)  # None -> NaN, not written
        keep = ~np.isnan(ns) & (at >= 0)
        if keep.all():
            self.fills.append((at, i, ns))
        else:
            self.fills.append((at[keep], i, ns[keep]))

    def _find(self, cols: TransferPart) -> np.ndarray:
        index, ms = self.index, cols.get("m")
        keys = list(zip(cols["k"], cols["g"], cols["p"], strict=True))
        at = np.fromiter(map(index.get, keys, repeat(-1)), np.int64, len(keys))
        for r in np.flatnonzero(at < 0).tolist():  # a (group, phase) not met yet, or a repeat
            key = keys[r]
            j = index.get(key)
            if j is None:
                m = (ms[r] if ms else None) or self.members.get(f"{key[0]}|{key[1]}") or []
                if not m:
                    continue
                j = index[key] = len(self.mems)
                t = self.tuples.get(id(m))
                if t is None:
                    t = self.tuples[id(m)] = tuple(int(x) for x in m)
                self.mems.append(t)
            at[r] = j
        return at

    def stats(self, n: int) -> list[groupwide.GroupStat]:
        """One GroupStat per (group, phase) met, in key order, times of ``n`` steps."""
        t_ns = np.full((len(self.index), n), np.nan)
        for at, i, ns in self.fills:
            t_ns[at, i] = ns
        stages: dict[str, int | None] = {}
        out = []
        for (kind, gid, phase), j in sorted(self.index.items()):
            stage = (
                stages[gid] if gid in stages else stages.setdefault(gid, groupwide.stage_of(gid))
            )
            out.append(groupwide.GroupStat(kind, gid, phase, self.mems[j], stage, t_ns[j]))
        return out
