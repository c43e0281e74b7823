"""L3 over one window of kernel summaries: (kernel, stream) x comparison group -> findings.

Input is, per rank, its cluster summaries (:class:`argus.summaries.Summary`) by
``(kernel name, stream id)`` for the window (several summaries of the same key, e.g. one per
step, are merged into one mixture). For every **scope group** (default kind ``dp``: ranks
doing the same work, i.e. DP replicas at the same PP stage / TP rank / CP rank) and every
``(kernel, stream)`` the quantile matrix is built with
:func:`argus.summaries.lognormal.quantile_matrix` and

* ranks are scored within the scope group (:func:`argus.detectors.l3.score_ranks`) ->
  ``kernel_divergence`` findings naming ranks, each beyond chance among all the scope's
  (rank, kernel) tests of the window (``l3.rank_alpha``);
* the scope group's ranks are partitioned by each **partition kind** (default ``edp`` and
  ``ep``) and the parts compared with each other (:func:`argus.detectors.l3.compare_groups`)
  -> ``group_divergence`` findings naming a group (paper case 2) when the group is slower
  and its ranks (all, or all but one) are among the scope's slowest beyond chance over the
  groups compared.

A block's (scope, kernel) cells are judged in stacked passes: all their quantile matrices in
one call, then cells of the same rank count screened together; only the few cells that may
name something run the per-cell functions above, so the findings are theirs, bit for bit
(``detect_window(..., stacked=False)`` runs every cell on its own).
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
from scipy.special import ndtri

from argus.detectors.config import L3Config
from argus.detectors.findings import Finding
from argus.detectors.l3 import compare_groups, score_ranks, screen_groups, screen_ranks
from argus.routing import Routing
from argus.summaries import (
    BatchError,
    KernelNames,
    Summary,
    default_probs,
    log_quantiles,
    logq_rows,
    mixture_quantile_rows,
    summary_columns,
)
from argus.summaries.lognormal import mixture_quantile_cells, nondecreasing_rows
from argus.summaries.quantile_wire import decode_log16_ln, median_index

__all__ = [
    "KernelTable",
    "RankKernels",
    "WireSummary",
    "detect_window",
    "merge_summaries",
    "table_from_summaries",
    "table_from_wire",
    "wire_summary",
]

KernelKey = tuple[str, int]  # (kernel name, stream id)


@dataclass(frozen=True)
class RankKernels:
    """One rank's kernel summaries in a window.

    Attributes
    ----------
    rank : int
    coords : mapping
        The rank's ``Coords`` record.
    summaries : mapping (kernel name, stream id) -> Summary
    stream_kinds : mapping stream id -> str
        ``compute`` | ``comm`` | ``p2p`` | ``unknown`` (from ``kernel_batch.streams``).
    """

    rank: int
    coords: Mapping[str, Any]
    summaries: Mapping[KernelKey, Summary] = field(default_factory=dict)
    stream_kinds: Mapping[int, str] = field(default_factory=dict)


def merge_summaries(parts: Sequence[Summary]) -> Summary:
    """One mixture Summary from several Summaries of the same group (counts add up).

    All parts must share their quantile levels (they come from one summary method).
    """
    if len(parts) == 1:
        return parts[0]
    lv = parts[0].quantile_levels
    return Summary(
        lv,
        np.concatenate([p.counts for p in parts]),
        np.concatenate([p.quantiles_ns for p in parts], axis=0),
        parts[0].method,
        int(sum(p.rejected for p in parts)),
    )


@dataclass(frozen=True, eq=False)
class KernelTable:
    """Kernel clusters of many ranks in one window, as flat columns (the L3 input).

    Building one Summary object per (rank, kernel) costs more than the detector itself at
    thousands of ranks; the stream agent builds this table straight from the wire columns
    (:func:`table_from_summaries`).

    Attributes
    ----------
    ranks : (R,) int64
        Ranks, increasing.
    coords : list of R mappings
        Each rank's ``Coords`` record.
    stream_kinds : list of R mappings stream id -> kind
    keys : list of K (kernel name, stream id)
        Sorted.
    c_rank : (C,) int64
        Index into ``ranks`` of each cluster.
    c_key : (C,) int64
        Index into ``keys`` of each cluster.
    counts : (C,) float64
        Events per cluster.
    log_q : (C, L) float64
        ln of the cluster quantiles at ``levels``, ln(ns), non-decreasing per row.
    levels : (L,) float64
    """

    ranks: np.ndarray
    coords: list[Mapping[str, Any]]
    stream_kinds: list[Mapping[int, str]]
    keys: list[KernelKey]
    c_rank: np.ndarray
    c_key: np.ndarray
    counts: np.ndarray
    log_q: np.ndarray
    levels: np.ndarray

    @classmethod
    def from_ranks(cls, ranks: Sequence[RankKernels]) -> KernelTable:
        """The table of per-rank Summary objects (offline diagnosis, tests)."""
        by_rank = sorted(ranks, key=lambda x: x.rank)
        keys: dict[KernelKey, int] = {}
        blocks = [
            _Block(
                i,
                np.full(s.counts.size, keys.setdefault(key, len(keys)), np.int64),
                s.counts,
                log_quantiles(s.quantiles_ns),
                s.quantile_levels,
            )
            for i, rk in enumerate(by_rank)
            for key, s in rk.summaries.items()
        ]
        return _assemble(
            [rk.rank for rk in by_rank],
            [rk.coords for rk in by_rank],
            [rk.stream_kinds for rk in by_rank],
            list(keys),
            blocks,
        )

    def merged_streams(self) -> KernelTable:
        """The same clusters keyed by ``(kernel name, -1)``: all streams of a name together."""
        names = sorted({k[0] for k in self.keys})
        index = {n: i for i, n in enumerate(names)}
        remap = np.array([index[k[0]] for k in self.keys], dtype=np.int64)
        return replace(
            self,
            keys=[(n, -1) for n in names],
            c_key=remap[self.c_key] if self.c_key.size else self.c_key,
        )


def _union_log_q(
    parts: Sequence[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Put clusters with different quantile levels on the union of the levels, exactly.

    Each component's ln-quantile is piecewise linear in the normal score with linear ends,
    so evaluating it at extra levels adds knots on its own lines: the function is unchanged.
    """
    lv = np.unique(np.concatenate([levels for levels, _ in parts]))
    out = []
    zz = ndtri(lv)
    for levels, log_q in parts:
        if levels.size == lv.size and np.array_equal(levels, lv):
            out.append(log_q)
        else:
            out.append(logq_rows(ndtri(levels), log_q, np.tile(zz, (log_q.shape[0], 1))))
    return lv, out


