"""Funnel: waiting that travels along the layout's communication graph pages once, as its cause.

Issue 18 (item 2): in a Megatron tp 8 x pp 4 x dp 16 job with a 1F1B schedule, a straggler's
pipeline replica (other stages and TP ranks) arrived late at its own stage's gradient
reduce-scatter and paged as new culprits (``[L2] rank(s) 416,488: late into
grads_reduce_scatter (peers waited)``), victims of culprit 162.
"""

from __future__ import annotations

import json

from argus.collectors.topology import Layout, layout_coords
from argus.detectors import funnel
from argus.detectors.findings import Finding
from argus.detectors.funnel.join import _coords, _reachable
from argus.routing import DEFAULT_GROUPS
from tests.detectors.findings_builders import l2, l3

DENSE = Layout(tp=8, pp=4, dp=16)  # Megatron order tp-cp-ep-dp-pp: rank = tp + 8 (dp + 16 pp)
MOE = Layout(tp=2, ep=8, dp=8, pp=4)


def _rank(lay: Layout, **c: int) -> int:
    """Global rank of coordinates ``c`` under ``lay`` (``tp-cp-ep-dp-pp``)."""
    r, stride = 0, 1
    for d in ("tp", "cp", "ep", "dp", "pp"):
        r += c.get(d, 0) * stride
        stride *= getattr(lay, d)
    return r


def _late(rank: int, group: tuple[str, str], phase: str, w=(0, 9)) -> Finding:
    return l2((rank,), group, phase=phase, role="late_arrival", w=w, z=20.0)


def _coords_of(lay: Layout, fs: list[Finding]) -> dict[int, dict[str, int]]:
    return {r: layout_coords(lay, r) for f in fs for r in f.ranks}


# the culprit: stage 1, TP rank 2, pipeline (DP replica) 4 -> rank 162, as in the issue
CULPRIT = _rank(DENSE, pp=1, tp=2, dp=4)
STRAGGLER = l2((CULPRIT,), ("dp", "pp1.tp2"), phase="mlp", z=40.0)


def _chain(w=(0, 9)) -> list[Finding]:
    """Waiting of the 1F1B chain: the culprit's pipeline (stages 0, 2, 3, every TP rank) late
    into its own stage's gradient reduce-scatter and into the p2p of its pipeline; its TP
    partners late into their p2p; a DP replica of the culprit late into its pipeline's p2p."""
    rs = "grads_reduce_scatter"
    out = [
        _late(_rank(DENSE, pp=3, tp=0, dp=4), ("dp", "pp3.tp0"), rs, w),  # 416
        _late(_rank(DENSE, pp=0, tp=5, dp=4), ("dp", "pp0.tp5"), rs, w),
        _late(_rank(DENSE, pp=2, tp=1, dp=4), ("dp", "pp2.tp1"), rs, w),
        _late(_rank(DENSE, pp=1, tp=6, dp=4), ("dp", "pp1.tp6"), rs, w),
        _late(_rank(DENSE, pp=3, tp=7, dp=4), ("pp", "tp7.dp4"), "pp_recv_backward", w),
        _late(_rank(DENSE, pp=1, tp=6, dp=4), ("pp", "tp6.dp4"), "pp_send_forward", w),
        _late(_rank(DENSE, pp=1, tp=2, dp=9), ("pp", "tp2.dp9"), "pp_recv_forward", w),
    ]
    # one rank's collective kernels longer (it waited): L3 evidence of the chain
    out.append(
        l3((_rank(DENSE, pp=2, tp=3, dp=4),), ("dp", "pp2.tp3"), kernel="nccl_rs", collective=True)
    )
    return out


def _triggers(out: funnel.FunnelOutput) -> list[list[int]]:
    return sorted(a["ranks"] for a in out.alerts if a["action"] == "trigger")


def test_issue_ranks_are_reachable_from_the_culprit() -> None:
    assert CULPRIT == 162 and _rank(DENSE, pp=3, tp=0, dp=4) == 416
    # 416 is known only by its gradient sync group (pp3.tp0): other stage *and* TP rank
    assert _reachable(_coords(["pp3.tp0"]), _coords(["pp1.tp2"]), DEFAULT_GROUPS)
    c = {r: {d: layout_coords(DENSE, r)[f"{d}_rank"] for d in ("tp", "dp", "pp")} for r in (162,)}
    assert _reachable({"pp": 3, "tp": 0, "dp": 4}, c[162], DEFAULT_GROUPS)  # same pipeline
    assert _reachable({"pp": 1, "tp": 2, "dp": 9}, c[162], DEFAULT_GROUPS)  # DP replica
    assert not _reachable({"pp": 3, "tp": 0, "dp": 9}, c[162], DEFAULT_GROUPS)  # neither


