"""Funnel: joining findings into culprits, persistence, confidence, alerts, state."""

from __future__ import annotations

import dataclasses
import json

import fastavro
import pytest

from argus.detectors import funnel
from argus.detectors.config import FunnelConfig
from argus.detectors.findings import Finding
from argus.schemas.codec import Codec
from tests.detectors.findings_builders import l2, l3


def _l1(kind="regression", w=(0, 99)) -> Finding:
    return Finding(
        job="j",
        level="L1",
        kind=kind,
        group_kind="job",
        group_id="all",
        window_start_step=w[0],
        window_end_step=w[1],
        score=2.5,
        threshold=1.1,
    )


def test_l2_and_l3_on_the_same_rank_are_one_culprit_with_l1_support() -> None:
    cs = funnel.join([l2((5,)), l3((5,)), _l1()])
    assert len(cs) == 1
    c = cs[0]
    assert c.ranks == (5,) and c.phase == "mlp" and c.kernels == ("gemm",)
    assert c.levels == ("L1", "L2", "L3")
    assert c.dedup_key == "j/dp/pp0/5/mlp"


def test_late_arrivals_are_propagated_waiting_when_a_compute_straggler_exists() -> None:
    cs = funnel.join(
        [l2((5,)), l2((1, 2, 3, 5), phase="dp_grad_sync", role="late_arrival", group=("dp", "x"))]
    )
    assert [c.ranks for c in cs] == [(5,)]
    assert cs[0].phase == "mlp"


def test_late_arrival_alone_is_a_culprit() -> None:
    (c,) = funnel.join([l2((7,), phase="ep_alltoall", role="late_arrival", group=("ep", "g"))])
    assert c.ranks == (7,) and c.phase == "ep_alltoall"


def test_group_divergence_is_its_own_culprit_and_absorbs_its_members_symptoms() -> None:
    cs = funnel.join(
        [
            l3((), members=[8, 9, 10, 11], group=("edp", "e3"), collective=True),
            l3((9, 10), collective=True),
        ]
    )
    assert len(cs) == 1
    assert (cs[0].group_kind, cs[0].group_id, cs[0].ranks) == ("edp", "e3", ())


def test_group_holding_a_compute_straggler_is_its_symptom() -> None:
    cs = funnel.join(
        [l2((9,)), l3((), members=[8, 9, 10, 11], group=("edp", "e3"), collective=True)]
    )
    assert [(c.ranks, c.levels) for c in cs] == [((9,), ("L2", "L3"))]


def test_unexplained_l1_is_a_job_culprit() -> None:
    cs = funnel.join([_l1("jitter", (40, 40))])
    assert [(c.group_kind, c.kind, c.ranks) for c in cs] == [("job", "jitter", ())]


def test_a_job_wide_regression_pages_once_it_lasts() -> None:
    """An L1 regression no rank explains pages "the whole job" once it lasted 3 consecutive
    windows (``l3_only_persistence``) and a minute of event time (``job_regression_min_s``):
    not for one window of a host's other tenants, nor for 20 steps of 0.2 s."""

    def run(step_s: float, windows: int) -> list[list[list[int]]]:
        reg = dataclasses.replace(_l1(w=(0, 9)), score=4.0, observed=480.0, baseline=170.0)
        st, pages = funnel.FunnelState(), []
        for k in range(windows):
            w = (10 * k, 10 * k + 9)
            f = dataclasses.replace(
                reg,
                window_start_step=w[0],
                window_end_step=w[1],
                window_start_ns=int(w[0] * step_s * 1e9),
                window_end_ns=int((w[1] + 1) * step_s * 1e9),
            )
            st, out = funnel.step(st, [f])
            pages.append([a["ranks"] for a in out.alerts if a["action"] == "trigger"])
        return pages

    assert run(3.0, 4) == [[], [], [[]], []]  # 90 s by its third window
    assert run(1.0, 7) == [[], [], [], [], [], [[]], []]  # 60 s at its sixth
    assert run(0.2, 4) == [[], [], [], []]  # 8 s of fast steps: the host's other tenants
    # one window of it, then quiet: no page
    reg = dataclasses.replace(_l1(w=(0, 9)), score=4.0, observed=480.0, baseline=170.0)
    _st, out = funnel.step(funnel.FunnelState(), [reg])
    assert out.verdicts and not out.alerts