class _Block(NamedTuple):
    """Clusters of one rank from one source: key index (k,), counts (k,), ln quantiles (k, L)
    ln ns, non-decreasing along each row (:func:`log_quantiles`)."""

    rank: int
    key: np.ndarray
    counts: np.ndarray
    log_q: np.ndarray
    levels: np.ndarray


def _assemble(
    ranks: Sequence[int],
    coords: Sequence[Mapping[str, Any]],
    kinds: Sequence[Mapping[int, str]],
    keys: Sequence[KernelKey],
    blocks: Sequence[_Block],
) -> KernelTable:
    """A KernelTable from blocks of clusters (keys in any order; the table's are sorted)."""
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    remap = np.empty(len(keys), dtype=np.int64)
    remap[order] = np.arange(len(keys))
    sizes = np.array([b.counts.size for b in blocks], dtype=np.int64)
    level_sets: dict[bytes, list[int]] = {}
    for j, blk in enumerate(blocks):
        level_sets.setdefault(np.asarray(blk.levels, np.float64).tobytes(), []).append(j)
    if len(level_sets) <= 1:
        levels = np.asarray(blocks[0].levels, np.float64) if blocks else np.array([0.5, 0.99])
        lq = [np.asarray(b.log_q, np.float64).reshape(-1, levels.size) for b in blocks]
        log_q = np.concatenate(lq) if lq else np.zeros((0, levels.size))
    else:
        sets = list(level_sets.values())
        levels, lqs = _union_log_q(
            [
                (
                    np.asarray(blocks[g[0]].levels, np.float64),
                    np.concatenate([blocks[j].log_q for j in g]),
                )
                for g in sets
            ]
        )
        # clusters are grouped by level set in ``lqs``; put them back in block order
        src = np.concatenate([np.repeat(j, sizes[j]) for g in sets for j in g])
        log_q = np.concatenate(lqs)[np.argsort(src, kind="stable")]
    cat = np.concatenate
    return KernelTable(
        ranks=np.asarray(ranks, dtype=np.int64),
        coords=list(coords),
        stream_kinds=list(kinds),
        keys=[keys[i] for i in order],
        c_rank=np.repeat(np.array([b.rank for b in blocks], np.int64), sizes),
        c_key=remap[cat([b.key for b in blocks])] if blocks else np.zeros(0, np.int64),
        counts=cat([b.counts for b in blocks]).astype(np.float64) if blocks else np.zeros(0),
        log_q=log_q,
        levels=levels,
    )


