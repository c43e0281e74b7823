"""The funnel's victim rule follows the routing's group kinds, custom ones included."""

from __future__ import annotations

from argus.detectors import funnel
from argus.routing import Routing
from tests.detectors.findings_builders import l2

# rank 0 (pp1.tp0.dp0.ep0) straggles in its MLP; rank 3 (pp1.tp1.dp1) differs from it in
# tp *and* dp: no default group kind holds both, and it is in another model replica (dp), so
# its lateness does not descend from rank 0; a custom kind varying tp and dp holds both
STRAGGLER = [
    l2((0,), ("ep", "pp1.tp0.dp0"), z=60.0),
    l2((0,), ("edp", "pp1.tp0.ep0"), z=60.0),
]
LATE = l2((3,), ("ep", "pp1.tp1.dp1"), phase="ep_alltoall", role="late_arrival", z=60.0)


def _paged(groups: Routing) -> list[list[int]]:
    _st, out = funnel.step(funnel.FunnelState(), [*STRAGGLER, LATE], groups=groups.groups)
    return sorted(a["ranks"] for a in out.alerts if a["action"] == "trigger")


def test_default_kinds_leave_a_rank_two_dimensions_away_its_own_culprit() -> None:
    assert _paged(Routing.default()) == [[0], [3]]


def test_a_custom_kind_spanning_both_dimensions_makes_it_the_stragglers_victim() -> None:
    routing = Routing.from_config({"groups": {"node": ["tp", "dp"]}})
    assert _paged(routing) == [[0]]
    cs = funnel.join([*STRAGGLER, LATE], routing.groups)
    assert [c.ranks for c in cs] == [(0,)]
    assert LATE in cs[0].findings
