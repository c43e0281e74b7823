"""Columnar L2 inputs: the group windows of one group kind and shape as one set of arrays.

The steps roles' rank blocks build, keep and judge every group of a kind at once instead of
one :class:`~argus.detectors.l2.GroupWindow` object per group:

* :func:`group_batches` - one step's (or window's) step rows -> :class:`GroupBatch` es, the
  groups of one kind and one shape (ranks x steps x phases) stacked; the windows of
  ``[w for b in batches for w in b.windows()]`` sorted by (kind, id) are exactly
  :func:`argus.detectors.inputs.group_windows` of the same records; :func:`cell_batches`
  the same of the step cells (:data:`Cell`, phases as tuples) the roles store, read as they
  are (no phase dicts, the self time one numpy pass per phase layout); a step whose cells
  have the ranks, coords and phase layouts of an earlier one reuses that step's plan (where
  each value goes), so a rank block's later steps only read and place their values;
* :func:`join_steps` - batches of the last few steps -> the sliding window's batches
  (concatenated along steps), or None when a group changed shape (the caller then merges
  windows the general way);
* :func:`detect_batches` - L2 of the batches: one vectorised screen per batch
  (:func:`argus.detectors.l2_batch.screen`), ``l2.detect`` on the groups it keeps; findings
  in (kind, id) order as one ``detect`` per group gives them;
* :func:`batch_to_json` / :func:`batch_from_json` - the persisted form (role state).

Rank -> group ids and rank -> layout span are looked up in tables built once per coords
(:class:`Topology`), not per record.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np

from argus.detectors import l2
from argus.detectors.config import L2Config
from argus.detectors.findings import Finding
from argus.detectors.l2 import GroupWindow
from argus.detectors.l2_batch import screen
from argus.errors import DetectorInputError
from argus.routing import Routing, group_span

__all__ = [
    "Cell",
    "GroupBatch",
    "Topology",
    "batch_from_json",
    "batch_to_json",
    "cell_batches",
    "cell_records",
    "detect_batches",
    "group_batches",
    "join_blocks",
    "join_steps",
]


class Topology:
    """Lookup tables of one routing: coords -> group id per kind, coords -> layout span.

    Keyed by the coords' items (a job's ranks share a handful of shapes of coords, one entry
    per rank), so each is computed once per rank, not once per record and phase.
    """

    def __init__(self, routing: Routing) -> None:
        self.routing = routing
        self._gid: dict[tuple[Any, ...], dict[str, str]] = {}
        self._span: dict[tuple[Any, ...], tuple[int, int]] = {}
        self._kind: dict[tuple[str, str], str] = {}
        self._layout: dict[tuple[tuple[str, str], ...], _Layout] = {}
        self._layouts = 0
        # one step's cells (ranks, coords, layouts in order) -> where their values go
        self._plans: dict[tuple[Any, ...], _CellPlan] = {}

    def kind_of(self, name: str, stream_kind: str) -> str:
        k = self._kind.get((name, stream_kind))
        if k is None:
            k = self._kind[(name, stream_kind)] = self.routing.kind_of(name, stream_kind)
        return k

    def gids(self, coords: Mapping[str, Any]) -> dict[str, str]:
        """``{kind: group id}`` of ``coords`` (filled per kind on first use)."""
        key = tuple(coords.items())
        try:
            out = self._gid.get(key)
        except TypeError:  # unhashable values: the routing's own check raises
            return _Uncached(self.routing, coords)
        if out is None:
            if len(self._gid) > 1 << 20:
                self._gid.clear()
            out = self._gid[key] = _Lazy(self.routing, coords)
        return out

    def layout(self, phases: tuple[tuple[str, str], ...]) -> _Layout:
        """The routing of one record's phase list ((name, stream kind), ...), once per list."""
        lay = self._layout.get(phases)
        if lay is None:
            if len(self._layout) > 4096:
                self._layout.clear()
            lay = self._layout[phases] = _Layout(self, phases, len(self._layout))
        return lay

    def span(self, coords: Mapping[str, Any], kind: str) -> tuple[int, int]:
        """:func:`argus.routing.group_span` of the group of ``kind`` holding ``coords``."""
        key = (kind, *coords.items())
        out = self._span.get(key)
        if out is None:
            if len(self._span) > 1 << 20:
                self._span.clear()
            out = self._span[key] = group_span(coords, self.routing.varies(kind))
        return out


class _Layout:
    """One phase list's routing: its group kinds (first seen first), each phase's kind slot,
    the (name, stream kind) pairs of each kind, and whether a name repeats."""

    def __init__(self, topo: Topology, phases: tuple[tuple[str, str], ...], n: int) -> None:
        topo._layouts += 1
        self.id = topo._layouts
        kinds = [topo.kind_of(name, sk) for name, sk in phases]
        self.kinds = list(dict.fromkeys(kinds))
        self.slot = [self.kinds.index(k) for k in kinds]
        self.phases_of = [
            [p for p, k in zip(phases, kinds, strict=True) if k == kk] for kk in self.kinds
        ]
        self.names = [name for name, _sk in phases]
        self.repeats = len(set(self.names)) < len(self.names)
        # the self time's inputs: positions of the p2p phases and of the compute phases
        self.p2p = [i for i, (_n, sk) in enumerate(phases) if sk == "p2p"]
        self.compute = [i for i, (_n, sk) in enumerate(phases) if sk == "compute"]


