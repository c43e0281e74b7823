"""Topology discovery, Megatron-order coordinates and group ids."""

from __future__ import annotations

import pytest

from argus.collectors.errors import CollectorConfigError
from argus.collectors.topology import (
    Layout,
    discover_topology,
    group_id,
    layout_coords,
    topology_records,
)


def test_megatron_order_tp_fastest() -> None:
    lay = Layout(dp=2, tp=2, pp=2)
    coords = [layout_coords(lay, r) for r in range(8)]
    assert [c["tp_rank"] for c in coords] == [0, 1, 0, 1, 0, 1, 0, 1]
    assert [c["dp_rank"] for c in coords] == [0, 0, 1, 1, 0, 0, 1, 1]
    assert [c["pp_rank"] for c in coords] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_group_ids_share_all_other_coordinates() -> None:
    lay = Layout(dp=2, tp=2, pp=2)
    dp_groups: dict[str, list[int]] = {}
    for r in range(8):
        dp_groups.setdefault(group_id(layout_coords(lay, r), "dp"), []).append(r)
    # DP replicas of the same (tp, pp) position: 4 groups of 2
    assert sorted(dp_groups.values()) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert group_id(layout_coords(lay, 5), "tp") == "tp:cp0.dp0.ep0.pp1"


def test_environment_and_default_pure_dp() -> None:
    t = discover_topology(env={"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (t.rank, t.world_size, t.local_rank) == (3, 4, 1)
    assert (t.coords["dp_rank"], t.coords["dp_size"]) == (3, 4)
    assert t.key("job") == b"job/3"


def test_explicit_coords_from_a_framework() -> None:
    t = discover_topology(
        rank=5,
        world_size=8,
        env={},
        coords={"tp_rank": 1, "tp_size": 2, "dp_rank": 2, "dp_size": 4},
    )
    assert t.coords["pp_size"] == 1 and t.coords["tp_rank"] == 1


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"rank": 0, "world_size": 8, "layout": Layout(dp=3)}, "covers 3 ranks"),
        ({"rank": 0, "world_size": 1, "layout": Layout(order="tp-dp")}, "layout order"),
        ({"rank": 0, "world_size": 4, "coords": {"tp_rank": 2, "tp_size": 2}}, "tp_rank 2"),
        ({"rank": 0, "world_size": 4, "coords": {"xx_rank": 0}}, "unknown coordinate"),
    ],
)
def test_bad_topology(kwargs: dict, msg: str) -> None:
    with pytest.raises(CollectorConfigError, match=msg):
        discover_topology(env={}, **kwargs)


def test_topology_records_rank0_publishes_the_whole_layout() -> None:
    t = discover_topology(rank=0, world_size=4, layout=Layout(dp=2, tp=2), env={})
    recs = topology_records("j", t, 1, "0.1")
    keys = [k for k, _ in recs]
    assert keys == [b"j/0", b"j"]
    whole = recs[1][1]
    assert [r["rank"] for r in whole["ranks"]] == [0, 1, 2, 3]
    assert whole["tp_size"] == 2 and whole["dp_size"] == 2
    from argus.schemas import Codec

    for _, rec in recs:  # both match the wire schema
        Codec().encode("job_topology", rec)
