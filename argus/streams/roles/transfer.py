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

Rows wait in the table ``steps-transfer`` under ``job|<step>|<part>`` (``b<block>``, ``job`` for
the spanning groups, ``m`` for the step's iteration time and span) until their window is judged;
the ranks' hosts under ``job`` in ``steps-hosts``.
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
from argus.streams.roles.state import TransferRow

__all__ = ["TransferWindows", "batch_rows", "transfer_rows"]


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


def _group_key(w: GroupWindow) -> tuple[str, str]:
    return (w.group_kind, w.group_id)


def _first(x: tuple[tuple[str, str], TransferRow]) -> tuple[str, str]:
    return x[0]


class TransferWindows:
    """The job tier's cross-group comparison, one judgement per funnel window."""

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.width = ctx.pcfg.funnel_window_steps
        self.cfg = groupwide.GroupwideConfig()
        self.table = ctx.table("steps-transfer")
        self.hosts = ctx.table("steps-hosts")
        self.members = ctx.table("steps-members")

    def keep(self, job: str, step: int, part: str, rows: Sequence[TransferRow]) -> None:
        """Rows of ``step`` from ``part`` (a block, or ``job`` for the spanning groups); the
        groups' members the rows carry are kept for the rows that do not."""
        if not rows:
            return
        self.table[f"{job}|{step}|{part}"] = list(rows)
        known = self.members.get(job) or {}
        new: dict[str, list[int]] = {}
        last = None  # a group's rows (one per phase) are adjacent and carry the same members
        for k, g, _p, m, _t in rows:
            if not m or (k, g) == last or k.endswith(RX):
                continue
            last = (k, g)
            key = f"{k}|{g}"
            mem = m if isinstance(m, list) else list(m)
            if known.get(key) != mem:
                new[key] = list(mem)
        if new:
            self.members[job] = {**known, **new}

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
        rows: list[tuple[int, list[TransferRow]]] = []
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
    rows: Sequence[tuple[int, Sequence[TransferRow]]], n: int, members: Mapping[str, list[int]]
) -> list[groupwide.GroupStat]:
    """Rows of ``n`` steps (``(step index, rows)``) -> one GroupStat per (group, phase), and
    one receive GroupStat per (rank, p2p phase) (:func:`argus.detectors.groupwide.receive_stats`);
    a group row without members takes them from ``members`` (``"<kind>|<id>"``), or is left
    out when they are unknown.

    A part's rows are read as columns (a block's receive rows follow its group rows): its
    groups' rows of a (group, phase) already met are found with one lookup each and their
    times written at once; only a (group, phase)'s first row is looked at alone."""
    index: dict[tuple[str, str, str], int] = {}  # (kind, gid, phase) -> its row of the times
    mems: list[tuple[int, ...]] = []
    fills: list[tuple[np.ndarray, int, np.ndarray]] = []  # (rows, step index, ns), in order
    rx: dict[int, list[Sequence[TransferRow]]] = {}
    for i, rs in rows:
        grp, rxs = _split_rx(rs)
        if grp:
            _fill(grp, i, index, mems, fills, members)
        if rxs:
            rx.setdefault(i, []).append(rxs)
    t_ns = np.full((len(index), n), np.nan)
    for at, i, ns in fills:
        t_ns[at, i] = ns
    return [
        groupwide.GroupStat(kind, gid, phase, mems[j], groupwide.stage_of(gid), t_ns[j])
        for (kind, gid, phase), j in sorted(index.items())
    ] + groupwide.receive_column_stats(_rx_columns(sorted(rx.items())), n)


def _rx_columns(
    parts: Sequence[tuple[int, list[Sequence[TransferRow]]]],
) -> groupwide.ReceiveColumns:
    """Receive rows (``(step index, each part's receive rows)``) as the columns of
    :func:`argus.detectors.groupwide.receive_column_stats`, the suffix off their kinds and
    rows without a time left out (it makes ints of what it keeps)."""
    cols: list[list[Any]] = [[] for _ in range(8)]
    for i, chunks in parts:
        for rs in chunks:
            kinds, gids, phases, ms, ts = zip(*rs, strict=True)
            if None in ts:
                kept = [r for r in rs if r[4] is not None]
                if not kept:
                    continue
                kinds, gids, phases, ms, ts = zip(*kept, strict=True)
            strip = {k: k[: -len(RX)] for k in set(kinds)}
            ranks, stages, entries = zip(*ms, strict=True)
            for col, v in zip(
                cols,
                (
                    [i] * len(ts),
                    map(strip.__getitem__, kinds),
                    gids,
                    phases,
                    ranks,
                    stages,
                    entries,
                    ts,
                ),
                strict=True,
            ):
                col.extend(v)
    return tuple(cols)  # type: ignore[return-value]


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


def _fill(
    rs: Sequence[TransferRow],
    i: int,
    index: dict[tuple[str, str, str], int],
    mems: list[tuple[int, ...]],
    fills: list[tuple[np.ndarray, int, np.ndarray]],
    members: Mapping[str, list[int]],
) -> None:
    """Group rows ``rs`` of step index ``i``: their (group, phase)s' rows in ``index`` (a new
    one added at its first row with members, from the row or ``members``; rows before it are
    left out), and their times to write (``fills``; None: not written)."""
    kinds, gids, phases, ms, ts = zip(*rs, strict=True)
    keys = list(zip(kinds, gids, phases, strict=True))
    at = np.fromiter(map(index.get, keys, repeat(-1)), np.int64, len(keys))
    for r in np.flatnonzero(at < 0).tolist():  # a (group, phase) not met yet, or a repeat
        key = keys[r]
        j = index.get(key)
        if j is None:
            m = ms[r] or members.get(f"{key[0]}|{key[1]}") or []
            if not m:
                continue
            j = index[key] = len(mems)
            mems.append(tuple(int(x) for x in m))
        at[r] = j
    ns = np.array(ts, np.float64)  # None -> NaN, not written
    keep = (at >= 0) & ~np.isnan(ns)
    fills.append((at[keep], i, ns[keep]))