class _Lazy(dict[str, str]):
    """A coords' group ids, computed on the first lookup of each kind."""

    def __init__(self, routing: Routing, coords: Mapping[str, Any]) -> None:
        super().__init__()
        self.routing = routing
        self.coords = dict(coords)

    def __missing__(self, kind: str) -> str:
        gid = self[kind] = self.routing.group_for_kind(self.coords, kind)
        return gid


class _Uncached(_Lazy):
    def __missing__(self, kind: str) -> str:
        return self.routing.group_for_kind(self.coords, kind)


@dataclass(frozen=True)
class GroupBatch:
    """G comparison groups of one kind and one shape, stacked (L2 input).

    Attributes
    ----------
    job, group_kind : str
    group_ids : tuple of str
        (G,), sorted.
    ranks : (G, R) int64 array
        Each group's global ranks, ascending.
    steps : (S,) int64 array
    phases, stream_kinds : tuple of str
        (P,) phase names (sorted) and their stream kinds.
    durations_ns : (G, R, S, P) float64 array
        ns; NaN where a rank lacks the step or the phase.
    iter_ns : (G, R, S) float64 array
        ns; NaN: missing.
    start_ns, end_ns : (G,) int64 arrays
        Each group's event-time span, ns since epoch.
    coords : tuple of mappings
        (G,) the coords of one member of each group (its layout span).
    """

    job: str
    group_kind: str
    group_ids: tuple[str, ...]
    ranks: np.ndarray
    steps: np.ndarray
    phases: tuple[str, ...]
    stream_kinds: tuple[str, ...]
    durations_ns: np.ndarray
    iter_ns: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    coords: tuple[Mapping[str, Any], ...] = ()

    def window(self, i: int) -> GroupWindow:
        """Group ``i`` as a :class:`GroupWindow` (arrays are views; checked once per batch)."""
        w = object.__new__(GroupWindow)
        for name, v in (
            ("job", self.job),
            ("group_kind", self.group_kind),
            ("group_id", self.group_ids[i]),
            ("ranks", self.ranks[i]),
            ("steps", self.steps),
            ("phases", self.phases),
            ("stream_kinds", self.stream_kinds),
            ("durations_ns", self.durations_ns[i]),
            ("start_ns", int(self.start_ns[i])),
            ("end_ns", int(self.end_ns[i])),
            ("iter_ns", self.iter_ns[i]),
        ):
            object.__setattr__(w, name, v)
        return w

    def windows(self) -> list[GroupWindow]:
        return [self.window(i) for i in range(len(self.group_ids))]

    def take(self, idx: Sequence[int] | np.ndarray) -> GroupBatch:
        """The groups ``idx`` (ascending) of this batch."""
        ix = np.asarray(idx, dtype=np.int64)
        return GroupBatch(
            job=self.job,
            group_kind=self.group_kind,
            group_ids=tuple(self.group_ids[i] for i in ix.tolist()),
            ranks=self.ranks[ix],
            steps=self.steps,
            phases=self.phases,
            stream_kinds=self.stream_kinds,
            durations_ns=self.durations_ns[ix],
            iter_ns=self.iter_ns[ix],
            start_ns=self.start_ns[ix],
            end_ns=self.end_ns[ix],
            coords=tuple(self.coords[i] for i in ix.tolist()) if self.coords else (),
        )

    def shape_key(self) -> tuple[Any, ...]:
        """What two steps' batches share when :func:`join_steps` can concatenate them."""
        return (
            self.group_kind,
            self.group_ids,
            self.ranks.tobytes(),
            self.ranks.shape,
            self.phases,
            self.stream_kinds,
        )


class _Groups:
    """The groups one :func:`group_batches` call met: index by (kind, id) in first-seen order,
    one member's coords each, event-time span (ns) and iteration time per (group, rank, step)."""

    def __init__(self) -> None:
        self.idx: dict[tuple[str, str], int] = {}
        self.coords: list[Mapping[str, Any]] = []
        self.span: list[list[int]] = []
        self.iters: dict[tuple[int, int, int], float] = {}

    def index(self, kind: str, gid: str, coords: Mapping[str, Any], a: int, b: int) -> int:
        """The group's index, a new one (span ``[a, b]``) the first time."""
        gi = self.idx.get((kind, gid))
        if gi is None:
            gi = self.idx[(kind, gid)] = len(self.coords)
            self.coords.append(coords)
            self.span.append([a, b])
        return gi

    def saw(self, gi: int, rk: int, st: int, a: int, b: int) -> None:
        """Rank ``rk``'s step ``st`` (``[a, b]`` ns) is in group ``gi``."""
        self.iters[(gi, rk, st)] = float(b - a)
        sp = self.span[gi]
        if a < sp[0]:
            sp[0] = a
        if b > sp[1]:
            sp[1] = b


Cell = tuple[int, int, int, int, Mapping[str, Any], Sequence[Sequence[Any]]]
"""One rank's step as the steps roles keep it: ``(rank, step, start ns, end ns, coords,
phases)``, each phase ``(name, stream kind, duration ns, start ns)`` (a 3-tuple: the step's
start)."""


