"""Where this rank sits: rank, world size, local rank, host, and DP/TP/PP/EP/CP coordinates.

Three ways, first match wins:

1. explicit ``coords`` (a mapping like ``{"dp_rank": 3, "dp_size": 8, "tp_rank": 1, ...}``),
   e.g. from Megatron's ``parallel_state`` getters;
2. a :class:`Layout` (sizes per dimension and their rank order, fastest first; Megatron's
   default is ``tp-cp-ep-dp-pp``), from which the coordinates of every rank follow;
3. nothing: pure data parallelism, ``dp_rank = rank`` and ``dp_size = world_size``.

Rank and world size come from ``torch.distributed`` when it is initialised, else from the
``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` variables torchrun sets, else 0 / 1 / 0.

Group ids
---------
A rank's group of kind ``k`` (``dp``, ``tp``, ``pp``, ``ep``, ``cp``) is the set of ranks that
share every coordinate except ``k``. Its id is ``"<k>:"`` followed by those other coordinates,
e.g. the DP group of a rank at ``tp=1, pp=2`` (other dims unused) is ``"dp:cp0.ep0.pp2.tp1"``.
Control commands address groups with these ids (see :func:`group_id`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from argus.collectors.errors import CollectorConfigError

__all__ = ["DIMS", "Layout", "Topology", "discover_topology", "group_id", "layout_coords"]

DIMS = ("dp", "tp", "pp", "ep", "cp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


@dataclass(frozen=True)
class Layout:
    """Sizes of the parallel dimensions and their rank order (fastest-varying first)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    ep: int = 1
    cp: int = 1
    order: str = DEFAULT_ORDER

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.ep * self.cp

    def validate(self) -> Layout:
        dims = self.order.split("-")
        if sorted(dims) != sorted(DIMS):
            raise CollectorConfigError(
                f"layout order must name each of {', '.join(DIMS)} once, got {self.order!r}"
            )
        for d in DIMS:
            if getattr(self, d) < 1:
                raise CollectorConfigError(f"layout {d} size must be >= 1, got {getattr(self, d)}")
        return self


def layout_coords(layout: Layout, rank: int) -> dict[str, int]:
    """Coordinates (``dp_rank``, ``dp_size``, ...) of ``rank`` under ``layout``.

    Examples
    --------
    >>> c = layout_coords(Layout(dp=2, tp=2), 3)
    >>> (c["tp_rank"], c["dp_rank"])
    (1, 1)
    """
    out: dict[str, int] = {}
    r = rank
    for d in layout.order.split("-"):
        size = getattr(layout, d)
        out[f"{d}_rank"] = r % size
        out[f"{d}_size"] = size
        r //= size
    return {k: out[k] for d in DIMS for k in (f"{d}_rank", f"{d}_size")}


def group_id(coords: Mapping[str, int], kind: str) -> str:
    """Id of the ``kind`` group (``dp``/``tp``/``pp``/``ep``/``cp``) a rank belongs to."""
    if kind not in DIMS:
        raise ValueError(f"group kind must be one of {', '.join(DIMS)}, got {kind!r}")
    rest = ".".join(f"{d}{coords.get(d + '_rank', 0)}" for d in sorted(DIMS) if d != kind)
    return f"{kind}:{rest}"


@dataclass(frozen=True)
class Topology:
    """This rank's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    host: str
    pid: int
    coords: dict[str, int] = field(default_factory=dict)
    layout: Layout | None = None

    def groups(self) -> dict[str, str]:
        """``{kind: group id}`` for every dimension."""
        return {k: group_id(self.coords, k) for k in DIMS}

    def key(self, job: str) -> bytes:
        """Kafka key of this rank's records: ``job/rank``."""
        return f"{job}/{self.rank}".encode()


def _env_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise CollectorConfigError(f"environment {name} must be an integer, got {raw!r}") from None


def discover_topology(
    *,
    rank: int | None = None,
    world_size: int | None = None,
    local_rank: int | None = None,
    layout: Layout | None = None,
    coords: Mapping[str, int] | None = None,
    env: Mapping[str, str] | None = None,
) -> Topology:
    """Build this rank's :class:`Topology` from arguments, torch.distributed and the environment.

    Raises
    ------
    CollectorConfigError
        Rank outside the world, a layout whose product differs from the world size, or
        coordinates that are not integers.
    """
    env = os.environ if env is None else env
    dist_rank = dist_world = None
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist_rank, dist_world = dist.get_rank(), dist.get_world_size()
    except Exception:  # torch missing or half-initialised: fall back to the environment
        pass
    r = (
        rank
        if rank is not None
        else dist_rank
        if dist_rank is not None
        else _env_int(env, "RANK", 0)
    )
    w = (
        world_size
        if world_size is not None
        else dist_world
        if dist_world is not None
        else _env_int(env, "WORLD_SIZE", 1)
    )
    lr = local_rank if local_rank is not None else _env_int(env, "LOCAL_RANK", r)
    if w < 1 or not 0 <= r < w:
        raise CollectorConfigError(f"rank {r} is outside world size {w}")
    if coords is not None:
        c = {f"{d}_{s}": 0 if s == "rank" else 1 for d in DIMS for s in ("rank", "size")}
        for k, v in coords.items():
            if k not in c:
                raise CollectorConfigError(f"unknown coordinate {k!r}; known: {', '.join(c)}")
            if not isinstance(v, int) or isinstance(v, bool):
                raise CollectorConfigError(f"coordinate {k} must be an int, got {v!r}")
            c[k] = v
        for d in DIMS:
            if not 0 <= c[f"{d}_rank"] < c[f"{d}_size"]:
                raise CollectorConfigError(
                    f"{d}_rank {c[f'{d}_rank']} is outside {d}_size {c[f'{d}_size']}"
                )
        return Topology(r, w, lr, socket.gethostname(), os.getpid(), c, layout)
    if layout is None:
        layout = Layout(dp=w)
    layout.validate()
    if layout.world_size != w:
        raise CollectorConfigError(
            f"layout {layout} covers {layout.world_size} ranks but the world size is {w}"
        )
    return Topology(r, w, lr, socket.gethostname(), os.getpid(), layout_coords(layout, r), layout)


def topology_records(
    job: str, topo: Topology, started_ns: int, version: str
) -> list[tuple[bytes, dict[str, Any]]]:
    """``job_topology`` records to publish: this rank's own (key ``job/rank``) and, from rank 0
    with a known layout, the whole job (key ``job``; other ranks' host and pid unknown)."""
    layout = topo.layout
    sizes = {f"{d}_size": topo.coords.get(f"{d}_size", 1) for d in DIMS}
    base = {
        "job": job,
        "world_size": topo.world_size,
        **sizes,
        "order": layout.order if layout else DEFAULT_ORDER,
        "started_ns": started_ns,
        "argus_version": version,
    }
    me = {
        "rank": topo.rank,
        "host": topo.host,
        "local_rank": topo.local_rank,
        "pid": topo.pid,
        "coords": dict(topo.coords),
    }
    out = [(topo.key(job), {**base, "ranks": [me]})]
    if topo.rank == 0 and layout is not None:
        ranks = [
            me
            if r == 0
            else {
                "rank": r,
                "host": "",
                "local_rank": 0,
                "pid": 0,
                "coords": layout_coords(layout, r),
            }
            for r in range(topo.world_size)
        ]
        out.append((job.encode(), {**base, "ranks": ranks}))
    return out