def test_a_step_time_spike_supports_only_the_culprit_that_made_it() -> None:
    """An L1 spike at step 3 is not evidence for a straggler that merely shares the window
    (a noise finding pushed over the trigger by an unrelated spike, issue 18 item 3); it is
    for a rank whose own L2 spike is at step 3."""
    spike = _l1("jitter", w=(0, 9))
    spike = dataclasses.replace(spike, evidence={"spike_steps": json.dumps([3])})
    cs = funnel.join([l2((5,)), spike])
    assert sorted(c.levels for c in cs) == [("L1",), ("L2",)]
    own = dataclasses.replace(
        l2((7,)), kind="jitter", evidence={"role": "compute", "spike_steps": '{"7": [3]}'}
    )
    cs = funnel.join([l2((5,)), own, spike])
    assert {c.ranks: c.levels for c in cs} == {(5,): ("L2",), (7,): ("L1", "L2")}


def _missing(rank: int, step: int) -> Finding:
    return Finding(
        job="j",
        level="L1",
        kind="missing_rank",
        group_kind="job",
        group_id="all",
        ranks=(rank,),
        window_start_step=step,
        window_end_step=step,
        score=1.0,
        threshold=0.0,
    )


def test_a_missing_rank_is_its_own_culprit_beside_a_straggler() -> None:
    """A rank that stopped reporting is not step-time evidence of the window's straggler
    (it was attached to it as any L1 window, and never paged): it pages on its own."""
    st = funnel.FunnelState()
    triggered: list[str] = []
    for w in range(3):
        found = [l2((4,), w=(w * 10, w * 10 + 9), z=4.0)]
        found += [_missing(5, k) for k in range(w * 10, w * 10 + 10)]
        st, out = funnel.step(st, found)
        assert sorted(c.ranks for c in funnel.join(found)) == [(4,), (5,)]
        triggered += [a["dedup_key"] for a in out.alerts if a["action"] == "trigger"]
    assert "j/job/all/5/missing_rank" in triggered, triggered


def test_two_independent_stragglers_stay_apart() -> None:
    cs = funnel.join([l2((1,)), l2((40,), group=("dp", "pp1"))])
    assert sorted(c.ranks for c in cs) == [(1,), (40,)]


def test_persistence_confidence_trigger_and_resolve() -> None:
    cfg = FunnelConfig(trigger_confidence=0.75, resolve_after=2)
    st = funnel.FunnelState()
    confs = []
    alerts = []
    for w in range(3):
        st, out = funnel.step(st, [l2((5,), w=(w * 10, w * 10 + 9), z=4.0)], cfg)
        (v,) = out.verdicts
        assert v.persistence == w + 1
        confs.append(v.confidence)
        alerts += out.alerts
    assert confs == sorted(confs) and confs[0] < 0.75 <= confs[-1]
    assert [a["action"] for a in alerts] == ["trigger"]
    trig = alerts[0]
    assert trig["dedup_key"] == "j/dp/pp0/5/mlp" and trig["levels"] == ["L2"]
    st, out = funnel.step(st, [], cfg)
    assert out.alerts == []
    st, out = funnel.step(st, [], cfg)
    assert [a["action"] for a in out.alerts] == ["resolve"]
    assert out.alerts[0]["dedup_key"] == trig["dedup_key"]
    assert st.culprits == {}


def test_gap_resets_persistence() -> None:
    st = funnel.FunnelState()
    st, _ = funnel.step(st, [l2((5,))])
    st, _ = funnel.step(st, [])
    st, out = funnel.step(st, [l2((5,), w=(20, 29))])
    assert out.verdicts[0].persistence == 1


def test_state_round_trips_through_json() -> None:
    st, _ = funnel.step(funnel.FunnelState(), [l2((5,), z=30.0)])
    back = funnel.FunnelState.from_dict(json.loads(json.dumps(st.to_dict())))
    assert back == st
    _st2, out = funnel.step(back, [l2((5,), w=(10, 19), z=30.0)])
    assert out.verdicts[0].persistence == 2


def test_records_match_the_wire_schemas() -> None:
    codec = Codec()
    _st, out = funnel.step(funnel.FunnelState(), [l2((5,), z=40.0), l3((5,))])
    (v,) = out.verdicts
    for rec in out.alerts:
        assert codec.decode_as("alert", codec.encode("alert", rec))["dedup_key"] == v.dedup_key
    an = v.to_anomaly()
    assert an["level"] == "funnel" and an["ranks"] == [5]
    assert codec.decode_as("anomaly", codec.encode("anomaly", an))["id"] == an["id"]
    fastavro.validate(an, codec.schema("anomaly").parsed, raise_errors=True)
    assert v.to_anomaly()["id"] == an["id"]  # deterministic


