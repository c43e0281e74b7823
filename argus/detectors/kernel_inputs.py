"""Adapters: ``kernel_summary`` dicts (``kernel_summary.avsc``) -> L3 :class:`RankKernels`.

The object input of :func:`argus.detectors.l3_window.detect_window`, shared by ``argus
diagnose``, the L3 tests and ``bench/bench_l3_block.py`` (the stream agent builds the
columnar table of :func:`~argus.detectors.l3_window.table_from_summaries` instead):

* :func:`summary_groups` - one record -> ``{(kernel name, stream): Summary}``;
* :func:`rank_kernels` - per-rank lists of Summaries -> one merged :class:`RankKernels` a rank;
* :func:`rank_kernels_from_summaries` - a window's records -> :class:`RankKernels`, both steps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from argus.detectors.l3_window import KernelKey, RankKernels, merge_summaries
from argus.errors import DetectorInputError
from argus.summaries import BatchError, KernelNames, Summary, groups_from_summary

__all__ = ["rank_kernels", "rank_kernels_from_summaries", "summary_groups"]


def summary_groups(rec: Mapping[str, Any], names: KernelNames) -> dict[KernelKey, Summary]:
    """``{(kernel name, stream): Summary}`` of one ``kernel_summary`` record.

    ``names`` is a :class:`argus.summaries.KernelNames` book shared by all the
    records read (names are announced once per rank); the record's names are added to it.

    Raises
    ------
    DetectorInputError
        Columns that disagree.
    """
    names.update(rec)
    try:
        groups = groups_from_summary(rec)
    except BatchError as exc:
        raise DetectorInputError(
            f"kernel_summary {rec.get('job')}/{rec.get('rank')} window {rec.get('window_id')}: {exc}"
        ) from exc
    return {(names.name(kid), st): s for (kid, st), s in groups.items()}


def rank_kernels(
    parts: Mapping[int, Mapping[KernelKey, Sequence[Summary]]],
    coords: Mapping[int, Mapping[str, Any]],
    stream_kinds: Mapping[int, Mapping[int, str]],
) -> list[RankKernels]:
    """One :class:`RankKernels` a rank of ``parts``, by rank.

    Parameters
    ----------
    parts : mapping rank -> (kernel name, stream) -> list of Summary
        Every Summary of the group in the window (one a record); merged into one.
    coords : mapping rank -> ``Coords`` record
        Needed for every rank of ``parts``.
    stream_kinds : mapping rank -> stream id -> kind
        A rank missing here has no stream kinds.
    """
    return [
        RankKernels(
            rk, coords[rk], {k: merge_summaries(v) for k, v in d.items()}, stream_kinds.get(rk, {})
        )
        for rk, d in sorted(parts.items())
    ]


def rank_kernels_from_summaries(
    records: Iterable[Mapping[str, Any]], names: KernelNames
) -> list[RankKernels]:
    """:class:`RankKernels` of a window's ``kernel_summary`` records (one a rank, by rank).

    ``names`` (a :class:`~argus.summaries.KernelNames` book) first learns every
    record's kernel names, so a record may come before the one of its rank that announced them.
    A rank's coords are those of its last record.

    Raises
    ------
    DetectorInputError
        A record whose columns disagree.
    """
    recs = list(records)
    names.update_many(recs)
    parts: dict[int, dict[KernelKey, list[Summary]]] = defaultdict(lambda: defaultdict(list))
    coords: dict[int, Mapping[str, Any]] = {}
    kinds: dict[int, dict[int, str]] = defaultdict(dict)
    for rec in recs:
        rk = int(rec["rank"])
        coords[rk] = rec.get("coords") or {}
        for si in rec.get("streams", []):
            kinds[rk][int(si["id"])] = si.get("kind", "unknown")
        for key, s in summary_groups(rec, names).items():
            parts[rk][key].append(s)
    return rank_kernels(parts, coords, kinds)