def group_batches(
    records: Iterable[Mapping[str, Any]], topo: Topology, *, job: str, self_time: bool = True
) -> list[GroupBatch]:
    """L2 inputs of ``records`` (one job's step records, phases as dicts), batched by group
    kind and shape: :func:`cell_batches` of their cells.

    The columnar form of :func:`argus.detectors.inputs.group_windows` (same values: phases of
    one name in one rank's step summed, compute phases on their self time), sorted by
    (kind, shape); each batch's groups by id.

    Raises
    ------
    DetectorInputError
        A phase with a negative or missing duration.
    """
    recs = records if isinstance(records, list) else list(records)
    cells: list[Cell] = []
    for rec in recs:
        phases = rec["phases"]
        if any(ph.get("duration_ns") is None or "start_ns" not in ph for ph in phases):
            return _group_batches(recs, topo, job=job, self_time=self_time)  # it decides
        cells.append(
            (
                int(rec["rank"]),
                int(rec["step"]),
                int(rec["start_ns"]),
                int(rec["end_ns"]),
                rec.get("coords") or {},
                [
                    (
                        ph["name"],
                        ph.get("stream_kind", "compute"),
                        ph["duration_ns"],
                        ph["start_ns"],
                    )
                    for ph in phases
                ],
            )
        )
    return cell_batches(cells, topo, job=job, self_time=self_time)


def cell_records(job: str, cells: Iterable[Cell]) -> list[dict[str, Any]]:
    """``cells`` as step records (phases as dicts), as :func:`group_windows` reads them."""
    return [
        {
            "job": job,
            "rank": rk,
            "step": st,
            "start_ns": a,
            "end_ns": b,
            "coords": coords,
            "phases": [  # each phase's own start: the self time needs it
                {
                    "name": ph[0],
                    "stream_kind": ph[1],
                    "duration_ns": ph[2],
                    "start_ns": ph[3] if len(ph) > 3 else a,
                }
                for ph in phases
            ],
        }
        for rk, st, a, b, coords, phases in cells
    ]


def cell_batches(
    cells: Sequence[Cell], topo: Topology, *, job: str, self_time: bool = True
) -> list[GroupBatch]:
    """:func:`group_batches` of one job's step cells (:data:`Cell`), read as they are stored.

    Cells of one phase layout and one coords share their routing (computed once); a rank's
    step seen twice, or a phase name twice in one cell, takes the general path (cells
    summed one at a time, :func:`cell_records`). The cells of one step whose ranks, coords
    and phase layouts (in order) are those of an earlier call reuse its plan (:class:`_CellPlan`:
    where each value goes), so a rank block's steps after its first only read their values.

    Raises
    ------
    DetectorInputError
        A phase with a negative or missing duration.
    """
    read = _step_values(cells, topo, self_time) if cells else None
    if read is not None:
        plan = topo._plans.get(read.key)
        if plan is not None:
            return plan.batches(job, cells, read)
    out, made = _cell_batches(cells, topo, job=job, self_time=self_time, plan=read is not None)
    if read is not None and made is not None:
        if len(topo._plans) >= _MAX_PLANS:
            topo._plans.pop(next(iter(topo._plans)))
        topo._plans[read.key] = made
    return out


_MAX_PLANS = 64  # plans a Topology keeps (a worker's rank blocks, a few layouts each)


@dataclass(frozen=True)
class _StepValues:
    """What :func:`_step_values` read of one step's cells: the plan key, the entries'
    values (ns, self times applied: ``cell_batches``' ``e_v``), each cell's start and end ns,
    and the step."""

    key: tuple[Any, ...]
    val: np.ndarray
    a: np.ndarray
    b: np.ndarray
    step: int


def _step_values(cells: Sequence[Cell], topo: Topology, self_time: bool) -> _StepValues | None:
    """One pass over the cells of one step: their plan key and values; None where a plan
    cannot apply (several steps, a step outside ``[0, 2**32)``, a missing or negative
    duration, unhashable coords: the general path decides)."""
    step = cells[0][1]
    if not 0 <= step < 1 << 32:
        return None
    key: list[Any] = [self_time]
    e_v: list[float] = []
    a_s: list[int] = []
    b_s: list[int] = []
    nest: dict[int, tuple[_Layout, list[int], list[list[Any]], list[Any]]] = {}
    for rk, st, a, b, coords, phases in cells:
        if st != step:
            return None
        lay = topo.layout(tuple([(ph[0], ph[1]) for ph in phases]))
        durs = [ph[2] for ph in phases]
        if any(d is None or d < 0 for d in durs):
            return None
        key.append((rk, tuple(coords.items()), lay.id))
        if self_time and lay.p2p and lay.compute:
            _l, at, starts, ds = nest.get(lay.id) or nest.setdefault(lay.id, (lay, [], [], []))
            at.append(len(e_v))
            starts.append([ph[3] if len(ph) > 3 else a for ph in phases])
            ds.append(durs)
        e_v.extend([float(d) for d in durs])
        a_s.append(a)
        b_s.append(b)
    try:
        k = tuple(key)
        hash(k)
    except TypeError:
        return None
    val = np.array(e_v, dtype=np.float64)
    for lay_n, at, starts, ds in nest.values():
        _self_times(val, lay_n, at, starts, ds)
    return _StepValues(
        k, val, np.array(a_s, dtype=np.int64), np.array(b_s, dtype=np.int64), int(step)
    )


@dataclass(frozen=True)
class _BatchPlan:
    """One output batch of a plan: its fixed fields, and where the values of a step go.

    ``src``/``dst``: entries (of ``_StepValues.val``) and their flat positions in the
    (G, R, 1, P) durations; ``it_cell``/``it_dst``: cells and their flat positions in the
    (G, R, 1) iteration times; ``sp_cell``/``sp_slot``: (cell, group) pairs of the spans;
    ``coords_cell``: per group the cell whose coords it keeps."""

    kind: str
    group_ids: tuple[str, ...]
    ranks: np.ndarray
    phases: tuple[str, ...]
    stream_kinds: tuple[str, ...]
    shape: tuple[int, int, int, int]
    src: np.ndarray
    dst: np.ndarray
    it_cell: np.ndarray
    it_dst: np.ndarray
    sp_cell: np.ndarray
    sp_slot: np.ndarray
    coords_cell: tuple[int, ...]


