"""Funnel: a straggler's victims (peers waiting in collectives) are evidence, not culprits.

Regression for the 1,024-rank soak (issue 9): one rank's MLP 4x slower made its EP peers
late into ``expert_grad_sync``; the late arrival of a peer shared a rank with an unrelated L3
kernel flag on 20-40 healthy ranks, was joined to it instead of the straggler, and paged
``late into expert_grad_sync (peers waited)`` naming the healthy ranks.
"""

from __future__ import annotations

import json
from pathlib import Path

from argus.collectors.topology import Layout, layout_coords
from argus.detectors import funnel
from argus.detectors.findings import Finding
from argus.detectors.funnel.join import _coords, _peers
from argus.routing import DEFAULT_GROUPS
from argus.streams.roles.funnel import finding_from_anomaly
from tests.detectors.findings_builders import l2, l3

FIXTURE = Path(__file__).parent / "data" / "soak1024_funnel_window.jsonl"


def _late(rank: int, group: tuple[str, str], w=(0, 9)) -> Finding:
    return l2((rank,), group, phase="expert_grad_sync", role="late_arrival", w=w, z=60.0)


LAYOUT = Layout(dp=32, tp=2, pp=4, ep=4)
# 1,024-rank layout (dp=32, tp=2, pp=4, ep=4): rank 640 is pp2.tp0.dp20.ep0, 646 its EP peer
# (ep3); they share the EP group pp2.tp0.dp20 and the DP group pp2.tp0, not an EDP group
STRAGGLER = l2((640,), ("dp", "pp2.tp0"), z=60.0)
PEER_LATE = _late(646, ("edp", "pp2.tp0.ep3"))
NOISE = l3((518, 520, 646), ("dp", "pp2.tp0"), kernel="flash_bwd")  # random L3 flag


def test_soak_window_pages_only_the_straggler() -> None:
    """The live funnel's window (L2 of steps 390-409, L3 lagging at 240-249): before the fix
    it paged 43 healthy ranks as late into expert_grad_sync."""
    recs = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    assert FIXTURE.stat().st_size < 200_000
    _st, out = funnel.step(funnel.FunnelState(), [finding_from_anomaly(r) for r in recs])
    triggers = [a for a in out.alerts if a["action"] == "trigger"]
    assert [a["ranks"] for a in triggers] == [[592]]
    assert "straggler in mlp" in triggers[0]["summary"]
    victims = json.loads(triggers[0]["details"]["victims"])
    assert {594, 596, 598} <= set(victims)  # its EP peers, as evidence
    # every verdict naming a healthy rank is an L3-only flag, held back by persistence
    for v in out.verdicts:
        if set(v.culprit.ranks) - {592}:
            assert v.culprit.levels == ("L3",) or v.culprit.levels == ("L1", "L3")


def test_peer_waiting_joins_the_straggler_not_a_noise_flag_sharing_its_rank() -> None:
    cs = funnel.join([NOISE, PEER_LATE, STRAGGLER])
    by_ranks = {c.ranks: c for c in cs}
    assert set(by_ranks) == {(640,), (518, 520, 646)}
    assert PEER_LATE in by_ranks[(640,)].findings
    assert by_ranks[(518, 520, 646)].levels == ("L3",)
    _st, out = funnel.step(funnel.FunnelState(), [NOISE, PEER_LATE, STRAGGLER])
    assert [a["ranks"] for a in out.alerts] == [[640]]
    assert json.loads(out.alerts[0]["details"]["victims"]) == [646]


def test_a_tp_partner_late_into_the_next_collective_is_a_victim() -> None:
    # rank 33 (tp1) waited for its TP partner 32 in the TP all-reduce, then was late into
    # its EP all-to-all: no finding names both, but they differ only in the TP dimension
    cs = funnel.join(
        [
            l2((32,), ("dp", "pp1.tp0"), z=60.0),
            _late(32, ("ep", "pp1.tp0.dp0")),
            _late(33, ("ep", "pp1.tp1.dp0")),
        ]
    )
    assert [c.ranks for c in cs] == [(32,)]