class WireSummary(NamedTuple):
    """What L3 reads of one ``kernel_summary`` record: its wire columns as sent, undecoded
    (:func:`wire_summary`); a block of them becomes one table (:func:`table_from_wire`)."""

    rank: int
    coords: Mapping[str, Any]
    streams: Sequence[Mapping[str, Any]]
    names: Sequence[Mapping[str, Any]]
    levels: tuple[float, ...]
    gk: bytes
    gs: bytes
    gc: bytes
    cc: bytes
    q: bytes
    off: bytes
    record: Mapping[str, Any]


def wire_summary(rec: Mapping[str, Any]) -> WireSummary:
    """The :class:`WireSummary` of a ``kernel_summary`` record (no copy, no decoding).

    Raises
    ------
    argus.summaries.BatchError
        ``bad-summary``: a column missing.
    """
    try:
        return WireSummary(
            int(rec["rank"]),
            rec.get("coords") or {},
            rec.get("streams") or (),
            rec.get("kernel_names") or (),
            tuple(rec["quantile_levels"]),
            rec["group_kernel"],
            rec["group_stream"],
            rec["group_clusters"],
            rec["cluster_count"],
            rec["cluster_quantiles_ns"],
            rec.get("cluster_log_offsets") or b"",
            rec,
        )
    except KeyError as exc:
        raise BatchError("bad-summary", f"kernel_summary lacks field {exc}") from None


def table_from_summaries(records: Sequence[Mapping[str, Any]], names: KernelNames) -> KernelTable:
    """A KernelTable from decoded ``kernel_summary`` records (several windows per rank merge):
    :func:`table_from_wire` of their :func:`wire_summary`.

    Parameters
    ----------
    records : sequence of kernel_summary records
    names : argus.summaries.KernelNames
        The consumer's name book (fed with these records first).

    Raises
    ------
    argus.summaries.BatchError
        A record whose columns disagree.
    """
    return table_from_wire([wire_summary(r) for r in records], names)


