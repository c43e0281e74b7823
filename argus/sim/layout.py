"""Parallel layout of a simulated job: DP x TP x PP x EP (x CP), Megatron rank order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from argus.errors import ArgusError
from argus.routing import DIMS, Routing

__all__ = ["Layout", "LayoutError"]


class LayoutError(ArgusError, ValueError):
    """A layout string or size that does not make a job."""


@dataclass(frozen=True)
class Layout:
    """Sizes of the parallel dimensions; world size is their product.

    Rank order is ``tp-cp-ep-dp-pp`` (fastest first): see :mod:`argus.routing`.
    ``dp`` is the data-parallel size *inside* one expert-parallel slice, so the dense
    data-parallel degree is ``dp * ep``.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    cp: int = 1

    def __post_init__(self) -> None:
        for d in DIMS:
            if getattr(self, d) < 1:
                raise LayoutError(f"{d} must be >= 1, got {getattr(self, d)}")

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.ep * self.cp

    @classmethod
    def parse(cls, text: str) -> Layout:
        """``"dp=8,tp=2,pp=2,ep=2"`` -> Layout (missing dims are 1).

        Raises
        ------
        LayoutError
            Unknown dimension or a non-integer size.
        """
        kw: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, _, val = part.partition("=")
            name = name.strip().lower()
            if name not in DIMS:
                raise LayoutError(f"layout {text!r}: unknown dimension {name!r}; use {list(DIMS)}")
            try:
                kw[name] = int(val)
            except ValueError:
                raise LayoutError(
                    f"layout {text!r}: {name} size {val!r} is not an integer"
                ) from None
        return cls(**kw)

    @classmethod
    def for_ranks(cls, ranks: int) -> Layout:
        """A plausible MoE layout for ``ranks`` GPUs (tp 2, pp 2 or 4, ep 4, rest dp).

        Raises
        ------
        LayoutError
            ``ranks`` is not a multiple of 16.
        """
        if ranks % 16:
            raise LayoutError(f"--ranks {ranks}: use a multiple of 16 or give --layout")
        pp = 4 if ranks >= 256 else 2
        rest = ranks // (2 * pp * 4)
        return cls(dp=rest, tp=2, pp=pp, ep=4)

    def __str__(self) -> str:
        return ",".join(f"{d}={getattr(self, d)}" for d in ("dp", "tp", "pp", "ep", "cp"))

    def coords_arrays(self) -> dict[str, np.ndarray]:
        """``{"<dim>_rank": (world,) int64, "<dim>_size": (world,) int64}`` for every rank."""
        r = np.arange(self.world, dtype=np.int64)
        out: dict[str, np.ndarray] = {}
        for d in DIMS:
            size = getattr(self, d)
            out[f"{d}_rank"] = r % size
            out[f"{d}_size"] = np.full(self.world, size, dtype=np.int64)
            r = r // size
        return out

    def coords(self, rank: int) -> dict[str, int]:
        """The ``Coords`` record of one rank."""
        out: dict[str, Any] = {}
        r = int(rank)
        if not 0 <= r < self.world:
            raise LayoutError(f"rank {rank} outside world of {self.world}")
        for d in DIMS:
            size = getattr(self, d)
            out[f"{d}_rank"] = r % size
            out[f"{d}_size"] = size
            r //= size
        return out

    def group_index(self, kind: str, routing: Routing | None = None) -> np.ndarray:
        """(world,) int64 dense index of each rank's group of ``kind`` (0..G-1)."""
        routing = routing or Routing.default()
        varies = routing.varies(kind)
        c = self.coords_arrays()
        key = np.zeros(self.world, dtype=np.int64)
        for d in DIMS:
            if d in varies:
                continue
            key = key * getattr(self, d) + c[f"{d}_rank"]
        _, idx = np.unique(key, return_inverse=True)
        return idx.astype(np.int64)

    def group_id_of(self, rank: int, kind: str, routing: Routing | None = None) -> str:
        routing = routing or Routing.default()
        return routing.group_for_kind(self.coords(rank), kind)
