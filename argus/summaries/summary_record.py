"""Wire records <-> the compression core: ``kernel_batch`` in, ``kernel_summary`` out.

* :func:`summarize_batch` turns one decoded ``kernel_batch`` record (a rank-window of raw
  kernel events) into a ``kernel_summary`` record ready for ``Codec.encode``. Groups are
  (kernel id, stream); kernel names travel as stable 32-bit ids
  (:func:`argus.schemas.arrays.kernel_id`) and the name dictionary only carries the ids the
  producer has not announced yet, so a steady-state summary holds numbers only.
  :func:`summarize_batches` (:class:`SummarizedBatches`) does the same for many records in
  one :func:`~argus.summaries.kde.summarize_blocks` call, each record's summary equal, bit
  for bit, to its own ``summarize_batch`` (which is the one-record case): the compressor
  takes a poll's windows at once, ``argus diagnose`` and replay 65,536 events a call.
* :func:`groups_from_summary` gives back ``{(kernel_id, stream): Summary}`` for the
  detectors, and :class:`KernelNames` accumulates the announced names on the consumer side.

Columns follow ``argus/schemas/kernel_summary.avsc``: ``group_kernel`` uint32 (G,),
``group_stream`` uint32 (G,), ``group_clusters`` uint8 (G,), ``cluster_count`` uint32 (C,),
``extra`` empty (no method uses it yet), and the quantiles in one of two encodings
(:mod:`argus.summaries.quantile_wire`, chosen by ``KdeConfig.quantile_encoding``):

* ``float32``: ``cluster_quantiles_ns`` float32 (C, L) row-major, ``cluster_log_offsets`` empty;
* ``log16``: ``cluster_quantiles_ns`` float32 (C,) medians, ``cluster_log_offsets`` int16
  (C, L − 1) row-major, the other levels as log offsets from the median.

Readers need not care: :func:`groups_from_summary` (and :func:`summary_columns`) always give the
(C, L) quantiles in ns.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeGuard

import numpy as np

from argus.errors import ArgusError
from argus.schemas.arrays import kernel_id, unpack
from argus.schemas.avro_binary import COORD_DEFAULTS, avro_long, avro_string
from argus.summaries.kde import (
    DEFAULT,
    PAPER,
    KdeConfig,
    ManySummary,
    Summary,
    _summarize,
    summarize_many,
)
from argus.summaries.quantile_wire import decode_log16, encode_log16, median_index

__all__ = [
    "CHUNK_EVENTS",
    "REANNOUNCE_WINDOWS",
    "BatchColumns",
    "BatchError",
    "KernelNames",
    "NameAnnouncements",
    "SummarizedBatches",
    "batch_columns",
    "groups_from_summary",
    "names_from_summary",
    "summarize_batch",
    "summarize_batches",
    "summary_columns",
    "summary_wire_columns",
]


class BatchError(ArgusError, ValueError):
    """A kernel_batch / kernel_summary record whose columns are inconsistent.

    ``reason`` is a short code for DLQ records: ``bad-column`` (length or dtype),
    ``bad-name-index`` (name_idx outside the name dictionary), ``bad-summary``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


_KIDS: dict[str, int] = {}  # name -> kernel id, the compressor's hot path (bounded below)
_KIDS_MAX = 1 << 18


def _kids(names: list[str]) -> list[int]:
    """Kernel ids of ``names`` from a process-wide cache (a dict read per name)."""
    get = _KIDS.get
    out = [get(n) for n in names]
    if None in out:
        if len(_KIDS) > _KIDS_MAX:
            _KIDS.clear()
        for i, k in enumerate(out):
            if k is None:
                out[i] = _KIDS[names[i]] = kernel_id(names[i])
    return out  # type: ignore[return-value]


_LISTS: dict[tuple[int, str, str], tuple[list[str], np.ndarray, np.ndarray]] = {}
_LISTS_MAX = 4096


