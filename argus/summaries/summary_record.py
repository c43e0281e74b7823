"""Wire records <-> the compression core: ``kernel_batch`` in, ``kernel_summary`` out.

* :func:`summarize_batch` turns one decoded ``kernel_batch`` record (a rank-window of raw
  kernel events) into a ``kernel_summary`` record ready for ``Codec.encode``. Groups are
  (kernel id, stream); kernel names travel as stable 32-bit ids
  (:func:`argus.schemas.arrays.kernel_id`) and the name dictionary only carries the ids the
  producer has not announced yet, so a steady-state summary holds numbers only.
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

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from argus.errors import ArgusError
from argus.schemas.arrays import kernel_id, pack, unpack
from argus.summaries.kde import DEFAULT, PAPER, KdeConfig, ManySummary, Summary, summarize_many
from argus.summaries.quantile_wire import decode_log16, encode_log16, median_index

__all__ = [
    "BatchError",
    "KernelNames",
    "batch_columns",
    "groups_from_summary",
    "names_from_summary",
    "summarize_batch",
    "summary_columns",
    "summary_from_many",
]


class BatchError(ArgusError, ValueError):
    """A kernel_batch / kernel_summary record whose columns are inconsistent.

    ``reason`` is a short code for DLQ records: ``bad-column`` (length or dtype),
    ``bad-name-index`` (name_idx outside the name dictionary), ``bad-summary``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@lru_cache(maxsize=65536)
def _kid(name: str) -> int:
    return kernel_id(name)


def batch_columns(batch: Mapping[str, Any]) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
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
        names = list(batch["names"])
        name_idx = unpack(batch["name_idx"], "uint32", field="name_idx")
        stream = unpack(batch["stream"], "uint32", field="stream")
        dur = unpack(batch["duration_ns"], "int64", field="duration_ns")
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
    if name_idx.size and int(name_idx.max()) >= len(names):
        raise BatchError(
            "bad-name-index",
            f"name_idx {int(name_idx.max())} but the name dictionary has {len(names)} names",
        )
    return names, name_idx, stream, dur


def _group_index(
    names: list[str], name_idx: np.ndarray, stream: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense group per event and the (kernel id, stream) of each dense group id."""
    kids_of_name = np.fromiter((_kid(n) for n in names), dtype=np.uint32, count=len(names))
    uk, name_to_k = np.unique(kids_of_name, return_inverse=True)  # equal names share a group
    if stream.size and int(stream.max()) < 65536:
        present = np.bincount(stream, minlength=1) > 0
        us = np.flatnonzero(present).astype(np.uint32)
        s_dense = (np.cumsum(present) - 1)[stream]
    else:
        us, s_dense = np.unique(stream, return_inverse=True)
    gid = name_to_k.reshape(-1)[name_idx].astype(np.int64) * max(us.size, 1) + s_dense
    return gid, uk.astype(np.uint32), us.astype(np.uint32)


def summary_from_many(
    many: ManySummary,
    kernel_of_group: np.ndarray,
    stream_of_group: np.ndarray,
    *,
    header: Mapping[str, Any],
    names_by_id: Mapping[int, str],
    announced: set[int] | None,
    quantile_encoding: str = "float32",
) -> dict[str, Any]:
    """A ``kernel_summary`` record from a :class:`ManySummary` and the groups' (kernel, stream).

    ``quantile_encoding`` is ``"float32"`` or ``"log16"`` (see the module doc).
    """
    gk = np.asarray(kernel_of_group, dtype=np.uint32)
    gs = np.asarray(stream_of_group, dtype=np.uint32)
    order = np.lexsort((gs, gk))  # deterministic record layout: by kernel id, then stream
    # cluster rows of the groups in record order (no Python loop per group)
    n_of = np.diff(many.group_first)[order]
    out_start = np.cumsum(n_of) - n_of
    rows = np.repeat(many.group_first[:-1][order] - out_start, n_of) + np.arange(int(n_of.sum()))
    q = many.cluster_quantiles_ns[rows]
    if quantile_encoding == "log16":
        med, offsets = encode_log16(q, many.quantile_levels)
        q_col, off_col = pack(med, "float32"), pack(offsets.reshape(-1), "int16")
    elif quantile_encoding == "float32":
        q_col, off_col = pack(q.reshape(-1), "float32"), b""
    else:
        raise ValueError(f"unknown quantile encoding {quantile_encoding!r}")
    used = sorted({int(k) for k in gk})
    new = [k for k in used if announced is None or k not in announced]
    return {
        "job": header["job"],
        "rank": int(header["rank"]),
        "window_id": int(header["window_id"]),
        "window_start_ns": int(header["window_start_ns"]),
        "window_end_ns": int(header["window_end_ns"]),
        "coords": dict(header.get("coords") or {}),
        "streams": list(header.get("streams") or []),
        "method": many.method,
        "quantile_levels": [float(v) for v in many.quantile_levels],
        "kernel_names": [{"id": k, "name": names_by_id[k]} for k in new],
        "group_kernel": pack(gk[order], "uint32"),
        "group_stream": pack(gs[order], "uint32"),
        "group_clusters": pack(many.group_clusters[order], "uint8"),
        "cluster_count": pack(many.cluster_count[rows], "uint32"),
        "cluster_quantiles_ns": q_col,
        "cluster_log_offsets": off_col,
        "extra": b"",
        "n_events": int(many.group_n.sum()),
        "rejected": int(many.rejected.total),
    }


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
    config = DEFAULT if config is None else config
    names, name_idx, stream, dur = batch_columns(batch)
    gid, uk, us = _group_index(names, name_idx, stream)
    many = summarize_many(gid, dur, config=config)
    width = max(us.size, 1)
    gk = uk[many.group_ids // width] if many.n_groups else np.zeros(0, np.uint32)
    gs = us[many.group_ids % width] if many.n_groups else np.zeros(0, np.uint32)
    names_by_id = {_kid(n): n for n in names}
    return summary_from_many(
        many,
        gk,
        gs,
        header=batch,
        names_by_id=names_by_id,
        announced=announced,
        quantile_encoding=config.quantile_encoding,
    )


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
        return gk, gs, gc, cc, q.reshape(n_clusters, n_levels), levels
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
    return gk, gs, gc, cc, decode_log16(q, off, levels), levels


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
        for r in records:
            self.update(r)

    def name(self, kid: int) -> str:
        """The name of kernel id ``kid``, or ``kernel#<hex id>`` when not announced yet."""
        return self._names.get(int(kid), f"kernel#{int(kid):08x}")

    def __contains__(self, kid: object) -> bool:
        return kid in self._names

    def __len__(self) -> int:
        return len(self._names)