@dataclass(frozen=True)
class _CellPlan:
    """Where one step's cell values go in :func:`cell_batches`' output, for cells of the
    same ranks, coords and phase layouts in the same order (made by the general loop)."""

    parts: tuple[_BatchPlan, ...]

    def batches(self, job: str, cells: Sequence[Cell], read: _StepValues) -> list[GroupBatch]:
        it_all = (read.b - read.a).astype(np.float64)
        steps = np.array([read.step], dtype=np.int64) & 0xFFFFFFFF
        out: list[GroupBatch] = []
        for bp in self.parts:
            g, r, _s, p = bp.shape
            d = np.full(g * r * p, np.nan)
            d[bp.dst] = read.val[bp.src]
            it = np.full(g * r, np.nan)
            it[bp.it_dst] = it_all[bp.it_cell]
            start = np.full(g, np.iinfo(np.int64).max, dtype=np.int64)
            end = np.full(g, np.iinfo(np.int64).min, dtype=np.int64)
            np.minimum.at(start, bp.sp_slot, read.a[bp.sp_cell])
            np.maximum.at(end, bp.sp_slot, read.b[bp.sp_cell])
            out.append(
                GroupBatch(
                    job=job,
                    group_kind=bp.kind,
                    group_ids=bp.group_ids,
                    ranks=bp.ranks.copy(),
                    steps=steps,
                    phases=bp.phases,
                    stream_kinds=bp.stream_kinds,
                    durations_ns=d.reshape(bp.shape),
                    iter_ns=it.reshape(g, r, 1),
                    start_ns=start,
                    end_ns=end,
                    coords=tuple(cells[i][4] for i in bp.coords_cell),
                )
            )
        return out


def _cell_batches(
    cells: Sequence[Cell], topo: Topology, *, job: str, self_time: bool, plan: bool
) -> tuple[list[GroupBatch], _CellPlan | None]:
    """:func:`cell_batches` by the loop over cells; and its plan, when ``plan`` and the
    loop's fast path made the output (a single step's cells, checked by the caller)."""
    groups = _Groups()
    cols: tuple[list[int], list[int], list[int], list[str], list[float]] = ([], [], [], [], [])
    e_g, e_r, e_s, e_p, e_v = cols
    phase_kind: dict[tuple[int, str], str] = {}
    kinds_seen: set[tuple[int, int]] = set()  # (group, layout) whose phase kinds are noted
    done: set[tuple[int, int]] = set()
    # layout id -> its cells' first entries, phase starts and durations (ns): the self time
    nest: dict[int, tuple[_Layout, list[int], list[list[Any]], list[Any]]] = {}
    gidx, iters, span = groups.idx, groups.iters, groups.span
    dists: list[list[int]] = []  # per cell its groups (the plan's input)
    for rk, st, a, b, coords, phases in cells:
        gids = topo.gids(coords)
        lay = topo.layout(tuple([(ph[0], ph[1]) for ph in phases]))
        if lay.repeats or (rk, st) in done:
            recs = cell_records(job, cells)
            return _group_batches(recs, topo, job=job, self_time=self_time), None
        done.add((rk, st))
        dist: list[int] = []  # the record's group per kind of its layout
        for kind in lay.kinds:
            gi = gidx.get((kind, gids[kind]))
            dist.append(groups.index(kind, gids[kind], coords, a, b) if gi is None else gi)
        for j, gi in enumerate(dist):
            if (gi, lay.id) not in kinds_seen:
                kinds_seen.add((gi, lay.id))
                for name, sk in lay.phases_of[j]:
                    if (gi, name) not in phase_kind:
                        phase_kind[(gi, name)] = sk
        durs = [ph[2] for ph in phases]
        if any(d is None or d < 0 for d in durs):  # the general path raises
            recs = cell_records(job, cells)
            return _group_batches(recs, topo, job=job, self_time=self_time), None
        n = len(durs)
        e_g.extend([dist[j] for j in lay.slot])
        e_r.extend([rk] * n)
        e_s.extend([st] * n)
        e_p.extend(lay.names)
        if self_time and lay.p2p and lay.compute:  # self time: after the loop, per layout
            _l, at, starts, ds = nest.get(lay.id) or nest.setdefault(lay.id, (lay, [], [], []))
            at.append(len(e_v))
            starts.append([ph[3] if len(ph) > 3 else a for ph in phases])
            ds.append(durs)
        e_v.extend([float(d) for d in durs])
        if plan:
            dists.append(dist)
        it = float(b - a)
        for gi in dist:  # groups.saw(gi, rk, st, a, b)
            iters[(gi, rk, st)] = it
            sp = span[gi]
            if a < sp[0]:
                sp[0] = a
            if b > sp[1]:
                sp[1] = b
    if not e_v:
        return [], None
    rec: list[tuple[Any, ...]] | None = [] if plan else None
    if nest:
        val = np.array(e_v, dtype=np.float64)
        for lay_n, at, starts, ds in nest.values():
            _self_times(val, lay_n, at, starts, ds)
        out = _assemble(job, groups, (e_g, e_r, e_s, e_p, val), phase_kind, rec)
    else:
        out = _assemble(job, groups, cols, phase_kind, rec)
    if rec is None:
        return out, None
    return out, _make_plan(out, rec, dists, [c[0] for c in cells])


