"""Phase -> comparison-group routing (the table is data; see ``docs/detectors.md``).

A rank is compared only with ranks that should do the same work. A *group kind* names the
parallel dimensions that vary inside a group; the others are fixed and form the *group id*,
so the group of a record is computable from that record's ``coords`` alone (a stream can
re-key records by group without a topology lookup).

Rank order of the layout is Megatron's ``tp-cp-ep-dp-pp`` (fastest first, as in
``job_topology.avsc``): ``rank = tp + TP*(cp + CP*(ep + EP*(dp + DP*pp)))``. Here ``dp`` is the
data-parallel index *inside* an expert-parallel slice, so the dense data-parallel replicas
of a (pp, tp, cp) position are all (dp, ep) pairs, and the expert-data-parallel (EDP) group
of a rank varies ``dp`` only.

Default group kinds (override ``[detectors.routing.groups]``):

=====  ==========  ===========================================================
kind   varies      used for
=====  ==========  ===========================================================
dp     dp, ep      compute phases across DP replicas at the same (PP stage, TP
                   rank, CP rank); dense gradient sync
tp     tp          tensor-parallel collectives
pp     pp          pipeline P2P send/recv (the pipeline chain holding the pairs)
ep     ep          MoE all-to-all (dispatch/combine)
edp    dp          expert-gradient sync
cp     cp          context-parallel collectives
job    everything  job-level series (L1)
=====  ==========  ===========================================================

Default rules (first match wins, case-insensitive globs on the phase name; override or
extend with ``[detectors.routing] rules = [["pattern", "kind"], ...]`` which go *before*
the defaults), then a fallback by ``stream_kind``: compute/comm/host -> dp, p2p -> pp.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from argus.errors import DetectorConfigError, DetectorInputError

__all__ = [
    "COLLECTIVE_STREAM_KINDS",
    "DEFAULT_FALLBACK",
    "DEFAULT_GROUPS",
    "DEFAULT_RULES",
    "DIMS",
    "Routing",
    "group_id",
    "group_ids",
    "group_span",
    "rank_of",
]

DIMS: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
"""Parallel dimensions in rank order, fastest first."""

DEFAULT_GROUPS: Mapping[str, tuple[str, ...]] = {
    "dp": ("dp", "ep"),
    "tp": ("tp",),
    "pp": ("pp",),
    "ep": ("ep",),
    "edp": ("dp",),
    "cp": ("cp",),
    "job": DIMS,
}

DEFAULT_RULES: tuple[tuple[str, str], ...] = (
    ("tp_*", "tp"),
    ("*tensor_parallel*", "tp"),
    ("sp_*", "tp"),
    ("cp_*", "cp"),
    ("ep_*", "ep"),
    ("*alltoall*", "ep"),
    ("*all_to_all*", "ep"),
    ("a2a*", "ep"),
    ("moe_dispatch*", "ep"),
    ("moe_combine*", "ep"),
    ("expert_grad*", "edp"),
    ("edp_*", "edp"),
    ("pp_*", "pp"),
    ("*p2p*", "pp"),
    ("send_*", "pp"),
    ("recv_*", "pp"),
)

DEFAULT_FALLBACK: Mapping[str, str] = {"compute": "dp", "comm": "dp", "host": "dp", "p2p": "pp"}

COLLECTIVE_STREAM_KINDS = frozenset({"comm", "p2p"})
"""Phases on these streams are collectives: a late arriver looks *shorter* there."""


def _coord(coords: Mapping[str, Any], dim: str, what: str) -> int:
    v = coords.get(f"{dim}_{what}", 0 if what == "rank" else 1)
    if not isinstance(v, (int, np.integer)):
        raise DetectorInputError(f"coords.{dim}_{what} must be an int, got {v!r}")
    return int(v)


def group_id(coords: Mapping[str, Any], varies: Sequence[str]) -> str:
    """Id of the group varying ``varies`` that holds a rank at ``coords``.

    The id lists the fixed dimensions whose size is > 1, e.g. ``"pp1.tp0"``; ``"all"``
    when none is.

    Examples
    --------
    >>> c = {"tp_rank": 1, "tp_size": 2, "pp_rank": 3, "pp_size": 4, "dp_rank": 5, "dp_size": 8}
    >>> group_id(c, ("dp", "ep"))
    'pp3.tp1'
    >>> group_id(c, ("tp",))
    'pp3.dp5'
    >>> group_id(c, ("tp", "cp", "ep", "dp", "pp"))
    'all'
    """
    parts = []
    for dim in ("pp", "tp", "cp", "ep", "dp"):
        if dim in varies or _coord(coords, dim, "size") <= 1:
            continue
        parts.append(f"{dim}{_coord(coords, dim, 'rank')}")
    return ".".join(parts) if parts else "all"


def group_ids(coords: Mapping[str, npt.ArrayLike], varies: Sequence[str]) -> list[str]:
    """Vectorised :func:`group_id` over columns ``{dim_rank: (R,), dim_size: (R,)}``."""
    cols = {k: np.asarray(v) for k, v in coords.items()}
    n = len(next(iter(cols.values()))) if cols else 0
    out = [""] * n
    for i in range(n):
        out[i] = group_id({k: int(v[i]) for k, v in cols.items()}, varies)
    return out


def rank_of(coords: Mapping[str, Any]) -> int:
    """Global rank of ``coords`` in ``tp-cp-ep-dp-pp`` order (fastest first)."""
    rank, stride = 0, 1
    for dim in DIMS:
        rank += _coord(coords, dim, "rank") * stride
        stride *= _coord(coords, dim, "size")
    return rank


def group_span(coords: Mapping[str, Any], varies: Sequence[str]) -> tuple[int, int]:
    """Lowest and highest :func:`rank_of` position of the group varying ``varies`` that
    holds the rank at ``coords``; every member lies between them (rank order is
    ``tp-cp-ep-dp-pp``, so a group is contained in any contiguous range holding both).

    >>> c = {"tp_rank": 1, "tp_size": 2, "dp_rank": 3, "dp_size": 4, "pp_rank": 1, "pp_size": 2}
    >>> group_span(c, ("tp",)), group_span(c, ("dp",)), group_span(c, ("pp",))
    ((14, 15), (9, 15), (7, 15))
    """
    lo = dict(coords)
    hi = dict(coords)
    for d in varies:
        lo[f"{d}_rank"] = 0
        hi[f"{d}_rank"] = _coord(coords, d, "size") - 1
    return rank_of(lo), rank_of(hi)


@dataclass(frozen=True)
class Routing:
    """The phase -> group-kind table.

    Build with :meth:`default` or :meth:`from_config` (the ``[detectors.routing]`` table:
    ``rules`` = list of ``[glob, kind]`` tried before the defaults, ``fallback`` = mapping
    ``stream_kind -> kind``, ``groups`` = mapping ``kind -> [dims that vary]``).
    """

    rules: tuple[tuple[str, str], ...] = DEFAULT_RULES
    fallback: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_FALLBACK))
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_GROUPS))
    _scopes: dict[tuple[tuple[str, ...], tuple[tuple[str, Any], ...]], tuple[str, int]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """:meth:`scope_of`'s answers, keyed by the kind's varying dims and the coords' items."""
    _ids: dict[tuple[tuple[str, ...], tuple[tuple[str, Any], ...]], str] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """:meth:`group_for_kind`'s answers, keyed as ``_scopes``."""

    def __post_init__(self) -> None:
        for kind, dims in self.groups.items():
            bad = [d for d in dims if d not in DIMS]
            if bad:
                raise DetectorConfigError(
                    f"routing.groups.{kind}: unknown dimension(s) {bad}; use {list(DIMS)}"
                )
        for pattern, kind in self.rules:
            if kind not in self.groups:
                raise DetectorConfigError(
                    f"routing rule {pattern!r} -> {kind!r}: no such group kind; "
                    f"known: {sorted(self.groups)}"
                )
        for sk, kind in self.fallback.items():
            if kind not in self.groups:
                raise DetectorConfigError(f"routing.fallback.{sk} -> {kind!r}: no such group kind")

    @classmethod
    def default(cls) -> Routing:
        return cls()

    @classmethod
    def from_config(cls, table: Mapping[str, Any] | None) -> Routing:
        """Defaults overridden by a ``[detectors.routing]`` table.

        Raises
        ------
        DetectorConfigError
            Malformed rules, unknown group kinds or dimensions.
        """
        table = dict(table or {})
        unknown = set(table) - {"rules", "fallback", "groups"}
        if unknown:
            raise DetectorConfigError(
                f"detectors.routing: unknown key(s) {sorted(unknown)}; known: fallback, groups, rules"
            )
        rules: list[tuple[str, str]] = []
        for item in table.get("rules", []) or []:
            if not (isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2):
                raise DetectorConfigError(
                    f"detectors.routing.rules: each rule is [glob, kind], got {item!r}"
                )
            rules.append((str(item[0]), str(item[1])))
        groups = dict(DEFAULT_GROUPS)
        for kind, dims in (table.get("groups", {}) or {}).items():
            if isinstance(dims, str) or not isinstance(dims, Sequence):
                raise DetectorConfigError(f"detectors.routing.groups.{kind} must be a list of dims")
            groups[str(kind)] = tuple(str(d) for d in dims)
        fallback = {
            **DEFAULT_FALLBACK,
            **{str(k): str(v) for k, v in (table.get("fallback", {}) or {}).items()},
        }
        return cls(rules=tuple(rules) + DEFAULT_RULES, fallback=fallback, groups=groups)

    def kind_of(self, phase: str, stream_kind: str = "compute") -> str:
        """Group kind that phase ``phase`` (run on a ``stream_kind`` stream) is compared in."""
        return _kind_of(self.rules, tuple(sorted(self.fallback.items())), phase, stream_kind)

    def varies(self, kind: str) -> tuple[str, ...]:
        try:
            return self.groups[kind]
        except KeyError:
            raise DetectorInputError(
                f"no group kind {kind!r}; known: {sorted(self.groups)}"
            ) from None

    def group_of(
        self, coords: Mapping[str, Any], phase: str, stream_kind: str = "compute"
    ) -> tuple[str, str]:
        """``(group_kind, group_id)`` of a record's phase, from its coords alone."""
        kind = self.kind_of(phase, stream_kind)
        return kind, self.group_for_kind(coords, kind)

    def group_for_kind(self, coords: Mapping[str, Any], kind: str) -> str:
        """Group id of ``coords`` in group kind ``kind`` (remembered per coords items in
        their order, as :meth:`scope_of`; then per sorted items across routings)."""
        varies = self.varies(kind)
        try:
            key = (varies, tuple(coords.items()))
            sid = self._ids.get(key)
            if sid is None:
                sid = _cached_group_id(tuple(sorted(coords.items())), varies)
                if len(self._ids) >= _SCOPES_MAX:
                    self._ids.clear()
                self._ids[key] = sid
            return sid
        except TypeError:  # unhashable values: validate and compute directly
            return group_id(coords, varies)

    def expected_size(self, coords: Mapping[str, Any], kind: str) -> int:
        """Number of ranks a full group of ``kind`` holds, from the sizes in ``coords``."""
        n = 1
        for d in self.varies(kind):
            n *= _coord(coords, d, "size")
        return n

    def scope_of(self, coords: Mapping[str, Any], kind: str) -> tuple[str, int]:
        """``(group_for_kind(coords, kind), expected_size(coords, kind))``, remembered per
        coords (a job has one per rank; a summary router asks once per record).

        The key is the kind's varying dims (so a changed ``groups`` table misses) and the
        coords' items in their order (equal items, equal answer); coords with unhashable
        values are computed each time. At most ``_SCOPES_MAX`` answers are kept.
        """
        varies = self.varies(kind)
        try:
            key = (varies, tuple(coords.items()))
            hit = self._scopes.get(key)
        except TypeError:  # unhashable values: validate and compute directly
            return group_id(coords, varies), self.expected_size(coords, kind)
        if hit is None:
            hit = (self.group_for_kind(coords, kind), self.expected_size(coords, kind))
            if len(self._scopes) >= _SCOPES_MAX:
                self._scopes.clear()
            self._scopes[key] = hit
        return hit


_SCOPES_MAX = 65536
"""Entries of one :class:`Routing`'s :meth:`~Routing.scope_of` cache (a job's ranks)."""


@lru_cache(maxsize=65536)
def _cached_group_id(key: tuple[tuple[str, Any], ...], varies: tuple[str, ...]) -> str:
    return group_id(dict(key), varies)


@lru_cache(maxsize=4096)
def _kind_of(
    rules: tuple[tuple[str, str], ...],
    fallback: tuple[tuple[str, str], ...],
    phase: str,
    stream_kind: str,
) -> str:
    name = phase.lower()
    for pattern, kind in rules:
        if fnmatch.fnmatchcase(name, pattern.lower()):
            return kind
    return dict(fallback).get(stream_kind, "dp")
