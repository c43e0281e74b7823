"""The alert as an on-call engineer reads it (issue 20): the summary starts with the culprit
(ranks, group, hosts when known), what is slow, how much slower than its peers, since when
in ISO time; victims are never members of the culprit; drill-down commands for the window."""

from __future__ import annotations

import json

from argus.detectors.findings import Finding
from argus.detectors.funnel.join import Culprit
from argus.detectors.funnel.render import (
    Verdict,
    alert_summary,
    drilldown_commands,
    summary,
    with_hosts,
)

T0 = 1_779_999_600_000_000_000  # 2026-05-28T20:20:00Z
WIN = {"window_start_step": 50, "window_end_step": 59}


def _ns(step: int) -> int:
    return T0 + step * 200_000_000


def group_culprit() -> Verdict:
    """Link degradation: EDP group pp1.tp0.ep3 (ranks 38,46,54,62) slow in a collective;
    rank 54 (a member) and rank 12 (not) also spend longer in a collective kernel."""
    win = {**WIN, "window_start_ns": _ns(50), "window_end_ns": _ns(59)}
    group = Finding(
        job="llm",
        level="L3",
        kind="group_divergence",
        group_kind="edp",
        group_id="pp1.tp0.ep3",
        kernel="ncclReduceScatter",
        score=9.0,
        threshold=2.0,
        baseline=1127.0,
        observed=6005.8,
        unit="us",
        evidence={"members": "[38, 46, 54, 62]", "collective": "true"},
        **win,
    )
    waiting = [
        Finding(
            job="llm",
            level="L3",
            kind="kernel_divergence",
            group_kind="dp",
            group_id=gid,
            ranks=(r,),
            kernel="ncclAllReduce",
            score=3.0,
            threshold=2.0,
            baseline=100.0,
            observed=150.0,
            unit="us",
            evidence={"collective": "true"},
            **win,
        )
        for r, gid in ((54, "pp1.tp0"), (12, "pp0.tp0"))
    ]
    c = Culprit(
        job="llm",
        group_kind="edp",
        group_id="pp1.tp0.ep3",
        ranks=(),
        phase=None,
        kernels=("ncclReduceScatter",),
        levels=("L3",),
        findings=(group, *waiting),
    )
    return Verdict(culprit=c, persistence=3, confidence=0.91, first_seen_ns=_ns(30))


def rank_culprit() -> Verdict:
    win = {**WIN, "window_start_ns": _ns(50), "window_end_ns": _ns(59)}
    f = Finding(
        job="llm",
        level="L2",
        kind="straggler",
        group_kind="dp",
        group_id="pp0.tp1",
        ranks=(7,),
        phase="mlp",
        score=8.0,
        threshold=3.0,
        baseline=40.0,
        observed=55.2,
        unit="ms",
        evidence={"role": "compute", "victims": "[5, 7, 9]"},
        **win,
    )
    c = Culprit(
        job="llm",
        group_kind="dp",
        group_id="pp0.tp1",
        ranks=(7,),
        phase="mlp",
        kernels=(),
        levels=("L1", "L2"),
        findings=(f,),
    )
    return Verdict(culprit=c, persistence=4, confidence=0.95, first_seen_ns=_ns(20))


def test_group_culprit_summary_starts_with_the_group_and_its_ranks() -> None:
    a = group_culprit().to_alert()
    assert a["summary"] == (
        "edp group pp1.tp0.ep3 (ranks 38,46,54,62): collective/kernel ncclReduceScatter slow"
        " for the whole group, 5.33x the other edp groups, since 2026-05-28T20:20:06Z; job llm"
        " [L3]; steps 50-59; persistence 3, confidence 0.91"
    )
    d = a["details"]
    assert json.loads(d["members"]) == [38, 46, 54, 62]
    # rank 54 is a member of the faulty group: never its victim (issue 20)
    assert json.loads(d["victims"]) == [12]
    assert d["since"] == "2026-05-28T20:20:06Z" and d["steps"] == "50-59"
    assert d["cmd_report"] == f"argus report --around {a['dedup_key']}"
    assert d["cmd_trace"] == f"argus trace --around {a['dedup_key']}"
    assert d["cmd_stacks"] == f"argus stacks --around {a['dedup_key']}"


def test_rank_culprit_summary_and_hosts_added_later() -> None:
    v = rank_culprit()
    a = v.to_alert()
    assert a["summary"].startswith(
        "rank 7 (dp group pp0.tp1): straggler in mlp, 1.38x its dp peers,"
        " since 2026-05-28T20:20:04Z; job llm [L1+L2]; steps 50-59;"
    )
    assert summary(v) == a["summary"]  # argus diagnose prints the alert's own line
    assert json.loads(a["details"]["victims"]) == [5, 9]  # never the culprit itself
    assert a["details"]["culprit"] == "rank 7" and a["details"]["group"] == "dp/pp0.tp1"
    h = with_hosts(a, {7: "node0000", 5: "node0000", 99: "node0012"})
    assert h["summary"].startswith("rank 7 (dp group pp0.tp1, host node0000): straggler in mlp")
    assert json.loads(h["details"]["hosts"]) == {"7": "node0000"}
    assert alert_summary(h) == h["summary"] and "hosts" not in a["details"]  # a copy
    g = with_hosts(group_culprit().to_alert(), {r: f"node{r // 8:04d}" for r in range(64)})
    assert g["summary"].startswith(
        "edp group pp1.tp0.ep3 (ranks 38,46,54,62, hosts node0004,node0005,node0006,node0007):"
    )
    resolved = with_hosts({**a, "action": "resolve", "summary": "resolved: x"}, {7: "n"})
    assert resolved["summary"].startswith("resolved: rank 7 (dp group pp0.tp1, host n)")


def test_drilldown_commands_quote_odd_keys() -> None:
    assert drilldown_commands("j/dp/pp0/7/mlp")["report"] == "argus report --around j/dp/pp0/7/mlp"
    assert drilldown_commands("j x/dp")["trace"] == "argus trace --around 'j x/dp'"
