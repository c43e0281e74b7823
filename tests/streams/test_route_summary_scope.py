"""``route_summary`` with ``Routing.scope_of``'s per-coords cache routes as it did uncached.

The router asks for a summary's scope (the ``dp`` group id and its expected size) once per
record; ``Routing.scope_of`` remembers the answer per coords. These tests compare every routed
item with the uncached ``group_for_kind`` / ``expected_size`` over several layouts, reused
coords, key orders, routings with other ``groups`` tables (also changed after use), and
coords the uncached path rejects.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from argus.errors import DetectorInputError
from argus.routing import DIMS, Routing, group_id
from argus.streams.roles.l3 import route_summary

LAYOUTS = [  # sizes of tp, cp, ep, dp, pp
    (1, 1, 1, 1, 1),
    (2, 1, 1, 8, 4),
    (8, 1, 1, 16, 4),
    (2, 2, 4, 4, 2),
    (1, 1, 8, 2, 1),
]


def _coords(sizes: tuple[int, ...], ranks: tuple[int, ...]) -> dict[str, int]:
    c: dict[str, int] = {}
    for d, size, rank in zip(DIMS, sizes, ranks, strict=True):
        c[f"{d}_rank"] = rank
        c[f"{d}_size"] = size
    return c


def _all_coords(sizes: tuple[int, ...]) -> list[dict[str, int]]:
    return [_coords(sizes, r) for r in itertools.product(*(range(s) for s in sizes))]


def _rec(coords: dict[str, Any], rank: int, window: int) -> dict[str, Any]:
    names = [{"id": 3, "name": "gemm"}] if window == 0 else []
    return {"job": "j", "rank": rank, "window_id": window, "coords": coords, "kernel_names": names}


def _uncached(rec: dict[str, Any], value: bytes, routing: Routing) -> list[tuple[str, Any]]:
    """What ``route_summary`` returned before the cache."""
    sid = routing.group_for_kind(rec["coords"], "dp")
    return [
        (
            f"{rec['job']}/dp/{sid}",
            {
                "rank": rec["rank"],
                "window": rec["window_id"],
                "expected": routing.expected_size(rec["coords"], "dp"),
                "blob": value,
                "part": 2,
                "offset": 7,
                "names": {"3": "gemm"} if rec["window_id"] == 0 else {},
            },
        )
    ]


@pytest.mark.parametrize(
    "table",
    [None, {"groups": {"dp": ["dp"]}}, {"groups": {"dp": ["tp", "pp"]}}],
    ids=["default", "dp-only", "tp-pp"],
)
def test_routed_items_equal_the_uncached_ones(table: dict[str, Any] | None) -> None:
    routing = Routing.from_config(table)
    fresh = Routing.from_config(table)
    for sizes in LAYOUTS:
        coords = _all_coords(sizes)
        for window in range(3):  # each coords seen again: cache hits
            for rank, c in enumerate(coords):
                rec = _rec(dict(c), rank, window)
                got = route_summary(rec, b"\x00\x01", routing, part=2, offset=7)
                assert got == _uncached(rec, b"\x00\x01", fresh)
    # one answer per (layout, coords) kept; the sizes differ, so no two layouts share a key
    assert len(routing._scopes) == sum(len(_all_coords(s)) for s in LAYOUTS)


def test_key_order_and_missing_dims() -> None:
    routing = Routing()
    c = _coords((2, 1, 1, 8, 4), (1, 0, 0, 5, 3))
    backwards = dict(reversed(list(c.items())))
    assert routing.scope_of(c, "dp") == routing.scope_of(backwards, "dp") == ("pp3.tp1", 8)
    # dims absent from the coords: rank 0, size 1 (as group_id and expected_size read them)
    assert routing.scope_of({"dp_rank": 2, "dp_size": 4}, "dp") == ("all", 4)
    assert routing.scope_of({"dp_rank": 2, "dp_size": 4}, "tp") == ("dp2", 1)


def test_a_routing_per_table_and_a_changed_table() -> None:
    c = _coords((2, 1, 1, 8, 4), (1, 0, 0, 5, 3))
    default = Routing()
    dp_only = Routing.from_config({"groups": {"dp": ["dp"]}})
    assert default.scope_of(c, "dp") == ("pp3.tp1", 8)
    assert dp_only.scope_of(c, "dp") == ("pp3.tp1", 8)  # ep_size 1: same scope
    tp_pp = Routing.from_config({"groups": {"dp": ["tp", "pp"]}})
    assert tp_pp.scope_of(c, "dp") == ("dp5", 8)
    # the groups table changed in place after an answer was kept: the new dims miss
    groups = dict(default.groups)
    changed = Routing(groups=groups)
    assert changed.scope_of(c, "dp") == ("pp3.tp1", 8)
    groups["dp"] = ("tp",)
    assert changed.scope_of(c, "dp") == ("pp3.dp5", 2)
    assert changed.scope_of(c, "dp") == (
        changed.group_for_kind(c, "dp"),
        changed.expected_size(c, "dp"),
    )


def test_bad_coords_still_raise() -> None:
    routing = Routing()
    with pytest.raises(DetectorInputError):
        routing.scope_of({"tp_rank": [1], "tp_size": 2}, "dp")  # unhashable: not cached
    with pytest.raises(DetectorInputError):
        routing.scope_of({"dp_rank": 1, "dp_size": "4"}, "dp")  # a size read
    with pytest.raises(DetectorInputError):
        routing.scope_of({"dp_rank": 1}, "nope")


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import argus.routing as routing_mod

    monkeypatch.setattr(routing_mod, "_SCOPES_MAX", 10)
    routing = Routing()
    coords = _all_coords((1, 1, 1, 8, 4))
    for c in coords:
        assert routing.scope_of(c, "dp") == (f"pp{c['pp_rank']}", 8)
        assert len(routing._scopes) <= 10


@pytest.mark.parametrize("kind", ["dp", "tp", "pp", "ep", "edp", "cp", "job"])
def test_group_for_kind_equals_group_id(kind: str) -> None:
    routing = Routing()
    for sizes in LAYOUTS:
        for _ in range(2):  # the second pass answers from the cache
            for c in _all_coords(sizes):
                want = group_id(c, routing.varies(kind))
                assert routing.group_for_kind(c, kind) == want
                assert routing.group_for_kind(dict(reversed(list(c.items()))), kind) == want
    groups = dict(routing.groups)
    changed = Routing(groups=groups)
    c = _coords((2, 1, 1, 8, 4), (1, 0, 0, 5, 3))
    assert changed.group_for_kind(c, "dp") == "pp3.tp1"
    groups["dp"] = ("tp",)
    assert changed.group_for_kind(c, "dp") == "pp3.dp5"


def test_route_window_equals_route_summary_of_the_summary() -> None:
    """The compressor's route (from the raw window and the names it announces) gives the
    item L3's router gives for the decoded summary: same key, rank, window, size, bytes,
    partition and names; offset -1."""
    import numpy as np

    from argus.schemas import Codec
    from argus.sim.layout import Layout
    from argus.streams import synth
    from argus.streams.roles.l3 import route_window
    from argus.summaries.summary_record import SummarizedBatches

    codec, lay, rng = Codec(), Layout.for_ranks(64), np.random.default_rng(3)
    batches = [
        synth.kernel_batch(
            rng,
            synth.default_mix(0),
            job="j",
            rank=r,
            window_id=7,
            n_events=300,
            coords=lay.coords(r),
        )
        for r in (0, 5, 63)
    ]
    done = SummarizedBatches(batches)
    routing = Routing()
    for i, batch in enumerate(batches):
        announced = {0, 1} if i else set()  # some names already announced, once none
        data, named = done.encoded(i, codec, announced=announced)
        decoded = codec.decode_as("kernel_summary", data)
        want = route_summary(decoded, data, routing, part=2)
        got = route_window(batch, data, done.names_of(i, named), routing, part=2)
        assert got == want
        assert got[0][1]["offset"] == -1 and got[0][1]["names"]