def table_from_wire(items: Sequence[WireSummary], names: KernelNames) -> KernelTable:
    """A KernelTable from the wire columns of a block of summaries, in one pass.

    The columns of all the records are joined and decoded at once (one ``frombuffer`` per
    column, one log16 decode, one key numbering); per record only its field lengths are
    read and checked. Records whose quantile levels or encodings differ are merged on the
    union of their levels (:func:`_union_log_q`), one record at a time.

    Raises
    ------
    argus.summaries.BatchError
        A record whose columns disagree (the message of :func:`summary_columns` for it).
    """
    rank_ids = sorted({w.rank for w in items})
    ri = {r: i for i, r in enumerate(rank_ids)}
    coords: list[Mapping[str, Any]] = [{} for _ in rank_ids]
    kinds: list[dict[int, str]] = [{} for _ in rank_ids]
    for w in items:
        i = ri[w.rank]
        coords[i] = w.coords or coords[i]
        for st in w.streams:
            kinds[i][int(st["id"])] = str(st["kind"])
    if not items:
        return _assemble(rank_ids, coords, kinds, [], [])
    lv0 = items[0].levels
    log16 = bool(items[0].off)
    if any(w.levels != lv0 or bool(w.off) != log16 for w in items):
        return _table_by_record(items, names, rank_ids, coords, kinds)
    levels = np.asarray(lv0, dtype=np.float64)
    n_l = levels.size
    lens = np.array(
        [(len(w.gk), len(w.gs), len(w.gc), len(w.cc), len(w.q), len(w.off)) for w in items],
        dtype=np.int64,
    ).reshape(len(items), 6)
    gc = np.frombuffer(b"".join(w.gc for w in items), np.uint8)
    cum = np.r_[0, np.cumsum(gc, dtype=np.int64)]
    g_end = np.cumsum(lens[:, 2])
    n_c = cum[g_end] - cum[g_end - lens[:, 2]]  # clusters of each record
    ok = (lens[:, :5] % [4, 4, 1, 4, 4] == 0).all(axis=1) & (lens[:, 5] % 2 == 0)
    ok &= (lens[:, 0] == lens[:, 1]) & (lens[:, 0] == 4 * lens[:, 2]) & (lens[:, 3] == 4 * n_c)
    if log16:
        ok &= (lens[:, 4] == 4 * n_c) & (lens[:, 5] == 2 * n_c * (n_l - 1))
    else:
        ok &= lens[:, 4] == 4 * n_c * n_l
    if not ok.all() or (log16 and not _has_median(levels)):
        bad = items[int(np.argmin(ok)) if not ok.all() else 0]
        summary_columns(bad.record)  # raises its exact error
        raise BatchError("bad-summary", "kernel_summary columns disagree")
    gk = np.frombuffer(b"".join(w.gk for w in items), "<u4")
    gs = np.frombuffer(b"".join(w.gs for w in items), "<u4")
    cc = np.frombuffer(b"".join(w.cc for w in items), "<u4")
    qb = np.frombuffer(b"".join(w.q for w in items), "<f4")
    if log16:
        off = np.frombuffer(b"".join(w.off for w in items), "<i2")
        log_q = nondecreasing_rows(decode_log16_ln(qb, off, levels))  # no exp, one log a row
    else:
        log_q = log_quantiles(qb.astype(np.float64).reshape(-1, n_l))
    code = (gk.astype(np.uint64) << np.uint64(32)) | gs.astype(np.uint64)
    uniq, inverse = np.unique(code, return_inverse=True)
    keys = [(names.name(int(c >> np.uint64(32))), int(c & np.uint64(0xFFFFFFFF))) for c in uniq]
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    remap = np.empty(len(keys), dtype=np.int64)
    remap[order] = np.arange(len(keys))
    rec_rank = np.array([ri[w.rank] for w in items], dtype=np.int64)
    return KernelTable(
        ranks=np.asarray(rank_ids, dtype=np.int64),
        coords=coords,
        stream_kinds=list(kinds),
        keys=[keys[i] for i in order],
        c_rank=np.repeat(rec_rank, n_c),
        c_key=remap[np.repeat(inverse.reshape(-1), gc)],
        counts=cc.astype(np.float64),
        log_q=log_q,
        levels=levels,
    )


def _has_median(levels: np.ndarray) -> bool:
    try:
        median_index(levels)
    except ValueError:
        return False
    return True