def _list_ids(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(len(names),) uint32 kernel ids of a record's name dictionary, and the same ids as
    the cache's Python ints (an object array): ``SummarizedBatches`` hands out these very
    objects, so a set of announced ids tests them by identity, without reading each int.

    A producer sends the same dictionary window after window: the last list seen with the
    same length and end names is compared (string equality, no hashing of the ~300-character
    names) and its ids reused; any other list goes through :func:`_kids`.
    """
    if not names:
        return np.zeros(0, np.uint32), np.zeros(0, object)
    key = (len(names), names[0], names[-1])
    hit = _LISTS.get(key)
    if hit is not None and hit[0] == names:
        return hit[1], hit[2]
    ints = _kids(names)
    kids = np.array(ints, dtype=np.uint32)
    objs = np.empty(len(ints), object)
    objs[:] = ints
    kids.setflags(write=False)
    objs.setflags(write=False)
    if len(_LISTS) >= _LISTS_MAX:
        _LISTS.clear()
    _LISTS[key] = (names, kids, objs)
    return kids, objs


class _Names(list[str]):
    """A record's name dictionary, ``kids``, its kernel ids, and ``objs``, the same as Python
    ints (:func:`_list_ids`)."""

    __slots__ = ("kids", "objs")
    kids: np.ndarray
    objs: np.ndarray


#: A ``kernel_batch``'s columns as :func:`batch_columns` gives them.
BatchColumns = tuple[list[str], np.ndarray, np.ndarray, np.ndarray]


_U4, _I8 = np.dtype("<u4"), np.dtype("<i8")
_max = np.maximum.reduce  # ndarray.max's Python wrapper costs ~0.1 us a call


def _unpack(buf: bytes, dt: np.dtype[Any], dtype: str, field: str) -> np.ndarray:
    """:func:`~argus.schemas.arrays.unpack` with the dtype built once (``dt``: ``dtype``,
    little-endian)."""
    if len(buf) % dt.itemsize:
        return unpack(buf, dtype, field=field)  # raises its DecodeError
    return np.frombuffer(buf, dt)


def batch_columns(batch: Mapping[str, Any]) -> BatchColumns:
    """Decode and check the event columns of a ``kernel_batch`` record.

    Returns
    -------
    names : list of str
    name_idx : (n,) uint32
    stream : (n,) uint32
    duration_ns : (n,) int64, ns

    Raises
    ------
    BatchError
        Columns of different lengths, a bad byte length, or a name index out of range.
    """
    try:
        names = _Names(batch["names"])
        name_idx = _unpack(batch["name_idx"], _U4, "uint32", "name_idx")
        stream = _unpack(batch["stream"], _U4, "uint32", "stream")
        dur = _unpack(batch["duration_ns"], _I8, "int64", "duration_ns")
    except KeyError as exc:
        raise BatchError("bad-column", f"kernel_batch lacks column {exc}") from None
    except ValueError as exc:
        raise BatchError("bad-column", str(exc)) from exc
    if not (name_idx.size == stream.size == dur.size):
        raise BatchError(
            "bad-column",
            f"name_idx/stream/duration_ns have {name_idx.size}/{stream.size}/{dur.size} "
            "entries; all columns must have one entry per event",
        )
    if name_idx.size and int(_max(name_idx)) >= len(names):
        raise BatchError(
            "bad-name-index",
            f"name_idx {int(_max(name_idx))} but the name dictionary has {len(names)} names",
        )
    names.kids, names.objs = _list_ids(names)  # while the decoded strings are in cache
    return names, name_idx, stream, dur


def summarize_batch(
    batch: Mapping[str, Any],
    *,
    config: KdeConfig | None = None,
    announced: set[int] | None = None,
) -> dict[str, Any]:
    """Compress one decoded ``kernel_batch`` record into a ``kernel_summary`` record.

    Parameters
    ----------
    batch : mapping
        A ``kernel_batch`` record as ``Codec.decode`` returns it.
    config : KdeConfig, optional
        Summary method, clustering parameters and quantile encoding; None means
        :data:`~argus.summaries.kde.DEFAULT` (``kde-q7l``), what the compressor agent uses.
    announced : set of int, optional
        Kernel ids this producer has already published names for. When given, the record's
        ``kernel_names`` holds only the ids not in it; when None, every used id is named.
        The set is not modified: add ``{n["id"] for n in record["kernel_names"]}`` once the
        record is delivered.

    Returns
    -------
    dict
        A ``kernel_summary`` record (``Codec.encode("kernel_summary", record)``). Groups are
        ordered by (kernel id, stream).

    Raises
    ------
    BatchError
        Inconsistent columns (see :func:`batch_columns`). Invalid durations are not errors:
        they are counted in ``rejected``.
    """
    return SummarizedBatches([batch], config=config).record(0, announced=announced)


def summarize_batches(
    batches: Sequence[Mapping[str, Any]],
    *,
    config: KdeConfig | None = None,
    announced: Sequence[set[int] | None] | None = None,
    columns: Sequence[BatchColumns | None] | None = None,
) -> list[dict[str, Any]]:
    """:func:`summarize_batch` of many records in one
    :func:`~argus.summaries.kde.summarize_blocks` call: each record equals, value for value,
    what ``summarize_batch`` gives for it alone.

    ``announced``: per record, as :func:`summarize_batch`'s (None: every record names every
    id it uses); the sets are read, not modified. ``columns``: each record's
    :func:`batch_columns`, when the caller has them. See :class:`SummarizedBatches`.

    Raises
    ------
    BatchError
        Inconsistent columns of a record (check records one at a time to tell which).
    """
    done = SummarizedBatches(batches, config=config, columns=columns)
    ann = list(announced) if announced is not None else [None] * len(done)
    return [done.record(i, announced=ann[i]) for i in range(len(done))]


_I64 = 1 << 63


def _is_long(v: object) -> TypeGuard[int]:
    return type(v) is int and -_I64 <= v < _I64


_COORDS = tuple(COORD_DEFAULTS.items())  # (field, default), schema order


def _coords_body(coords: Any) -> bytes | None:
    """The ``Coords`` record's Avro body (absent fields take the schema's defaults), or None
    when a value is not an int (the caller falls back to fastavro, which says why)."""
    if not isinstance(coords, Mapping):
        return None
    vals = [coords.get(k, dv) for k, dv in _COORDS]
    if not all(_is_long(v) for v in vals):
        return None
    return b"".join(avro_long(v) for v in vals)


def _streams_body(streams: Any) -> bytes | None:
    """The ``streams`` array's Avro body (one block), or None when it is not a list of
    ``{id: int, kind: str, label: str}``."""
    if not isinstance(streams, list):
        return None
    if not streams:
        return b"\x00"
    out = [avro_long(len(streams))]
    for st in streams:
        if not isinstance(st, Mapping):
            return None
        sid, kind, label = st.get("id"), st.get("kind"), st.get("label", "")
        if not (_is_long(sid) and type(kind) is str and type(label) is str):
            return None
        out += (avro_long(sid), avro_string(kind), avro_string(label))
    out.append(b"\x00")
    return b"".join(out)


#: (job, rank) -> (coords, streams, their Avro bodies): a rank's windows repeat them
_RANKS: dict[tuple[Any, Any], tuple[Any, Any, tuple[bytes, bytes, bytes]]] = {}
_RANKS_MAX = 1 << 16


def _rank_parts(batch: Mapping[str, Any]) -> tuple[bytes, bytes, bytes] | None:
    """Avro bodies of a window's ``job`` + ``rank``, ``coords`` and ``streams`` (as
    :meth:`SummarizedBatches.record` copies them), cached per (job, rank) while its coords and
    streams stay equal; None for a field the fast writer does not take (fastavro then
    encodes the record, and raises what it raises)."""
    job, rank = batch.get("job"), batch.get("rank")
    coords, streams = batch.get("coords") or {}, batch.get("streams") or []
    key = (job, rank)
    hit = _RANKS.get(key)
    if hit is not None and hit[0] == coords and hit[1] == streams:
        return hit[2]
    if type(job) is not str or not _is_long(rank):
        return None
    cb, sb = _coords_body(coords), _streams_body(streams)
    if cb is None or sb is None:
        return None
    parts = (avro_string(job) + avro_long(rank), cb, sb)
    if len(_RANKS) >= _RANKS_MAX:
        _RANKS.clear()
    _RANKS[key] = (dict(coords), [dict(x) for x in streams], parts)
    return parts


def _numbering(slot: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """The distinct values of ``slot`` (n,) in ``[0, size)``, increasing; when ``size`` is
    too large for a lookup table, each entry's index among them (else None); and how many
    entries hold each value."""
    if size <= 4 * slot.size + 4096:
        bc = np.bincount(slot, minlength=size)
        used = np.flatnonzero(bc != 0)  # on a bool mask: ~3x faster than on the counts
        return used, None, bc[used]
    vals, inv, cnt = np.unique(slot, return_inverse=True, return_counts=True)
    return vals, inv.reshape(-1), cnt


#: Events per :func:`~argus.summaries.kde.summarize_blocks` call of a large poll: its ~40
#: passes over the events then run on arrays of ~1.5 MB; a call per ~64 records of 3,000
#: events costs ~15 % less per record than one per 256 (2-core VM, BENCHMARKS.md); the
#: compressor agent decodes a large poll in runs of this many events too
CHUNK_EVENTS = 3 << 16


class SummarizedBatches:
    """Many ``kernel_batch`` records compressed in one call; :meth:`record` builds each one's
    ``kernel_summary`` (as :func:`summarize_batch` would), in any order and when the caller
    knows which names it announced (the compressor: after the window before it, same rank).

    Parameters
    ----------
    batches : sequence of kernel_batch records
    config : KdeConfig, optional
        As :func:`summarize_batch` (None: :data:`~argus.summaries.kde.DEFAULT`).
    columns : sequence, optional
        Each record's :func:`batch_columns`, when the caller has them already (the
        compressor: from validation); None entries are unpacked here.

    Raises
    ------
    BatchError
        Inconsistent columns of a record.

    Notes
    -----
    Groups are one dense id per (record, kernel id, stream), ordered by kernel id, then stream
    inside each record (as :func:`summarize_batch` orders them), so every float the KDE
    computes is the single record's (:func:`~argus.summaries.kde.summarize_blocks`). Kernel
    ids come from a process-wide name cache; the quantile levels' list is built once. A poll
    of more than ``CHUNK_EVENTS`` events is summarised one chunk of consecutive records at a
    time (the same records; its arrays stay in cache).
    """

    def __init__(
        self,
        batches: Sequence[Mapping[str, Any]],
        *,
        config: KdeConfig | None = None,
        columns: Sequence[BatchColumns | None] | None = None,
    ) -> None:
        config = DEFAULT if config is None else config
        self.batches = batches
        self.off_all: np.ndarray | None = None
        self._uk_objs: np.ndarray | None = None  # kernel ids as the name cache's int objects
        given = columns if columns is not None else [None] * len(batches)
        cols = [batch_columns(b) if c is None else c for b, c in zip(batches, given, strict=True)]
        self.names = [c[0] for c in cols]
        n_rec = len(cols)
        sizes = np.fromiter((c[1].size for c in cols), np.int64, n_rec)
        self._parts: list[SummarizedBatches] = []
        self._part_first: list[int] = []
        if n_rec > 1 and int(sizes.sum()) > CHUNK_EVENTS:  # in chunks that stay in cache
            ends = np.cumsum(sizes).tolist()
            a = 0
            while a < n_rec:
                b = max(bisect.bisect_right(ends, (ends[a - 1] if a else 0) + CHUNK_EVENTS), a + 1)
                self._part_first.append(a)
                self._parts.append(
                    SummarizedBatches(batches[a:b], config=config, columns=cols[a:b])
                )
                a = b
            return
        if n_rec == 0 or not sizes.any():
            many0 = summarize_many(np.zeros(0, np.int64), np.zeros(0, np.int64), config=config)
            self._set(config, many0, np.zeros(n_rec + 1, np.int64), [0] * n_rec)
            self.gk_all = self.gs_all = np.zeros(0, np.uint32)
            self.gk_first = np.zeros(0, bool)
            return
        name_counts = np.fromiter((len(c[0]) for c in cols), np.int64, n_rec)
        ids = [(c[0].kids, c[0].objs) if type(c[0]) is _Names else _list_ids(c[0]) for c in cols]
        n_names = int(name_counts.sum())
        if all(k[0] is ids[0][0] for k in ids):  # one dictionary (the producers' usual case)
            uk, k_of_name = np.unique(ids[0][0], return_inverse=True)
            k_of_name = k_of_name.reshape(-1)
            self._uk_objs = np.empty(uk.size, object)
            self._uk_objs[k_of_name] = ids[0][1]  # the id objects (a name may recur)
            k_of_name = np.tile(k_of_name, n_rec)
        else:
            uk, k_of_name = np.unique(np.concatenate([k[0] for k in ids]), return_inverse=True)
            k_of_name = k_of_name.reshape(-1)
            self._uk_objs = np.empty(uk.size, object)
            self._uk_objs[k_of_name] = np.concatenate([k[1] for k in ids])
        stream = np.concatenate([c[2] for c in cols])
        s_max = int(stream.max())
        if n_names * (s_max + 1) <= 4 * stream.size + 4096:
            # small stream ids (CUDA's): slots use them as they are, the numbering below
            # drops the unused ones (no densifying pass over the events)
            us = np.arange(s_max + 1, dtype=np.uint32)
            s_dense = stream
        elif s_max < 65536:
            present = np.bincount(stream, minlength=1) > 0
            us = np.flatnonzero(present).astype(np.uint32)
            s_dense = (np.cumsum(present) - 1)[stream]
        else:
            us, s_dense = np.unique(stream, return_inverse=True)
        width = max(us.size, 1)
        # slot = (record's name, stream), one per event: the name index made global, then
        # numbered in the order of the groups (record, kernel id, stream)
        slot = np.empty(stream.size, np.int64)
        at = base = 0
        for c in cols:  # a record's name indices + the names before it, one call per record
            np.add(c[1], np.int64(base), out=slot[at : at + c[1].size])
            at += c[1].size
            base += len(c[0])
        slot *= width
        slot += s_dense.reshape(-1)
        del stream, s_dense
        used, inv, slot_n = _numbering(slot, n_names * width)
        name, s_of = np.divmod(used, width)
        n_k = max(uk.size, 1)
        order = np.repeat(np.arange(n_rec), name_counts)[name]
        order *= n_k
        order += k_of_name[name]
        order *= width
        order += s_of
        groups, g_of_slot = np.unique(order, return_inverse=True)  # a name may recur
        g_of_slot = g_of_slot.reshape(-1)
        if inv is None:  # the KDE looks the groups' offsets up per slot
            label, slots = slot, (used, g_of_slot, n_names * width)
        else:
            label, slots = g_of_slot[inv], None
        del slot, inv
        dur = np.concatenate([c[3] for c in cols], dtype=np.float64)  # log takes floats
        # summarize_blocks' computation without its checks of what was built here
        res = _summarize(
            label,
            dur,
            sizes,
            config,
            groups // (n_k * width),
            np.bincount(g_of_slot, weights=slot_n, minlength=groups.size).astype(np.int64),
            slots,
        )
        self._set(config, res.many, res.block_groups, [r.total for r in res.rejected])
        gid = groups[res.many.group_ids]
        self._k_all = gid // width % n_k  # index into uk
        self.gk_all = uk[self._k_all].astype("<u4")
        self.gs_all = us[gid % width].astype("<u4")
        self._first_of_kernel(res.block_groups)

    def _first_of_kernel(self, block_groups: np.ndarray) -> None:
        """``gk_first`` (G,) bool: the group is its record's first of its kernel id."""
        gk = self.gk_all
        first = np.ones(gk.size, dtype=bool)
        np.not_equal(gk[1:], gk[:-1], out=first[1:])
        first[block_groups[:-1][np.diff(block_groups) > 0]] = True
        self.gk_first = first

    def _set(
        self, config: KdeConfig, many: ManySummary, block_groups: np.ndarray, rejected: list[int]
    ) -> None:
        self.method = many.method
        self.levels = _levels_list(many.quantile_levels)
        q = many.cluster_quantiles_ns
        if config.quantile_encoding == "log16":
            med, offsets = encode_log16(q, many.quantile_levels)
            self.q_all = med.astype("<f4", copy=False)
            self.off_all = offsets.astype("<i2", copy=False)
        elif config.quantile_encoding == "float32":
            self.q_all, self.off_all = q.astype("<f4"), None
        else:
            raise ValueError(f"unknown quantile encoding {config.quantile_encoding!r}")
        self.gc_all = many.group_clusters.astype(np.uint8)
        self.cc_all = many.cluster_count.astype("<u4")
        n_cum = np.zeros(many.group_n.size + 1, np.int64)
        np.cumsum(many.group_n, out=n_cum[1:])
        self.n_events = np.diff(n_cum[block_groups]).tolist()  # per record
        self.cb = many.group_first[block_groups].tolist()  # each record's first cluster
        self.bg = block_groups.tolist()  # each record's first group
        self.rejected = rejected
        self._method_levels = _method_levels_body(self.method, self.levels)
        self._mv: tuple[Any, ...] | None = None

    def __len__(self) -> int:
        return len(self.batches)

    def record(self, i: int, *, announced: set[int] | None = None) -> dict[str, Any]:
        """Record i's ``kernel_summary`` (``announced``: as :func:`summarize_batch`'s; the set
        is read, not modified)."""
        if self._parts:
            p = bisect.bisect_right(self._part_first, i) - 1
            return self._parts[p].record(i - self._part_first[p], announced=announced)
        batch = self.batches[i]
        g0, g1 = self.bg[i], self.bg[i + 1]
        c0, c1 = self.cb[i], self.cb[i + 1]
        if self._mv is None:
            self._mv = self._views()
        gk, gs, gc, cc, q, off, q_item, off_item, used_all, used_at = self._mv
        used = used_all[used_at[i] : used_at[i + 1]]  # groups are ordered by kernel id
        if announced is None:
            new = used
        elif announced.issuperset(used):  # steady state: no set lookups in Python
            new = []
        else:
            new = [k for k in used if k not in announced]
        names_by_id = self.names_of(i, new)
        return {
            "job": batch["job"],
            "rank": int(batch["rank"]),
            "window_id": int(batch["window_id"]),
            "window_start_ns": int(batch["window_start_ns"]),
            "window_end_ns": int(batch["window_end_ns"]),
            "coords": dict(batch.get("coords") or {}),
            "streams": list(batch.get("streams") or []),
            "method": self.method,
            "quantile_levels": list(self.levels),
            "kernel_names": [{"id": k, "name": names_by_id[k]} for k in new],
            # slices of the poll's column bytes (``_views``): the slices' ``tobytes()``
            "group_kernel": gk[4 * g0 : 4 * g1],
            "group_stream": gs[4 * g0 : 4 * g1],
            "group_clusters": gc[g0:g1],
            "cluster_count": cc[4 * c0 : 4 * c1],
            "cluster_quantiles_ns": q[c0 * q_item : c1 * q_item],
            "cluster_log_offsets": off[c0 * off_item : c1 * off_item],
            "extra": b"",
            "n_events": self.n_events[i],
            "rejected": int(self.rejected[i]),
        }

    def names_of(self, i: int, ids: Iterable[int]) -> dict[int, str]:
        """Kernel id -> name of record i's kernels ``ids`` (those :meth:`encoded` announced)."""
        if self._parts:
            p = bisect.bisect_right(self._part_first, i) - 1
            return self._parts[p].names_of(i - self._part_first[p], ids)
        ids = list(ids)
        if not ids:
            return {}
        names_by_id = dict(zip(_kids(self.names[i]), self.names[i], strict=True))
        return {k: names_by_id[k] for k in ids}

    def encoded(
        self, i: int, codec: Any, *, announced: set[int] | None = None
    ) -> tuple[bytes, list[int]]:
        """Record i's ``kernel_summary`` framed and encoded: the bytes of
        ``codec.encode("kernel_summary", self.record(i, announced=announced))``, and the
        kernel ids whose names it carries (add them to ``announced`` once delivered).

        Written here without the dict: the rank's constant parts (job, rank, coords, streams)
        cached while they repeat, the columns straight from the poll's arrays. A field the
        writer does not take (not an int or a str) goes through ``codec.encode``, which
        raises what it raises (``EncodeError``).
        """
        if self._parts:
            p = bisect.bisect_right(self._part_first, i) - 1
            return self._parts[p].encoded(i - self._part_first[p], codec, announced=announced)
        batch = self.batches[i]
        g0, g1 = self.bg[i], self.bg[i + 1]
        c0, c1 = self.cb[i], self.cb[i + 1]
        if self._mv is None:
            self._mv = self._views()
        gk, gs, gc, cc, q, off, q_item, off_item, used_all, used_at = self._mv
        used = used_all[used_at[i] : used_at[i + 1]]  # the record's kernel ids, increasing
        if announced is None:
            new = used
        elif announced.issuperset(used):
            new = []
        else:
            new = [k for k in used if k not in announced]
        rp = _rank_parts(batch)
        w, t0, t1 = batch.get("window_id"), batch.get("window_start_ns"), batch.get("window_end_ns")
        names = _names_body(new, self.names[i]) if new else b"\x00"
        if rp is None or names is None or not (_is_long(w) and _is_long(t0) and _is_long(t1)):
            return codec.encode("kernel_summary", self.record(i, announced=announced)), new
        ng, nc = g1 - g0, c1 - c0
        nq, no = nc * q_item, nc * off_item
        return (
            b"".join(
                (
                    codec.header("kernel_summary"),
                    rp[0],
                    avro_long(w),
                    avro_long(t0),
                    avro_long(t1),
                    rp[1],
                    self._method_levels,
                    names,
                    avro_long(4 * ng),
                    gk[4 * g0 : 4 * g1],
                    avro_long(4 * ng),
                    gs[4 * g0 : 4 * g1],
                    avro_long(ng),
                    gc[g0:g1],
                    avro_long(4 * nc),
                    cc[4 * c0 : 4 * c1],
                    avro_long(nq),
                    q[c0 * q_item : c0 * q_item + nq],
                    b"\x00",  # extra
                    avro_long(self.n_events[i]),
                    avro_long(int(self.rejected[i])),
                    rp[2],
                    avro_long(no),
                    off[c0 * off_item : c0 * off_item + no],
                )
            ),
            new,
        )

    def _views(self) -> tuple[Any, ...]:
        """The poll's columns as bytes (a record's are slices of them); the bytes per cluster
        of the quantiles and of the log offsets; the kernel ids each record uses (one list,
        record i's from ``at[i]`` to ``at[i + 1]``) and ``at``."""
        off = self.off_all if self.off_all is not None else np.zeros(0, "<i2")
        views = tuple(
            a.tobytes()
            for a in (self.gk_all, self.gs_all, self.gc_all, self.cc_all, self.q_all, off)
        )
        n_levels = len(self.levels)
        q_item = 4 if self.off_all is not None else 4 * n_levels
        off_item = 2 * (n_levels - 1) if self.off_all is not None else 0
        at = np.zeros(self.gk_first.size + 1, np.int64)
        np.cumsum(self.gk_first, out=at[1:])
        if self._uk_objs is not None:  # the name cache's int objects
            used_all = self._uk_objs[self._k_all[self.gk_first]].tolist()
        else:
            used_all = self.gk_all[self.gk_first].tolist()
        return (*views, q_item, off_item, used_all, at[self.bg].tolist())