def test_1f1b_chain_of_waits_gives_one_page_naming_the_culprit() -> None:
    """Before: 7 pages (every stage's late arrivals its own culprit)."""
    fs = [STRAGGLER, *_chain()]
    for coords in (None, _coords_of(DENSE, fs)):
        cs = funnel.join(fs, coords=coords)
        assert [c.ranks for c in cs] == [(CULPRIT,)]
        _st, out = funnel.step(funnel.FunnelState(), fs, coords=coords)
        assert _triggers(out) == [[CULPRIT]]
        victims = set(json.loads(out.alerts[0]["details"]["victims"]))
        assert {416, _rank(DENSE, pp=0, tp=5, dp=4), _rank(DENSE, pp=1, tp=2, dp=9)} <= victims


def test_the_chain_a_window_after_its_straggler_does_not_page() -> None:
    st, out = funnel.step(funnel.FunnelState(), [STRAGGLER])
    assert _triggers(out) == [[CULPRIT]]
    st = funnel.FunnelState.from_dict(st.to_dict())
    _st, out = funnel.step(st, _chain(w=(10, 19)))
    assert out.verdicts and _triggers(out) == []


def test_an_unexplained_wait_still_pages() -> None:
    # rank 456 (pp3, tp0, dp9): another stage, TP rank *and* pipeline than the culprit; no
    # collective or replica links them
    lone = _late(_rank(DENSE, pp=3, tp=0, dp=9), ("dp", "pp3.tp0"), "grads_reduce_scatter")
    fs = [STRAGGLER, *_chain(), lone]
    coords = _coords_of(DENSE, fs)
    assert sorted(c.ranks for c in funnel.join(fs, coords=coords)) == [(CULPRIT,), (456,)]
    _st, out = funnel.step(funnel.FunnelState(), fs, coords=coords)
    assert _triggers(out) == [[CULPRIT], [456]]
    # and with no straggler at all, the chain itself pages
    _st, out = funnel.step(funnel.FunnelState(), _chain(), coords=coords)
    assert _triggers(out)


def test_moe_expert_peer_pipeline_late_into_its_expert_grad_sync_is_a_victim() -> None:
    # tp 2 x ep 8 x dp 8 x pp 4: the culprit's EP peer (ep 5) waits in the all-to-all, its
    # pipeline passes the delay on; its stage-2 TP partner is late into its own EDP sync
    culprit = _rank(MOE, pp=1, tp=0, ep=3, dp=2)
    straggler = l2((culprit,), ("dp", "pp1.tp0"), phase="mlp", z=40.0)
    late = _late(_rank(MOE, pp=2, tp=1, ep=5, dp=2), ("edp", "pp2.tp1.ep5"), "expert_grad_sync")
    other = _late(_rank(MOE, pp=2, tp=1, ep=5, dp=6), ("edp", "pp2.tp1.ep5"), "expert_grad_sync")
    coords = _coords_of(MOE, [straggler, late, other])
    _st, out = funnel.step(funnel.FunnelState(), [straggler, late], coords=coords)
    assert _triggers(out) == [[culprit]]
    _st, out = funnel.step(funnel.FunnelState(), [straggler, other], coords=coords)
    assert _triggers(out) == sorted([[culprit], list(other.ranks)])


def test_a_window_after_its_straggler_a_wait_of_another_pipeline_still_pages() -> None:
    # with coordinates, the state remembers the straggler's pipeline (dp 4): a rank of
    # pipeline 9 late the next window is not its victim
    coords = {r: layout_coords(DENSE, r) for r in (CULPRIT, 416, 456)}
    st, _out = funnel.step(funnel.FunnelState(), [STRAGGLER], coords=coords)
    st = funnel.FunnelState.from_dict(st.to_dict())
    lone = _late(456, ("dp", "pp3.tp0"), "grads_reduce_scatter", w=(10, 19))
    _st, out = funnel.step(st, [lone], coords=coords)
    assert _triggers(out) == [[456]]
    chained = _late(416, ("dp", "pp3.tp0"), "grads_reduce_scatter", w=(10, 19))
    _st, out = funnel.step(st, [chained], coords=coords)
    assert _triggers(out) == []
