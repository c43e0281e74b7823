"""The funnel's victim rule follows the routing's group kinds, custom ones included."""

from __future__ import annotations

from argus.detectors import funnel
from argus.routing import Routing
from tests.detectors.findings_builders import l2

# rank 0 (pp1.tp0.dp0.ep0) straggles in its MLP; rank 3 (pp1.tp1.ep1) differs from it in
# tp *and* ep, so no default group kind holds both; a custom kind varying tp and ep does
STRAGGLER = [
    l2((0,), ("ep", "pp1.tp0.dp0"), z=60.0),
    l2((0,), ("edp", "pp1.tp0.ep0"), z=60.0),
]
LATE = l2((3,), ("edp", "pp1.tp1.ep1"), phase="expert_grad_sync", role="late_arrival", z=60.0)


def _paged(groups: Routing) -> list[list[int]]:
    _st, out = funnel.step(funnel.FunnelState(), [*STRAGGLER, LATE], groups=groups.groups)
    return sorted(a["ranks"] for a in out.alerts if a["action"] == "trigger")


def test_default_kinds_leave_a_rank_two_dimensions_away_its_own_culprit() -> None:
    assert _paged(Routing.default()) == [[0], [3]]


def test_a_custom_kind_spanning_both_dimensions_makes_it_the_stragglers_victim() -> None:
    routing = Routing.from_config({"groups": {"node": ["tp", "ep"]}})
    assert _paged(routing) == [[0]]
    cs = funnel.join([*STRAGGLER, LATE], routing.groups)
    assert [c.ranks for c in cs] == [(0,)]
    assert LATE in cs[0].findings
