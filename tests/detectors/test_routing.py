"""Routing table: phase -> group kind, group ids from coords alone."""

from __future__ import annotations

from itertools import product

import pytest

from argus.config import load_settings
from argus.detectors.config import DetectorsConfig
from argus.errors import DetectorConfigError
from argus.routing import DEFAULT_GROUPS, Routing, group_id, group_span, rank_of
from argus.sim.layout import Layout


def test_default_table() -> None:
    r = Routing.default()
    assert r.kind_of("self_attention") == "dp"
    assert r.kind_of("mlp", "compute") == "dp"
    assert r.kind_of("tp_allreduce", "comm") == "tp"
    assert r.kind_of("moe_alltoall", "comm") == "ep"
    assert r.kind_of("ep_reducescatter", "comm") == "ep"
    assert r.kind_of("expert_grad_sync", "comm") == "edp"
    assert r.kind_of("pp_p2p", "p2p") == "pp"
    assert r.kind_of("recv_forward", "p2p") == "pp"
    assert r.kind_of("dp_grad_sync", "comm") == "dp"
    assert r.kind_of("something_new", "p2p") == "pp"


def test_group_ids_partition_the_layout() -> None:
    lay = Layout(dp=4, tp=2, pp=2, ep=4)
    r = Routing.default()
    for kind, size in {"dp": 16, "tp": 2, "pp": 2, "ep": 4, "edp": 4, "job": 64}.items():
        groups: dict[str, list[int]] = {}
        for rank in range(lay.world):
            c = lay.coords(rank)
            assert rank_of(c) == rank
            groups.setdefault(r.group_for_kind(c, kind), []).append(rank)
            assert r.expected_size(c, kind) == size
        assert all(len(v) == size for v in groups.values()), kind
        assert len(groups) == 64 // size


def test_dp_group_holds_same_stage_and_tp_rank() -> None:
    lay = Layout(dp=4, tp=2, pp=2, ep=4)
    c = lay.coords(37)
    gid = group_id(c, ("dp", "ep"))
    assert gid == f"pp{c['pp_rank']}.tp{c['tp_rank']}"


def test_override_from_settings() -> None:
    s = load_settings(
        env={
            "ARGUS_DETECTORS__L2__Z": "5",
        }
    )
    cfg = DetectorsConfig.from_settings(s.section("detectors"))
    assert cfg.l2.z == 5.0
    r = Routing.from_config({"rules": [["mlp", "tp"]], "groups": {"node": ["tp", "ep"]}})
    assert r.kind_of("mlp") == "tp" and r.kind_of("self_attention") == "dp"
    assert r.varies("node") == ("tp", "ep")


@pytest.mark.parametrize(
    "table",
    [
        {"rules": [["mlp", "nope"]]},
        {"groups": {"x": ["zz"]}},
        {"rules": ["mlp"]},
        {"bogus": 1},
    ],
)
def test_bad_tables_raise(table: dict) -> None:
    with pytest.raises(DetectorConfigError):
        Routing.from_config(table)


def test_group_span_holds_every_member_of_the_group() -> None:
    sizes = {"tp": 2, "cp": 1, "ep": 2, "dp": 3, "pp": 2}
    allc = [
        {
            **{f"{d}_size": n for d, n in sizes.items()},
            **dict(zip((f"{d}_rank" for d in sizes), ranks, strict=True)),
        }
        for ranks in product(*(range(n) for n in sizes.values()))
    ]
    for kind, varies in DEFAULT_GROUPS.items():
        for c in allc:
            members = [rank_of(o) for o in allc if group_id(o, varies) == group_id(c, varies)]
            assert group_span(c, varies) == (min(members), max(members)), (kind, c)