def _table_by_record(
    items: Sequence[WireSummary],
    names: KernelNames,
    rank_ids: Sequence[int],
    coords: Sequence[Mapping[str, Any]],
    kinds: Sequence[Mapping[int, str]],
) -> KernelTable:
    """:func:`table_from_wire` for records of several level sets or encodings."""
    ri = {r: i for i, r in enumerate(rank_ids)}
    cols = []
    for w in items:
        gk, gs, gc, cc, q, levels = summary_columns(w.record)
        code = (gk.astype(np.uint64) << np.uint64(32)) | gs.astype(np.uint64)
        cols.append((ri[w.rank], code, gc, cc, q, levels))
    codes = np.concatenate([c[1] for c in cols])
    uniq, inverse = np.unique(codes, return_inverse=True)
    keys = [(names.name(int(c >> np.uint64(32))), int(c & np.uint64(0xFFFFFFFF))) for c in uniq]
    blocks, at = [], 0
    for w, (i, code, gc, cc, q, levels) in zip(items, cols, strict=True):
        if w.off:  # log16: ln straight from the wire, as table_from_wire
            med = np.frombuffer(w.q, "<f4")
            log_q = nondecreasing_rows(decode_log16_ln(med, np.frombuffer(w.off, "<i2"), levels))
        else:
            log_q = log_quantiles(q)
        blocks.append(_Block(i, np.repeat(inverse[at : at + code.size], gc), cc, log_q, levels))
        at += code.size
    return _assemble(rank_ids, coords, kinds, keys, blocks)