def _make_plan(
    out: list[GroupBatch],
    rec: list[tuple[Any, ...]],
    dists: list[list[int]],
    ranks: list[int],
) -> _CellPlan:
    """The plan of one step's output ``out``: ``rec`` (per batch, from :func:`_assemble`:
    its groups, its entries and their flat positions, its iteration times' ranks and flat
    positions), ``dists`` (per cell its groups) and the cells' ranks."""
    cell_of = {rk: i for i, rk in enumerate(ranks)}
    cells_of: dict[int, list[int]] = {}  # group -> its cells, in cell order
    for c, dist in enumerate(dists):
        for gi in dist:
            cells_of.setdefault(gi, []).append(c)
    parts = []
    for b, (members, src, dst, it_ranks, it_dst) in zip(out, rec, strict=True):
        sp_cell = [c for gi in members for c in cells_of[gi]]
        sp_slot = [k for k, gi in enumerate(members) for _c in cells_of[gi]]
        parts.append(
            _BatchPlan(
                kind=b.group_kind,
                group_ids=b.group_ids,
                ranks=b.ranks.copy(),
                phases=b.phases,
                stream_kinds=b.stream_kinds,
                shape=(b.durations_ns.shape[0], b.durations_ns.shape[1], 1, len(b.phases)),
                src=src,
                dst=dst,
                it_cell=np.array([cell_of[int(rk)] for rk in it_ranks], dtype=np.int64),
                it_dst=it_dst,
                sp_cell=np.array(sp_cell, dtype=np.int64),
                sp_slot=np.array(sp_slot, dtype=np.int64),
                coords_cell=tuple(cells_of[gi][0] for gi in members),
            )
        )
    return _CellPlan(tuple(parts))


def _self_times(
    val: np.ndarray, lay: _Layout, at: list[int], starts: list[list[Any]], durs: list[Any]
) -> None:
    """Subtract from each compute phase's value in ``val`` (its duration, ns) the p2p time
    nested inside it: :func:`argus.detectors.inputs.nested_waits` of the cells of layout
    ``lay`` whose entries start at ``at``, phases starting at ``starts`` and lasting
    ``durs`` (ns), all at once; the same values as ``group_windows`` gives."""
    s = np.array(starts, dtype=np.int64)
    d = np.array(durs, dtype=np.int64)
    e = s + d
    c, w = lay.compute, lay.p2p
    overlap = np.minimum(e[:, c, None], e[:, None, w]) - np.maximum(s[:, c, None], s[:, None, w])
    nested = np.minimum(np.clip(overlap, 0, None).sum(axis=2), d[:, c])
    pos = np.asarray(at, dtype=np.int64)[:, None] + np.asarray(c, dtype=np.int64)[None, :]
    val[pos] -= nested.astype(np.float64)


def _group_batches(
    records: Iterable[Mapping[str, Any]], topo: Topology, *, job: str, self_time: bool = True
) -> list[GroupBatch]:
    """:func:`group_batches` in general: every cell summed one at a time."""
    from argus.detectors.inputs import nested_waits

    groups = _Groups()
    cells: dict[tuple[int, int, int, str], int] = {}  # -> entry
    cols: tuple[list[int], list[int], list[int], list[str], list[float]] = ([], [], [], [], [])
    e_g, e_r, e_s, e_p, e_v = cols
    phase_kind: dict[tuple[int, str], str] = {}
    kind_of = topo.kind_of
    for rec in records:
        rk, st = int(rec["rank"]), int(rec["step"])
        a, b = int(rec["start_ns"]), int(rec["end_ns"])
        coords = rec.get("coords") or {}
        gids = topo.gids(coords)
        phases = rec["phases"]
        nested = nested_waits(phases) if self_time else {}
        seen: set[int] = set()
        for ph in phases:
            name, sk, dur = ph["name"], ph.get("stream_kind", "compute"), ph.get("duration_ns")
            kind = kind_of(name, sk)
            gi = groups.index(kind, gids[kind], coords, a, b)
            if dur is None or dur < 0:
                raise DetectorInputError(
                    f"step_record {job}/{rk} step {st}: phase {name!r} has "
                    f"duration_ns {dur!r}; must be >= 0"
                )
            ck = (gi, rk, st, name)
            at = cells.get(ck)
            if at is None:  # as group_windows: (0.0 + dur) - nested, then (sum + dur) - nested
                cells[ck] = len(e_v)
                e_g.append(gi)
                e_r.append(rk)
                e_s.append(st)
                e_p.append(name)
                e_v.append(0.0 + float(dur) - nested.get(id(ph), 0.0))
            else:
                e_v[at] = e_v[at] + float(dur) - nested.get(id(ph), 0.0)
            if (gi, name) not in phase_kind:
                phase_kind[(gi, name)] = sk
            if gi not in seen:
                seen.add(gi)
                groups.saw(gi, rk, st, a, b)
    if not e_v:
        return []
    return _assemble(job, groups, cols, phase_kind)