def test_confidence_grows_with_levels_and_margin() -> None:
    cfg = FunnelConfig()
    one = funnel.confidence_of([l2((5,), z=4.0)], 1, cfg)
    two = funnel.confidence_of([l2((5,), z=4.0), l3((5,))], 1, cfg)
    big = funnel.confidence_of([l2((5,), z=40.0)], 1, cfg)
    assert 0 < one < two <= 1 and one < big
    assert funnel.confidence_of([l2((5,), z=4.0)], 3, cfg) > one


@pytest.mark.parametrize("bad", [0.0, 1.5])
def test_bad_trigger_confidence(bad: float) -> None:
    from argus.errors import DetectorConfigError

    with pytest.raises(DetectorConfigError):
        FunnelConfig(trigger_confidence=bad)


def test_waiting_in_a_collective_is_attached_to_a_slow_kernel_culprit() -> None:
    # rank 14 waits in its TP all-reduce because its peer 15's own kernels are slow
    cs = funnel.join(
        [l3((15,), kernel="gemm"), l3((14,), kernel="nccl_allreduce", collective=True)]
    )
    assert [c.ranks for c in cs] == [(15,)]


def test_waiting_alone_is_reported_but_never_pages() -> None:
    _st, out = funnel.step(
        funnel.FunnelState(), [l3((14,), kernel="nccl_allreduce", collective=True)]
    )
    assert [v.culprit.ranks for v in out.verdicts] == [(14,)]
    assert out.alerts == []


def test_retrigger_only_when_levels_or_severity_change() -> None:
    st = funnel.FunnelState()
    actions = []
    for w, k in enumerate(["gemm", "attn", "norm"]):
        st, out = funnel.step(
            st,
            [
                l2((5,), w=(w * 10, w * 10 + 9), z=40.0),
                l3((5,), kernel=k, w=(w * 10, w * 10 + 9)),
            ],
        )
        actions += [a["action"] for a in out.alerts]
    assert actions == ["trigger"]


def test_retrigger_only_when_the_alert_escalates_not_when_a_level_comes_and_goes() -> None:
    # soak run 4: a straggler's alert re-triggered as a stale L3 block joined it in one
    # window and not the next (L1+L2 -> L1+L2+L3 -> L1+L2 -> L1+L2+L3)
    st = funnel.FunnelState()
    sent = []
    for w in range(4):
        win = (w * 10, w * 10 + 9)
        fs = [l2((5,), w=win, z=40.0)] + ([l3((5,), w=win)] if w % 2 else [])
        st, out = funnel.step(st, fs)
        sent += [(a["action"], a["levels"]) for a in out.alerts]
    assert sent == [("trigger", ["L2"]), ("trigger", ["L2", "L3"])]
    assert st.culprits[next(iter(st.culprits))].signature == "L2+L3|critical"


def test_l3_only_culprit_pages_from_its_third_consecutive_window() -> None:
    s = funnel.FunnelState()
    for k in range(2):
        s, out = funnel.step(s, [l3((5,), w=(10 * k, 10 * k + 9))])
        assert out.verdicts and out.verdicts[0].confidence >= 0.5 and out.alerts == []
    s, out = funnel.step(s, [l3((5,), w=(20, 29))])
    assert [a["action"] for a in out.alerts] == ["trigger"]
    # L1 names no rank: it does not make one window enough; L2 beside it does
    assert not funnel.step(funnel.FunnelState(), [l3((5,)), _l1(w=(0, 9))])[1].alerts
    assert funnel.step(funnel.FunnelState(), [l3((5,)), l2((5,))])[1].alerts

    # a group divergence alone waits as long
    def g(k: int) -> Finding:
        return l3(
            (),
            kernel="nccl_rs",
            collective=True,
            members=[4, 5],
            group=("edp", "ep1"),
            w=(10 * k, 10 * k + 9),
        )

    s = funnel.FunnelState()
    alerts = []
    for k in range(3):
        s, out = funnel.step(s, [g(k)])
        alerts.append(len(out.alerts))
    assert alerts == [0, 0, 1]
    # and the knob can ask for one window only
    one = FunnelConfig(l3_only_persistence=1)
    assert funnel.step(funnel.FunnelState(), [l3((5,))], one)[1].alerts
