"""Rank blocks and step digests: how one job's step records spread over several workers.

A job's ranks are cut into blocks of ``block_ranks`` consecutive layout positions. The steps
roles work in two tiers (:mod:`argus.streams.roles.steps`):

* **per block** (key ``job|b<block>``, spread over partitions and so over workers): every
  step record of the block's ranks is folded here, and a block's step closes when all of its
  ranks reported or its grace passed. The block judges the L2 groups all of whose ranks it
  holds (the costly per-record work, in the tier that scales out); the close is one
  *digest*: the ranks that reported, the step's iteration-time aggregate, the partial windows
  of the groups that span blocks, and the ids of the findings the block made;
* **per job** (key ``job``): one digest per block and step, never a record. A step closes
  when every block's digest arrived or its grace passed; the spanning groups' partial
  windows are joined across blocks (:func:`argus.detectors.inputs.merge_group_windows`) and
  L1/L2 run on the job.

So the per-job tier does work per block and per spanning group, not per rank: a 10,000-rank
job at 256 ranks per block sends it 40 messages per step instead of 10,000.

A digest is :class:`argus.streams.roles.state.Digest` (JSON on the internal topic; blocks are
of layout positions, :func:`argus.routing.rank_of` of the coords): the step, the block, the
step's :class:`~argus.streams.roles.state.StepAggregate`, the ranks that reported, the spanning
groups' windows (``group_windows``, absent: L2 not run here) and the ids of the findings made.

A group window is ``{"k", "g", "r", "s", "p", "sk", "a", "b", "d", "it"}``: kind, id,
ranks, steps, phases, stream kinds, start/end ns, and the ``(R, S, P)`` durations and
``(R, S)`` iteration times as base64 little-endian float64 (NaN: no value).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import numpy as np

from argus.detectors.l2 import GroupWindow

__all__ = [
    "block_key",
    "block_of",
    "block_size",
    "blocks_in",
    "window_from_json",
    "window_to_json",
]


def block_of(rank: int, block_ranks: int) -> int:
    """The block of global ``rank``."""
    return int(rank) // block_ranks


def blocks_in(world: int, block_ranks: int) -> int:
    """How many blocks a job of ``world`` ranks has (at least 1)."""
    return max(1, -(-int(world) // block_ranks))


def block_size(world: int, block: int, block_ranks: int) -> int:
    """Ranks of ``block`` in a job of ``world`` ranks (the last block may be short)."""
    return max(1, min(block_ranks, int(world) - block * block_ranks))


def block_key(job: str, block: int) -> str:
    """The per-block key, ``job|b<block>``."""
    return f"{job}|b{block}"


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f8").tobytes()).decode()


def _arr(s: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype="<f8").reshape(shape).copy()


def window_to_json(w: GroupWindow) -> dict[str, Any]:
    """A group window as JSON (see the module doc); the job is the digest's key."""
    return {
        "k": w.group_kind,
        "g": w.group_id,
        "r": [int(x) for x in w.ranks],
        "s": [int(x) for x in w.steps],
        "p": list(w.phases),
        "sk": list(w.stream_kinds),
        "a": int(w.start_ns),
        "b": int(w.end_ns),
        "d": _b64(w.durations_ns),
        "it": None if w.iter_ns is None else _b64(w.iter_ns),
    }


def window_from_json(job: str, d: Mapping[str, Any]) -> GroupWindow:
    """The inverse of :func:`window_to_json`."""
    r, s, p = len(d["r"]), len(d["s"]), len(d["p"])
    return GroupWindow(
        job=job,
        group_kind=d["k"],
        group_id=d["g"],
        ranks=np.asarray(d["r"], dtype=np.int64),
        steps=np.asarray(d["s"], dtype=np.int64),
        phases=tuple(d["p"]),
        stream_kinds=tuple(d["sk"]),
        durations_ns=_arr(d["d"], (r, s, p)),
        start_ns=int(d["a"]),
        end_ns=int(d["b"]),
        iter_ns=None if d.get("it") is None else _arr(d["it"], (r, s)),
    )