def _assemble(
    job: str,
    met: _Groups,
    cols: tuple[list[int], list[int], list[int], list[str], list[float] | np.ndarray],
    phase_kind: dict[tuple[int, str], str],
    rec: list[tuple[Any, ...]] | None = None,
) -> list[GroupBatch]:
    """The arrays of :func:`group_batches` from its cells (numpy, no loop over cells);
    ``rec``: a list that gets, per batch, its groups, its entries and their flat positions
    in the durations, the ranks of its iteration times and their flat positions (a plan's
    input, :func:`_make_plan`)."""
    gidx, g_coords, g_span, iters = met.idx, met.coords, met.span, met.iters
    names: list[str] = sorted(set(cols[3]))
    name_id = {n: i for i, n in enumerate(names)}
    ph = np.array([name_id[n] for n in cols[3]], dtype=np.int64)
    g = np.array(cols[0], dtype=np.int64)
    rk = np.array(cols[1], dtype=np.int64)
    st = np.array(cols[2], dtype=np.int64)
    val = np.array(cols[4], dtype=np.float64)
    n_g = len(g_coords)
    r_pos, r_n, r_u, r_first = _positions(g, rk, n_g)
    s_pos, s_n, s_u, s_first = _positions(g, st, n_g)
    p_pos = _positions(g, ph, n_g)[0]
    # each group's signature, one row: its kind, its ranks' count, its steps (0/1 per step
    # met) and its phases (per phase name: 0, or 1 + the stream kind's id phase_kind has)
    sk_names = sorted(set(phase_kind.values()))
    sk_id = {k: i + 1 for i, k in enumerate(sk_names)}
    pk = np.array([(gi, name_id[n], sk_id[k]) for (gi, n), k in phase_kind.items()], dtype=np.int64)
    in_order = sorted(gidx.items())  # (kind, gid) order
    kind_id = {k: i for i, k in enumerate(sorted({k for (k, _g), _i in in_order}))}
    by_order = np.array([gi for _k, gi in in_order], dtype=np.int64)
    step_u, step_i = np.unique(st, return_inverse=True)
    n_s = step_u.size
    sig = np.zeros((n_g, 2 + n_s + len(names)), dtype=np.int64)
    sig[by_order, 0] = [kind_id[k] for (k, _g), _i in in_order]
    sig[:, 1] = r_n
    sig[g, 2 + step_i.ravel()] = 1
    sig[pk[:, 0], 2 + n_s + pk[:, 1]] = pk[:, 2]
    # batches in the order of their first group, (kind, gid) order inside each
    _u, at, inv = np.unique(sig[by_order], axis=0, return_index=True, return_inverse=True)
    rank = np.empty(at.size, dtype=np.int64)
    rank[np.argsort(at, kind="stable")] = np.arange(at.size)
    b_sorted = rank[inv.ravel()]
    by_batch = np.argsort(b_sorted, kind="stable")
    cuts = np.searchsorted(b_sorted[by_batch], np.arange(at.size + 1)).tolist()
    batch_of = np.empty(n_g, dtype=np.int64)
    batch_of[by_order] = b_sorted
    slot = np.empty(n_g, dtype=np.int64)
    groups: list[list[int]] = []
    for bi in range(at.size):
        mem = by_order[by_batch[cuts[bi] : cuts[bi + 1]]]
        slot[mem] = np.arange(mem.size)
        groups.append(mem.tolist())
    eb = batch_of[g]
    n_i = len(iters)
    ie = np.fromiter(chain.from_iterable(iters), dtype=np.int64, count=3 * n_i).reshape(-1, 3)
    iv = np.fromiter(iters.values(), dtype=np.float64, count=n_i)
    gid_of = {gi: gid for (_k, gid), gi in gidx.items()}
    spans = np.array(g_span, dtype=np.int64).reshape(-1, 2)
    r_low = r_u & 0xFFFFFFFF
    out: list[GroupBatch] = []
    kinds = list(kind_id)
    for bi, members in enumerate(groups):
        m = np.asarray(members, dtype=np.int64)
        g0 = members[0]
        row = sig[g0]
        kind, r = kinds[row[0]], int(row[1])
        steps = s_u[s_first[g0] : s_first[g0] + s_n[g0]] & 0xFFFFFFFF
        has = np.flatnonzero(row[2 + n_s :])
        phs = tuple(names[x] for x in has.tolist())
        sks = tuple(sk_names[x - 1] for x in row[2 + n_s + has].tolist())
        s, p = steps.size, len(phs)
        d = np.full((m.size, r, s, p), np.nan)
        sel = eb == bi
        d[slot[g[sel]], r_pos[sel], s_pos[sel], p_pos[sel]] = val[sel]
        it = np.full((m.size, r, s), np.nan)
        isel = batch_of[ie[:, 0]] == bi
        ig = ie[isel, 0]
        ir = np.searchsorted(r_u, (ig << 32) | ie[isel, 1]) - r_first[ig]
        it_at = (slot[ig], ir, np.searchsorted(steps, ie[isel, 2]))
        it[it_at] = iv[isel]
        if rec is not None:
            src = np.flatnonzero(sel)
            e_at = (slot[g[src]], r_pos[src], s_pos[src], p_pos[src])
            rec.append(
                (
                    members,
                    src,
                    np.ravel_multi_index(e_at, d.shape),
                    ie[isel, 1],
                    np.ravel_multi_index(it_at, it.shape),
                )
            )
        out.append(
            GroupBatch(
                job=job,
                group_kind=kind,
                group_ids=tuple(gid_of[gi] for gi in members),
                ranks=r_low[r_first[m][:, None] + np.arange(r)[None, :]],
                steps=steps,
                phases=phs,
                stream_kinds=sks,
                durations_ns=d,
                iter_ns=it,
                start_ns=spans[m, 0],
                end_ns=spans[m, 1],
                coords=tuple(g_coords[gi] for gi in members),
            )
        )
    return out