def detect_window(
    job: str,
    ranks: Sequence[RankKernels] | KernelTable,
    *,
    window: tuple[int, int, int, int],
    cfg: L3Config | None = None,
    routing: Routing | None = None,
    scope_kind: str = "dp",
    partition_kinds: Sequence[str] = ("edp", "ep"),
    stacked: bool = True,
) -> list[Finding]:
    """L3 findings of one window.

    Parameters
    ----------
    job : str
    ranks : sequence of RankKernels, or a KernelTable
    window : (start_step, end_step, start_ns, end_ns)
    cfg : L3Config
    routing : Routing
    scope_kind : str
        Group kind whose ranks are compared with each other.
    partition_kinds : sequence of str
        Group kinds whose groups (inside one scope group) are compared with each other.
    stacked : bool
        Judge the (scope, kernel) cells in stacked passes (default): their quantile matrices
        in one :func:`argus.summaries.lognormal.mixture_quantile_cells` call, then, cells of
        the same rank count together, :func:`argus.detectors.l3.screen_ranks` and
        :func:`argus.detectors.l3.screen_groups` pick the few cells that may name anything,
        and only those go through ``score_ranks`` / ``compare_groups``. False: every cell
        in its own numpy sequence (the reference the stacked path equals, finding for
        finding, bit for bit).

    Returns
    -------
    list of Finding
        ``kernel_divergence`` (ranks named; score = the worst named rank's W1, ns;
        evidence ``p_value`` its :func:`argus.detectors.l3.exceedance_p`,
        ``alpha_per_test`` the level it passed: ``rank_alpha`` / the scope's tests) and
        ``group_divergence`` (``ranks`` empty, the group in ``group_kind``/``group_id``;
        score = W1 of its reference to the others', ns; threshold = the effect-size gate on
        its slowdown, ns; evidence ``members`` lists its ranks, ``shift_ns`` its slowdown,
        ``p_value`` the chance of its ranks being that slow together). Ordered by scope
        group, then (kernel, stream).
    """
    cfg = cfg or L3Config()
    routing = routing or Routing.default()
    t = ranks if isinstance(ranks, KernelTable) else KernelTable.from_ranks(ranks)
    if not cfg.match_stream:
        t = t.merged_streams()
    probs = default_probs(cfg.n_probs)
    ws, we, wsn, wen = window
    n_r = t.ranks.size
    sids = [routing.group_for_kind(c, scope_kind) for c in t.coords]
    scope_names = sorted(set(sids))
    scope_of = np.array([scope_names.index(s) for s in sids], dtype=np.int64)
    parts = {k: [routing.group_for_kind(c, k) for c in t.coords] for k in partition_kinds}
    # clusters sorted by (key, rank): one run of clusters per (key, rank) pair
    order = np.lexsort((t.c_rank, t.c_key))
    c_key, c_rank, counts = t.c_key[order], t.c_rank[order], t.counts[order]
    # t.log_q's rows are gathered in this order only for the clusters judged
    pair = c_key * max(n_r, 1) + c_rank
    starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]]) if pair.size else pair
    lens = np.diff(np.r_[starts, pair.size])
    p_key, p_rank = c_key[starts], c_rank[starts]
    p_n = np.add.reduceat(counts, starts) if starts.size else counts
    keep = p_n >= cfg.min_events  # too few events for a distribution: not judged
    p_key, p_rank, p_start, p_len = p_key[keep], p_rank[keep], starts[keep], lens[keep]
    p_scope = scope_of[p_rank]
    o = np.lexsort((p_rank, p_key, p_scope))
    p_key, p_rank, p_start, p_len, p_scope = (
        a[o] for a in (p_key, p_rank, p_start, p_len, p_scope)
    )
    cell = p_scope * max(len(t.keys), 1) + p_key
    cuts = np.flatnonzero(np.r_[True, cell[1:] != cell[:-1], True]) if cell.size else [0]
    judged = []  # (start, end) of the (scope, kernel) cells judged, in order
    for a, b in itertools.pairwise(int(x) for x in cuts):
        key = t.keys[int(p_key[a])] if b > a else ("", 0)
        if b - a < 2 or {
            t.stream_kinds[i].get(key[1]) for i in p_rank[a : min(b, a + 8)].tolist()
        } & set(cfg.skip_stream_kinds):
            continue
        judged.append((a, b))
    # the per-rank chance test's family: every (rank, kernel) test of a scope group
    n_tests = Counter[int]()
    for a, b in judged:
        if b - a >= cfg.min_ranks:
            n_tests[int(p_scope[a])] += b - a
    # every judged cell's quantile matrix, stacked: cell i is rows off[i]:off[i] + n_rows[i]
    n_rows = np.array([b - a for a, b in judged], dtype=np.int64)
    off = np.cumsum(n_rows) - n_rows
    pr = _ranges(np.array([a for a, _ in judged], dtype=np.int64), n_rows) if judged else n_rows
    comm = [
        _is_comm(
            t.keys[int(p_key[a])], [t.stream_kinds[i] for i in p_rank[a : min(b, a + 8)].tolist()]
        )
        for a, b in judged
    ]
    if stacked:
        idx = _ranges(p_start[pr], p_len[pr]) if pr.size else pr
        q_all = mixture_quantile_cells(
            np.repeat(np.arange(pr.size), p_len[pr]),
            counts[idx],
            np.take(t.log_q, order[idx], axis=0),
            t.levels,
            probs,
            n_rows,
        )
        level = [cfg.rank_alpha / max(n_tests[int(p_scope[a])], 1) for a, _ in judged]
        rel = [cfg.min_rel_w1_comm if c else cfg.min_rel_w1 for c in comm]
        scr = _screen(q_all, n_rows, p_rank[pr], parts, np.array(rel), np.array(level), cfg)
    out: list[Finding] = []
    for ci, (a, b) in enumerate(judged):
        if stacked:
            may_rank, may_group = scr.rank[ci], {k: bool(v[ci]) for k, v in scr.group.items()}
            if not (may_rank or any(may_group.values())):
                continue
            q = q_all[off[ci] : off[ci] + n_rows[ci]]
        else:
            may_rank, may_group = True, dict.fromkeys(partition_kinds, True)
            idx = _ranges(p_start[a:b], p_len[a:b])
            q = mixture_quantile_rows(
                np.repeat(np.arange(b - a), p_len[a:b]),
                counts[idx],
                np.take(t.log_q, order[idx], axis=0),
                t.levels,
                probs,
                int(b - a),
            )
        key = t.keys[int(p_key[a])]
        sid = scope_names[int(p_scope[a])]
        rows = p_rank[a:b]
        rank_ids = t.ranks[rows]
        stream = None if key[1] < 0 else int(key[1])
        kcfg = replace(cfg, min_rel_w1=cfg.min_rel_w1_comm) if comm[ci] else cfg
        # no (R, R) matrix: a finding shows the scores, never the pairwise W1 (display only)
        res = (
            score_ranks(q, kcfg, n_tests=n_tests[int(p_scope[a])], pairwise=False)
            if may_rank
            else None
        )
        if res is not None and res.flagged.any():
            named = np.flatnonzero(res.flagged)
            worst = named[np.nanargmax(res.scores[named])]
            out.append(
                Finding(
                    job=job,
                    level="L3",
                    kind="kernel_divergence",
                    group_kind=scope_kind,
                    group_id=sid,
                    ranks=tuple(int(r) for r in rank_ids[named]),
                    kernel=key[0],
                    stream=stream,
                    window_start_step=ws,
                    window_end_step=we,
                    window_start_ns=wsn,
                    window_end_ns=wen,
                    score=float(res.scores[worst]),
                    threshold=res.threshold,
                    baseline=res.scale / 1e3,
                    observed=float(np.nanmean(q[worst])) / 1e3,
                    unit="us",
                    evidence={
                        "w1_ns": json.dumps(
                            {
                                str(int(rank_ids[i])): round(float(res.scores[i]), 1)
                                for i in named[:64]
                            }
                        ),
                        "fence_ns": f"{res.fence:.1f}",
                        "median_w1_ns": f"{res.median_score:.1f}",
                        "p_value": f"{float(res.p_values[worst]):.3g}",
                        "alpha_per_test": f"{kcfg.rank_alpha / res.n_tests:.3g}",
                        "n_ranks": str(res.n_valid),
                        "collective": str(comm[ci]).lower(),
                    },
                )
            )
        for part in partition_kinds:
            if not may_group[part]:
                continue
            labels = [parts[part][i] for i in rows.tolist()]
            sizes = Counter(labels)
            # groups of one rank have no inside spread to compare with (e.g. ep groups of a
            # job without expert parallelism): that comparison is the per-rank one above
            if sum(n >= 2 for n in sizes.values()) < cfg.min_groups:
                continue
            cmp = compare_groups(q, labels, kcfg)
            lab = np.asarray(labels, dtype=object)
            for gi in np.flatnonzero(cmp.flagged):
                gid = str(cmp.labels[gi])
                intra = float(np.nanmedian(cmp.within)) if np.isfinite(cmp.within).any() else 0.0
                out.append(
                    Finding(
                        job=job,
                        level="L3",
                        kind="group_divergence",
                        group_kind=part,
                        group_id=gid,
                        ranks=(),
                        kernel=key[0],
                        stream=stream,
                        window_start_step=ws,
                        window_end_step=we,
                        window_start_ns=wsn,
                        window_end_ns=wen,
                        score=float(cmp.scores[gi]),
                        threshold=cmp.threshold,
                        baseline=float(cmp.reference.mean()) / 1e3,
                        observed=float(cmp.references[gi].mean()) / 1e3,
                        unit="us",
                        evidence={
                            "members": json.dumps([int(r) for r in rank_ids[lab == gid]]),
                            "scope": f"{scope_kind}/{sid}",
                            "collective": str(comm[ci]).lower(),
                            "n_groups": str(len(cmp.labels)),
                            "intra_w1_ns": f"{intra:.1f}",
                            "inter_w1_ns": f"{float(cmp.scores[gi]):.1f}",
                            "block_ratio": f"{float(cmp.scores[gi]) / intra:.1f}"
                            if intra > 0
                            else "inf",
                            "shift_ns": f"{float(cmp.shifts[gi]):.1f}",
                            "p_value": f"{float(cmp.p_values[gi]):.3g}",
                            "alpha_per_group": f"{kcfg.group_alpha / len(cmp.labels):.3g}",
                        },
                    )
                )
    return out