def _names_body(ids: list[int], names: list[str]) -> bytes | None:
    """The ``kernel_names`` array's Avro body for ``ids`` (names from the record's
    dictionary), or None when a name is not a str."""
    by_id = dict(zip(_kids(names), names, strict=True))
    out = [avro_long(len(ids))]
    for k in ids:
        name = by_id[k]
        if type(name) is not str:
            return None
        out += (avro_long(k), avro_string(name))
    out.append(b"\x00")
    return b"".join(out)


@lru_cache(maxsize=64)
def _method_levels_body(method: str, levels: tuple[float, ...]) -> bytes:
    """Avro body of ``method`` and ``quantile_levels`` (one block of doubles)."""
    body = avro_string(method)
    if levels:
        body += avro_long(len(levels)) + np.asarray(levels, "<f8").tobytes()
    return body + b"\x00"


@lru_cache(maxsize=64)
def _levels_tuple(levels: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(float(v) for v in levels)


def _levels_list(levels: np.ndarray) -> tuple[float, ...]:
    """The levels as Python floats, built once per level set."""
    return _levels_tuple(tuple(levels.tolist()))


def summary_columns(record: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    """Decode and check the columns of a ``kernel_summary`` record, whatever its encoding.

    Returns
    -------
    gk, gs : (G,) uint32
        Kernel id and stream of each group.
    gc : (G,) uint8
        Clusters per group (the clusters of group g follow those of group g − 1).
    cc : (C,) uint32
        Events per cluster.
    q : (C, L) float, ns
        Quantiles of every cluster at every level (decoded from ``log16`` when the record
        carries ``cluster_log_offsets``; float32 values as sent otherwise).
    levels : (L,) float64

    Raises
    ------
    BatchError
        ``bad-summary``: a missing field, a byte length that is not a whole number of
        items, or columns whose lengths disagree with ``group_clusters`` and the levels.
    """
    gk, gs, gc, cc, q, off, levels = summary_wire_columns(record)
    if off.size:
        q = decode_log16(q, off, levels)
    return gk, gs, gc, cc, q, levels


def summary_wire_columns(record: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    """:func:`summary_columns` without decoding the quantiles: ``gk, gs, gc, cc, q, off,
    levels``, checked alike, where ``q`` is (C, L) float32 ns and ``off`` empty, or (log16)
    ``q`` the (C,) float32 medians and ``off`` the (C, L − 1) int16 offsets."""
    try:
        gk = unpack(record["group_kernel"], "uint32", field="group_kernel")
        gs = unpack(record["group_stream"], "uint32", field="group_stream")
        gc = unpack(record["group_clusters"], "uint8", field="group_clusters")
        cc = unpack(record["cluster_count"], "uint32", field="cluster_count")
        q = unpack(record["cluster_quantiles_ns"], "float32", field="cluster_quantiles_ns")
        off = unpack(record.get("cluster_log_offsets") or b"", "int16", field="cluster_log_offsets")
        levels = np.asarray(record["quantile_levels"], dtype=np.float64)
    except KeyError as exc:
        raise BatchError("bad-summary", f"kernel_summary lacks field {exc}") from None
    except ValueError as exc:
        raise BatchError("bad-summary", str(exc)) from exc
    if not (gk.size == gs.size == gc.size):
        raise BatchError("bad-summary", f"group columns have {gk.size}/{gs.size}/{gc.size} entries")
    n_clusters = int(gc.sum(dtype=np.int64))
    n_levels = levels.size
    if off.size == 0:
        if cc.size != n_clusters or q.size != n_clusters * n_levels:
            raise BatchError(
                "bad-summary",
                f"group_clusters sums to {n_clusters} but cluster_count has {cc.size} entries "
                f"and cluster_quantiles_ns {q.size} values for {n_levels} levels",
            )
        return gk, gs, gc, cc, q.reshape(n_clusters, n_levels), off, levels
    try:
        median_index(levels)
    except ValueError as exc:
        raise BatchError("bad-summary", f"cluster_log_offsets given but {exc}") from None
    if cc.size != n_clusters or q.size != n_clusters or off.size != n_clusters * (n_levels - 1):
        raise BatchError(
            "bad-summary",
            f"group_clusters sums to {n_clusters} but cluster_count has {cc.size} entries, "
            f"cluster_quantiles_ns {q.size} medians and cluster_log_offsets {off.size} "
            f"offsets for {n_levels} levels (log16 needs {n_clusters} and "
            f"{n_clusters * (n_levels - 1)})",
        )
    return gk, gs, gc, cc, q, off.reshape(n_clusters, n_levels - 1), levels


def groups_from_summary(
    record: Mapping[str, Any], *, keys: Iterable[tuple[int, int]] | None = None
) -> dict[tuple[int, int], Summary]:
    """``{(kernel_id, stream): Summary}`` of a decoded ``kernel_summary`` record.

    Quantiles come back as float64 from the wire's float32 (or ``log16``) encoding. With
    ``keys``, only those groups (the ones present) are built.

    Raises
    ------
    BatchError
        Columns that disagree with ``group_clusters`` or ``quantile_levels``.
    """
    gk, gs, gc, cc, q, levels = summary_columns(record)
    method = str(record.get("method", PAPER.method))
    ends = np.cumsum(gc, dtype=np.int64)
    out: dict[tuple[int, int], Summary] = {}
    rows: Iterable[int] = range(gk.size)
    if keys is not None:
        want = {(int(k), int(st)) for k, st in keys}
        rows = [i for i, ks in enumerate(zip(gk.tolist(), gs.tolist(), strict=True)) if ks in want]
    starts = (ends - gc).tolist()
    for i in rows:
        a, b = starts[i], int(ends[i])
        out[(int(gk[i]), int(gs[i]))] = Summary(
            levels, cc[a:b].astype(np.int64), q[a:b].astype(np.float64), method
        )
    return out


def names_from_summary(record: Mapping[str, Any]) -> dict[int, str]:
    """``{kernel_id: name}`` announced in a ``kernel_summary`` record."""
    return {int(n["id"]): str(n["name"]) for n in record.get("kernel_names", [])}


#: windows between a rank's full kernel-name announcements (:class:`NameAnnouncements`)
REANNOUNCE_WINDOWS = 32


class NameAnnouncements:
    """Which kernel ids each producer has announced, the way the compressor sends them: a
    rank's names with its first window, a new id with the window that first uses it, and
    all of them again every ``every`` windows (a consumer that starts late learns them).

    Call :meth:`known` once per window of a producer (``who``: any key, e.g. job and rank),
    pass the set as ``announced=`` to :meth:`SummarizedBatches.record` / ``encoded``, then
    add the ids that window named to it.
    """

    def __init__(self, every: int = REANNOUNCE_WINDOWS) -> None:
        self.every = every
        self._known: dict[Hashable, set[int]] = {}
        self._since: dict[Hashable, int] = {}

    def known(self, who: Hashable) -> set[int]:
        """The ids ``who`` has announced, for its next window (emptied every ``every``)."""
        n = self._since.get(who, 0) + 1
        if n >= self.every:
            self._known.pop(who, None)
            n = 0
        self._since[who] = n
        return self._known.setdefault(who, set())


class KernelNames:
    """Consumer-side dictionary of announced kernel names, keyed by (job, rank) scope.

    Producers announce each name once per rank, so keep one book per consumer and feed it
    every summary; ids are global (the same name has the same id everywhere), so a name
    learned from any rank serves all.
    """

    def __init__(self) -> None:
        self._names: dict[int, str] = {}

    def update(self, record: Mapping[str, Any]) -> None:
        self._names.update(names_from_summary(record))

    def merge(self, names: Mapping[Any, str]) -> None:
        """Add ``{kernel id: name}`` (ids as int or str, as JSON keeps them)."""
        self._names.update({int(k): str(v) for k, v in names.items()})

    def update_many(self, records: Iterable[Mapping[str, Any]]) -> None:
        book = self._names
        for r in records:
            for n in r.get("kernel_names") or ():
                book[int(n["id"])] = str(n["name"])

    def name(self, kid: int) -> str:
        """The name of kernel id ``kid``, or ``kernel#<hex id>`` when not announced yet."""
        return self._names.get(int(kid), f"kernel#{int(kid):08x}")

    def __contains__(self, kid: object) -> bool:
        return kid in self._names

    def __len__(self) -> int:
        return len(self._names)