def _positions(
    g: np.ndarray, x: np.ndarray, n_g: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per entry, the position of ``x`` (>= 0, < 2**32) among its group's sorted distinct
    values; per group their count; the sorted keys ``group << 32 | x`` and each group's
    first among them."""
    u = np.unique((g << 32) | x)
    ug = u >> 32
    first = np.searchsorted(ug, np.arange(n_g))
    pos = np.searchsorted(u, (g << 32) | x) - first[g]
    counts = np.bincount(ug, minlength=n_g)
    return pos, counts, u, first


def join_steps(per_step: Sequence[Sequence[GroupBatch]]) -> list[GroupBatch] | None:
    """The sliding window's batches from each step's (steps ascending, disjoint): each
    batch concatenated along steps; None when the steps' batches differ in their groups,
    ranks or phases (a rank joined or left; the caller merges windows in general)."""
    if not per_step:
        return []
    first = per_step[0]
    keys = [b.shape_key() for b in first]
    for batches in per_step[1:]:
        if len(batches) != len(first) or [b.shape_key() for b in batches] != keys:
            return None
    if len(per_step) == 1:
        return list(first)
    out = []
    for i, b0 in enumerate(first):
        parts = [batches[i] for batches in per_step]
        out.append(
            GroupBatch(
                job=b0.job,
                group_kind=b0.group_kind,
                group_ids=b0.group_ids,
                ranks=b0.ranks,
                steps=np.concatenate([b.steps for b in parts]),
                phases=b0.phases,
                stream_kinds=b0.stream_kinds,
                durations_ns=np.concatenate([b.durations_ns for b in parts], axis=2),
                iter_ns=np.concatenate([b.iter_ns for b in parts], axis=2),
                start_ns=np.min([b.start_ns for b in parts], axis=0),
                end_ns=np.max([b.end_ns for b in parts], axis=0),
                coords=b0.coords,
            )
        )
    return out


def join_blocks(parts: Sequence[GroupBatch]) -> list[GroupBatch] | None:
    """One step's batches from several rank blocks joined per group: a group's parts (same
    steps and phases, disjoint ranks) concatenated along ranks, sorted by rank, as
    :func:`argus.detectors.inputs.merge_group_windows` joins them; the groups whose parts lie
    in the same batches are joined in one go. None when a group's parts differ in steps or
    phases, or share a rank (the caller then merges windows in general)."""
    out: list[GroupBatch] = []
    for pat, gids, rows in _join_plan(parts):
        bs = [parts[bi] for bi in pat]
        b0 = bs[0]
        if any(
            b.phases != b0.phases
            or b.stream_kinds != b0.stream_kinds
            or not np.array_equal(b.steps, b0.steps)
            for b in bs[1:]
        ):
            return None
        if len(pat) == 1:
            out.append(b0.take(rows[:, 0]))
            continue
        ranks = np.concatenate([b.ranks[rows[:, j]] for j, b in enumerate(bs)], axis=1)
        order = np.argsort(ranks, axis=1, kind="stable")
        ranks = np.take_along_axis(ranks, order, axis=1)
        if (np.diff(ranks, axis=1) <= 0).any():
            return None
        d = np.concatenate([b.durations_ns[rows[:, j]] for j, b in enumerate(bs)], axis=1)
        it = np.concatenate([b.iter_ns[rows[:, j]] for j, b in enumerate(bs)], axis=1)
        out.append(
            GroupBatch(
                job=b0.job,
                group_kind=b0.group_kind,
                group_ids=gids,
                ranks=ranks,
                steps=b0.steps,
                phases=b0.phases,
                stream_kinds=b0.stream_kinds,
                durations_ns=np.take_along_axis(d, order[:, :, None, None], axis=1),
                iter_ns=np.take_along_axis(it, order[:, :, None], axis=1),
                start_ns=np.min([b.start_ns[rows[:, j]] for j, b in enumerate(bs)], axis=0),
                end_ns=np.max([b.end_ns[rows[:, j]] for j, b in enumerate(bs)], axis=0),
            )
        )
    return out


_Plan = list[tuple[tuple[int, ...], tuple[str, ...], np.ndarray]]
_PLANS: dict[tuple[tuple[str, tuple[str, ...]], ...], _Plan] = {}


def _join_plan(parts: Sequence[GroupBatch]) -> _Plan:
    """Which groups of ``parts`` :func:`join_blocks` joins, and from where: per pattern of
    parts holding a group (part indices), its groups' ids (sorted) and rows (G, parts).
    It depends on the parts' kinds and group ids alone, which a job's blocks repeat step
    after step: kept for the last few sets of them."""
    key = tuple((b.group_kind, b.group_ids) for b in parts)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
    where: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for bi, b in enumerate(parts):
        for row, gid in enumerate(b.group_ids):
            where.setdefault((b.group_kind, gid), []).append((bi, row))
    pats: dict[tuple[int, ...], list[tuple[str, list[int]]]] = {}
    for (_kind, gid), locs in where.items():
        pats.setdefault(tuple(bi for bi, _ in locs), []).append((gid, [r for _, r in locs]))
    plan = []
    for pat, items in pats.items():
        items.sort(key=lambda x: x[0])
        rows = np.array([r for _, r in items], dtype=np.int64)  # (G, parts)
        rows.setflags(write=False)
        plan.append((pat, tuple(gid for gid, _ in items), rows))
    if len(_PLANS) >= 16:
        _PLANS.pop(next(iter(_PLANS)))
    _PLANS[key] = plan
    return plan


def detect_batches(batches: Sequence[GroupBatch], cfg: L2Config | None = None) -> list[Finding]:
    """``l2.detect`` of every group of ``batches``, in (kind, id) order, each batch screened
    in one pass (:func:`argus.detectors.l2_batch.screen`)."""
    cfg = cfg or L2Config()
    found: list[tuple[str, str, list[Finding]]] = []
    for b in batches:
        if not b.group_ids:
            continue
        for i in np.flatnonzero(screen(b.durations_ns, b.iter_ns, b.stream_kinds, cfg)).tolist():
            f = l2.detect(b.window(i), cfg)
            if f:
                found.append((b.group_kind, b.group_ids[i], f))
    found.sort(key=lambda x: (x[0], x[1]))
    return [f for _k, _g, fs in found for f in fs]


_NA_U4 = 0xFFFFFFFF  # a missing time (NaN) among "u4" times


def _times_bytes(t: np.ndarray) -> tuple[bytes, bool]:
    """Times (ns, float64, NaN: missing) as bytes: ``"<u4"`` (NaN as :data:`_NA_U4`) when
    every present value is a whole number, not negative (nor -0.0), below it - exact, half the bytes - else ``"<f8"``;
    True: the former."""
    nan = np.isnan(t)
    u = np.where(nan, 0.0, t)
    if not u.size or (
        not np.signbit(u).any() and u.max() < _NA_U4 and np.array_equal(u, np.floor(u))
    ):
        return np.where(nan, _NA_U4, u).astype("<u4").tobytes(), True
    return t.astype("<f8").tobytes(), False


def batch_to_json(b: GroupBatch) -> dict[str, Any]:
    """A batch as JSON: ``{"k", "gs", "r", "s", "p", "sk", "x"[, "u4"]}``: kind, ids, ranks
    per group, steps, phases, stream kinds and one base64 buffer, little-endian: the (G,)
    start and end ns (int64), the (G, R) ranks (int32, Avro's ``rank``), then the (G, R, S, P)
    durations and (G, R, S) iteration times, as uint32 (``"u4": true``; NaN = 2**32 - 1)
    when every present one is a whole number of ns below 2**32 - 1, else float64: one decode
    a batch. The job is the key's. ``"gs"`` (a list) tells it from a single window
    (:func:`argus.streams.step_digest.window_to_json`); an int ``"r"`` from the earlier
    form (:func:`batch_from_json` reads both).
    """
    r = b.ranks.shape[1]
    if b.ranks.size and (int(b.ranks.min()) < 0 or int(b.ranks.max()) >= 2**31):
        raise DetectorInputError("ranks must be 0 <= rank < 2**31 (Avro int)")
    times, u4 = _times_bytes(np.concatenate((b.durations_ns.ravel(), b.iter_ns.ravel())))
    buf = b"".join(
        (
            np.ascontiguousarray(b.start_ns, dtype="<i8").tobytes(),
            np.ascontiguousarray(b.end_ns, dtype="<i8").tobytes(),
            np.ascontiguousarray(b.ranks, dtype="<i4").tobytes(),
            times,
        )
    )
    d: dict[str, Any] = {
        "k": b.group_kind,
        "gs": list(b.group_ids),
        "r": r,
        "s": b.steps.tolist(),
        "p": list(b.phases),
        "sk": list(b.stream_kinds),
        "x": base64.b64encode(buf).decode(),
    }
    if u4:
        d["u4"] = True
    return d


def batch_from_json(job: str, d: Mapping[str, Any]) -> GroupBatch:
    """The inverse of :func:`batch_to_json` (no coords: a restored batch is judged, not
    split again); the earlier form (``"r"`` the (G, R) ranks as lists, ``"a"``/``"b"`` lists,
    ``"d"``/``"it"`` base64 float64) too."""
    if not isinstance(d["r"], int):
        return _batch_from_lists(job, d)
    g, r, s, p = len(d["gs"]), d["r"], len(d["s"]), len(d["p"])
    buf = binascii.a2b_base64(d["x"])
    n = g * r
    se = np.frombuffer(buf, "<i8", 2 * g).astype(np.int64)
    ranks = np.frombuffer(buf, "<i4", n, offset=16 * g).astype(np.int64)
    off = 16 * g + 4 * n
    if d.get("u4"):
        u = np.frombuffer(buf, "<u4", offset=off)
        t = u.astype(np.float64)
        t[u == _NA_U4] = np.nan
    else:
        t = np.frombuffer(buf, "<f8", offset=off).astype(np.float64)
    return GroupBatch(
        job=job,
        group_kind=d["k"],
        group_ids=tuple(d["gs"]),
        ranks=ranks.reshape(g, r),
        steps=np.asarray(d["s"], dtype=np.int64),
        phases=tuple(d["p"]),
        stream_kinds=tuple(d["sk"]),
        durations_ns=t[: n * s * p].reshape(g, r, s, p),
        iter_ns=t[n * s * p :].reshape(g, r, s),
        start_ns=se[:g],
        end_ns=se[g:],
    )


def _arr(s: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<f8").reshape(shape).copy()


def _batch_from_lists(job: str, d: Mapping[str, Any]) -> GroupBatch:
    """A batch of the form before one buffer (digests in flight, state from before)."""
    ranks = np.asarray(d["r"], dtype=np.int64).reshape(len(d["gs"]), -1)
    g, r = ranks.shape
    s, p = len(d["s"]), len(d["p"])
    return GroupBatch(
        job=job,
        group_kind=d["k"],
        group_ids=tuple(d["gs"]),
        ranks=ranks,
        steps=np.asarray(d["s"], dtype=np.int64),
        phases=tuple(d["p"]),
        stream_kinds=tuple(d["sk"]),
        durations_ns=_arr(d["d"], (g, r, s, p)),
        iter_ns=_arr(d["it"], (g, r, s)),
        start_ns=np.asarray(d["a"], dtype=np.int64),
        end_ns=np.asarray(d["b"], dtype=np.int64),
    )