class _Screen(NamedTuple):
    """Which judged cells may give findings: ``rank`` (C,) bool, a ``kernel_divergence``;
    ``group`` partition kind -> (C,) bool, a ``group_divergence`` of that kind."""

    rank: np.ndarray
    group: dict[str, np.ndarray]


def _screen(
    q: np.ndarray,
    n_rows: np.ndarray,
    rank_of_row: np.ndarray,
    parts: Mapping[str, Sequence[object]],
    min_rel_w1: np.ndarray,
    level: np.ndarray,
    cfg: L3Config,
) -> _Screen:
    """The cells :func:`detect_window` must judge one by one, found in stacked passes.

    Parameters
    ----------
    q : (N, M) float
        Quantile functions of the judged cells' ranks, ns; cell i is ``n_rows[i]`` rows, in
        order.
    n_rows : (C,) int
    rank_of_row : (N,) int
        Table rank index of each row.
    parts : partition kind -> label of each table rank
    min_rel_w1, level : (C,) float
        Each cell's effect-size share and per-test level (see ``screen_ranks``).
    cfg : L3Config

    Returns
    -------
    _Screen
        Cells of the same rank count are screened together (``screen_ranks``; for each
        partition kind, cells whose groups are of equal size n, ``screen_groups``); a cell
        with a non-finite row, or a partition of unequal groups, is always judged; a
        partition with fewer than ``min_groups`` groups of >= 2 ranks never is (as
        :func:`detect_window` skips it).
    """
    n_c = n_rows.size
    off = np.cumsum(n_rows) - n_rows
    finite = np.isfinite(q).all(axis=1)
    cell_ok = np.logical_and.reduceat(finite, off) if n_c else np.zeros(0, bool)
    may_rank = ~cell_ok
    codes = {}
    for kind, labels in parts.items():
        index: dict[object, int] = {}
        codes[kind] = np.array([index.setdefault(x, len(index)) for x in labels], np.int64)
    may_group = {kind: np.zeros(n_c, dtype=bool) for kind in parts}
    for r in np.unique(n_rows).tolist():
        cs = np.flatnonzero(n_rows == r)
        rows = off[cs][:, None] + np.arange(r)  # (C', r)
        ok = cell_ok[cs]
        if ok.any():
            may_rank[cs[ok]] = screen_ranks(q[rows[ok]], min_rel_w1[cs[ok]], level[cs[ok]], cfg)
        for kind, code in codes.items():
            g = code[rank_of_row[rows]]  # (C', r) group of each row
            order = np.argsort(g, axis=1, kind="stable")
            sg = np.take_along_axis(g, order, axis=1)
            new = np.ones(sg.shape, dtype=bool)
            new[:, 1:] = sg[:, 1:] != sg[:, :-1]
            run = np.cumsum(new, axis=1) - 1 + r * np.arange(cs.size)[:, None]
            sizes = np.bincount(run.reshape(-1), minlength=cs.size * r).reshape(cs.size, r)
            entered = (sizes >= 2).sum(axis=1) >= cfg.min_groups
            equal = sizes.max(axis=1) * new.sum(axis=1) == r
            sel = entered & ok & equal
            may = entered & ~sel
            for n in np.unique(sizes[sel, 0]).tolist():
                cc = sel & (sizes[:, 0] == n)
                qg = q[off[cs[cc]][:, None] + order[cc]].reshape(int(cc.sum()), r // n, n, -1)
                may[cc] = screen_groups(qg, min_rel_w1[cs[cc]])
            may_group[kind][cs] = may
    return _Screen(may_rank, may_group)


def _is_comm(key: KernelKey, kinds: Sequence[Mapping[int, str]]) -> bool:
    """Collective kernel: its stream is comm/p2p on some rank, or its name says NCCL."""
    if any(k.get(key[1]) in ("comm", "p2p") for k in kinds[:8]):
        return True
    return "nccl" in key[0].lower()


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for each (start, length): (sum(lens),) int64."""
    total = int(lens.sum())
    step = np.ones(total, dtype=np.int64)
    ends = np.cumsum(lens)[:-1]
    step[0] = starts[0] if total else 0
    step[ends] = starts[1:] - (starts[:-1] + lens[:-1] - 1)
    out: np.ndarray = np.cumsum(step)
    return out