def test_waiting_no_straggler_shares_a_group_with_is_its_own_culprit_and_pages() -> None:
    # a straggler at another stage in another model replica (dp 5; rank 646 is dp 16) shares
    # no comparison group with rank 646, nor a replica its delay could travel through
    other = l2((300,), ("dp", "pp1.tp0"), z=60.0)
    coords = {r: layout_coords(LAYOUT, r) for r in (300, 646)}
    cs = funnel.join([other, PEER_LATE], coords=coords)
    assert sorted(c.ranks for c in cs) == [(300,), (646,)]
    _st, out = funnel.step(funnel.FunnelState(), [other, PEER_LATE], coords=coords)
    assert sorted(tuple(a["ranks"]) for a in out.alerts) == [(300,), (646,)]
    # without coordinates, the dp index of neither is known: the straggler's replica may
    # hold rank 646 (unknown dimensions do not separate ranks)
    assert [c.ranks for c in funnel.join([other, PEER_LATE])] == [(300,)]


def test_slow_collective_without_a_straggler_still_pages() -> None:
    # one EDP group's expert-grad collective slow (a link): the group diverges, and a member
    # is late into it; no compute straggler anywhere
    link = l3(
        (),
        ("edp", "pp2.tp0.ep3"),
        kernel="nccl_reduce_scatter",
        collective=True,
        members=[518, 646, 774],
    )
    _st, out = funnel.step(funnel.FunnelState(), [link, PEER_LATE])
    assert out.alerts and all(a["action"] == "trigger" for a in out.alerts)
    assert any(a["ranks"] == [646] and "expert_grad_sync" in a["summary"] for a in out.alerts)


def test_victims_a_window_after_their_straggler_do_not_page() -> None:
    # the window edge split the straggler's last finding from its peers' late arrivals
    st, out = funnel.step(funnel.FunnelState(), [STRAGGLER])
    assert [a["ranks"] for a in out.alerts] == [[640]]
    late = _late(646, ("edp", "pp2.tp0.ep3"), w=(10, 19))
    _st2, out = funnel.step(funnel.FunnelState.from_dict(st.to_dict()), [late])
    assert [v.culprit.ranks for v in out.verdicts] == [(646,)]
    assert out.alerts == []
    # two windows after the straggler was last seen, the same lateness is unexplained
    st3, out = funnel.step(st, [])
    st3, out = funnel.step(st3, [_late(646, ("edp", "pp2.tp0.ep3"), w=(20, 29))])
    assert [a["ranks"] for a in out.alerts if a["action"] == "trigger"] == [[646]]


def test_a_paged_stragglers_own_lateness_is_its_symptom_while_its_page_is_open() -> None:
    """A straggler missed in a window is still slow: its own late arrival into the next
    collective (a 4-rank torch.profiler job's slowed rank, late into the all-reduce in the
    windows its forward was not named) does not page as a culprit of its own while its
    page is open, and pages once the page resolved."""
    st, out = funnel.step(funnel.FunnelState(), [STRAGGLER])
    assert [a["ranks"] for a in out.alerts] == [[640]]
    own = lambda w: _late(640, ("edp", "pp2.tp0.ep0"), w=w)  # noqa: E731
    st, _ = funnel.step(st, [])
    st, out = funnel.step(st, [own((20, 29))])  # two windows after it was last named
    assert [v.culprit.ranks for v in out.verdicts] == [(640,)]
    assert out.alerts == []  # the straggler's page is open: no new page
    # another rank's lateness two windows after the straggler was last seen still pages
    # (test above); the straggler's own, after its page resolved, pages too
    st = funnel.FunnelState()
    st, out = funnel.step(st, [own((0, 9))])
    assert [a["ranks"] for a in out.alerts if a["action"] == "trigger"] == [[640]]


def test_peers_share_a_comparison_group_of_a_default_kind() -> None:
    def peers(a: str, b: str) -> bool:
        return _peers(_coords([a]), _coords([b]), DEFAULT_GROUPS)

    assert peers("pp2.tp0.ep3", "pp2.tp0.dp20")  # EDP and EP groups share a rank
    assert peers("pp2.tp0.ep3", "pp2.tp0.ep0")  # EP peers
    assert peers("pp2.tp0.dp3.ep1", "pp2.tp0.dp5.ep0")  # DP replicas (dp kind: dp and ep)
    assert peers("pp1.tp0.dp0", "pp1.tp1.dp0")  # TP partners
    assert peers("pp2.tp0", "pp1.tp0")  # pipeline neighbours
    assert not peers("pp2.tp0.ep3", "pp1.tp1")
    assert not peers("pp2.tp0.dp1", "pp2.tp1.dp0")
    assert _coords(["pp2.tp0", "pp2.tp0.dp20", "g"]) == {"pp": 2, "tp": 0, "dp": 20}
    assert _coords(["all"]) == {}
