"""Group-wide and host faults (issue 18, item 4): a slow NIC names its host, a slow link its
group; healthy uneven stages, noise, hiccups, checkpoints and stragglers name nothing.

The synthetic jobs model what the detector relies on: a collective ends at the last arrival
plus a transfer common to its members (early members absorb the wait), pipeline p2p phases
are receive waits (bubbles + the transfer), 8 GPUs a node in rank order.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from argus.collectors.topology import Layout, layout_coords
from argus.detectors import funnel, groupwide
from argus.detectors.l2 import GroupWindow
from argus.routing import DEFAULT_GROUPS, group_id
from tests.detectors.findings_builders import l2

DENSE = Layout(tp=8, pp=4, dp=16)
MOE = Layout(tp=2, ep=8, dp=8, pp=4)
STEP_NS = 880e6
# (kind, phase, stream kind, transfer ms)
DENSE_OPS = [
    ("dp", "grads_reduce_scatter", "comm", 40.0),
    ("tp", "tp_allreduce", "comm", 6.0),
    ("pp", "pp_recv_forward", "p2p", 8.0),
]
MOE_OPS = [
    *DENSE_OPS,
    ("ep", "moe_dispatch", "comm", 10.0),
    ("edp", "expert_grad_sync", "comm", 20.0),
]


def _host(rank: int) -> str:
    return f"h{rank // 8}"


def job(
    lay: Layout,
    ops=DENSE_OPS,
    *,
    steps: int = 10,
    seed: int = 0,
    cv: float = 0.05,
    slow_host: str | None = None,
    nic: float = 1.6,
    uneven: bool = True,
    hiccups: tuple[int, ...] = (),
    checkpoint: int | None = None,
    straggler: int | None = None,
    slow_group: tuple[str, str, float] | None = None,
    p2p_nic: bool = True,
) -> list[GroupWindow]:
    """One window of every group of ``lay`` for ``ops``.

    ``uneven``: stage 0 +15 %, last stage +25 % in compute *and* collectives (by design);
    ``hiccups``: steps where every DP collective is 2x (congestion); ``checkpoint``: a step
    8x for everyone; ``straggler``: its model replica arrives 60 ms late everywhere;
    ``slow_group=(kind, id, factor)``: one group's transfer slower (a link); ``p2p_nic``:
    the slow host's p2p transfers slower too (else its pipeline's waits hide it).
    """
    rng = np.random.default_rng(seed)
    n = lay.world_size
    coords = [layout_coords(lay, r) for r in range(n)]
    design = {0: 1.15, lay.pp - 1: 1.25} if uneven and lay.pp > 1 else {}
    late_dp = coords[straggler]["dp_rank"] if straggler is not None else None
    out = []
    for kind, phase, sk, t_ms in ops:
        varies = DEFAULT_GROUPS[kind]
        groups: dict[str, list[int]] = {}
        for r in range(n):
            groups.setdefault(group_id(coords[r], varies), []).append(r)
        for gid, members in sorted(groups.items()):
            ranks = np.array(members)
            hosts = {_host(r) for r in members}
            d = np.empty((len(members), steps, 1))
            for s in range(steps):
                stage = coords[members[0]]["pp_rank"]
                t = t_ms * 1e6 * design.get(stage, 1.0) if kind != "pp" else t_ms * 1e6
                if slow_host in hosts and len(hosts) > 1 and kind != "pp":
                    t *= nic
                if slow_group is not None and (kind, gid) == slow_group[:2]:
                    t *= slow_group[2]
                if s in hiccups and kind in ("dp", "edp"):
                    t *= 2.0
                if s == checkpoint:
                    t *= 8.0
                arrive = rng.exponential(10e6, len(members))
                if late_dp is not None:
                    arrive += 60e6 * np.array([coords[r]["dp_rank"] == late_dp for r in members])
                noise = rng.lognormal(0.0, cv, len(members))
                if sk == "comm":
                    d[:, s, 0] = (arrive.max() - arrive) + t * noise
                else:  # p2p receive waits: bubbles plus the transfer through both NICs
                    on_path = p2p_nic and slow_host in hosts
                    f = np.where(on_path, nic, 1.0) * np.ones(len(members))
                    d[:, s, 0] = arrive + t * f * noise
            out.append(
                GroupWindow(
                    job="j",
                    group_kind=kind,
                    group_id=gid,
                    ranks=ranks,
                    steps=np.arange(steps),
                    phases=(phase,),
                    stream_kinds=(sk,),
                    durations_ns=d,
                    start_ns=0,
                    end_ns=int(steps * STEP_NS),
                    iter_ns=np.full((len(members), steps), STEP_NS),
                )
            )
    return out


def _hosts(lay: Layout) -> dict[int, str]:
    return {r: _host(r) for r in range(lay.world_size)}


def _named(fs) -> list[tuple[str, str]]:
    return [(f.group_kind, f.group_id) for f in fs]


def test_slow_nic_names_its_host_dense_1f1b_layout() -> None:
    # node h20 = ranks 160-167 = (pp 1, dp 4, tp 0-7): its 8 ranks are in 8 DP groups (all of
    # stage 1's, shared with 15 other nodes), 8 pipelines (shared with 3 nodes) and 1 TP
    # group (inside the node, no NIC)
    for seed in range(3):
        fs = groupwide.detect(job(DENSE, slow_host="h20", seed=seed), _hosts(DENSE))
        assert _named(fs) == [("host", "h20")], seed
        assert fs[0].evidence["members"] == str(list(range(160, 168))).replace(" ", " ")


def test_slow_nic_on_the_last_stage_names_its_host() -> None:
    fs = groupwide.detect(job(DENSE, slow_host="h50", seed=4), _hosts(DENSE))  # pp 3, dp 2
    assert _named(fs) == [("host", "h50")]


def test_slow_nic_names_its_host_moe_layout() -> None:
    # tp 2 x ep 8 x dp 8 x pp 4: a node holds tp 0-1 x ep 0-3 of one (dp, pp): its EP groups
    # span 2 nodes, its EDP groups 8, its pipelines 4
    fs = groupwide.detect(job(MOE, MOE_OPS, slow_host="h9", seed=1), _hosts(MOE))
    assert _named(fs) == [("host", "h9")]


def test_a_nic_its_pipeline_hides_names_its_stage() -> None:
    # only the DP collectives show it (p2p receive waits hide the slower transfer): all of
    # stage 1's DP groups are 1.6x the other stages' (the last stage's +25 % by design is not)
    fs = groupwide.detect(job(DENSE, slow_host="h20", seed=5, p2p_nic=False), _hosts(DENSE))
    assert _named(fs) == [("dp", "pp1")]
    assert fs[0].phase == "grads_reduce_scatter" and len(eval(fs[0].evidence["members"])) == 128


def test_hosts_default_to_8_gpus_a_node() -> None:
    fs = groupwide.detect(job(DENSE, slow_host="h20", seed=2))
    assert _named(fs) == [("host", "node20")]
    recs = [{"rank": 3, "host": ""}, {"rank": 9, "host": "gpu-a"}]
    assert groupwide.hosts_of(recs) == {3: "node0", 9: "gpu-a"}


@pytest.mark.parametrize(
    ("cv", "extra"),
    [
        (0.05, {}),
        (0.08, {"hiccups": (3,)}),
        (0.30, {}),  # heavy jitter
        (0.08, {"checkpoint": 5}),
    ],
)
def test_healthy_uneven_stages_name_nothing(cv: float, extra: dict) -> None:
    for lay, ops in ((DENSE, DENSE_OPS), (MOE, MOE_OPS)):
        for seed in range(3):
            fs = groupwide.detect(job(lay, ops, cv=cv, seed=seed, **extra), _hosts(lay))
            assert fs == [], (lay, seed, _named(fs))


def test_slow_link_names_its_group_not_a_host() -> None:
    fs = groupwide.detect(
        job(MOE, MOE_OPS, slow_group=("edp", "pp2.tp1.ep5", 3.0), seed=3), _hosts(MOE)
    )
    assert _named(fs) == [("edp", "pp2.tp1.ep5")]
    assert fs[0].phase == "expert_grad_sync"


def test_the_funnel_pages_the_host_once_keyed_by_host() -> None:
    st = funnel.FunnelState()
    keys = []
    for w in range(3):
        fs = groupwide.detect(job(DENSE, slow_host="h20", seed=10 + w), _hosts(DENSE))
        st, out = funnel.step(st, fs)
        keys.append([a["dedup_key"] for a in out.alerts if a["action"] == "trigger"])
    # paged in its first window; later triggers only escalate the same alert
    assert keys[0] == ["j/host/h20/-/group_divergence"]
    assert {k for ks in keys for k in ks} == {"j/host/h20/-/group_divergence"}


def test_a_stragglers_pipeline_waiting_is_its_symptom_not_a_page() -> None:
    # the straggler's pipeline (dp 4) waits in every p2p receive: its p2p groups are slow;
    # any host or group named from them is attached to the straggler by the funnel
    fs = groupwide.detect(job(DENSE, cv=0.05, seed=7, straggler=162), _hosts(DENSE))
    straggler = l2((162,), ("dp", "pp1.tp2"), z=40.0)
    _st, out = funnel.step(funnel.FunnelState(), [straggler, *fs])
    assert [a["ranks"] for a in out.alerts if a["action"] == "trigger"] == [[162]]


# -- a slow NIC its pipeline hides: the ranks' receives name it (issue 18) -------------------------

MB = 8  # micro-batches per step


def receives(
    lay: Layout,
    *,
    steps: int = 10,
    seed: int = 0,
    slow_host: str | None = None,
    nic: float = 1.6,
    straggler: int | None = None,
    transfer_ms: float = 0.8,
    sender_nic: bool = True,
) -> list[dict]:
    """Step records holding only the pipeline receives of a 1F1B schedule, one entry per
    micro-batch: forward receives (stages >= 1) post after the sender sent in most
    micro-batches (the entry is the transfer), backward receives (stages < last) wait for the
    later stages' compute in every one (5-30 ms, the transfer hidden in it). A transfer
    through ``slow_host``'s NIC (either end; only the receiving one unless ``sender_nic``) is
    ``nic`` x; ``straggler``: its pipeline's later stages wait for it in every forward receive
    (40 ms)."""
    rng = np.random.default_rng([seed, 7])
    n = lay.world_size
    coords = [layout_coords(lay, r) for r in range(n)]
    pp_of = {r: coords[r]["pp_rank"] for r in range(n)}
    pipe = {}
    for r in range(n):
        pipe.setdefault(group_id(coords[r], DEFAULT_GROUPS["pp"]), {})[pp_of[r]] = r
    late = None
    if straggler is not None:
        late = group_id(coords[straggler], DEFAULT_GROUPS["pp"])
    recs = []
    for s in range(steps):
        for r in range(n):
            st = pp_of[r]
            chain = pipe[group_id(coords[r], DEFAULT_GROUPS["pp"])]
            phases = []
            for name, peer, wait in (
                ("pp_recv_fwd", st - 1, lambda: rng.exponential(3.0) * (rng.random() < 0.4)),
                ("pp_recv_bwd", st + 1, lambda: rng.uniform(5.0, 30.0)),
            ):
                if peer not in chain:
                    continue
                slow = slow_host == _host(r) or (sender_nic and slow_host == _host(chain[peer]))
                for _m in range(MB):
                    w = wait()
                    if late is not None and chain is pipe[late] and name == "pp_recv_fwd":
                        w += 40.0 if st > pp_of[straggler] else 0.0
                    t = transfer_ms * (nic if slow else 1.0) * rng.lognormal(0.0, 0.05)
                    phases.append(
                        {
                            "name": name,
                            "stream_kind": "p2p",
                            "start_ns": 0,
                            "duration_ns": int((w + t) * 1e6),
                        }
                    )
            recs.append({"rank": r, "step": s, "coords": coords[r], "phases": phases})
    return recs


def _no_p2p(windows: list[GroupWindow]) -> list[GroupWindow]:
    return [w for w in windows if w.group_kind != "pp"]


@pytest.mark.parametrize(("slow", "stage"), [("h20", 1), ("h50", 3), ("h3", 0), ("h36", 2)])
def test_a_nic_its_pipeline_hides_names_its_host_from_the_ranks_receives(
    slow: str, stage: int
) -> None:
    # tp 8 x pp 4 x dp 16: the node's DP groups are all of its stage's (no other node's
    # ranks free of it), its pipelines' summed receives are bubbles; each rank's shortest
    # forward receive is the transfer, and the node's are 1.6x (its own and its next
    # stage's); before, this was named as the stage (dp/pp<stage>) at best
    ws = job(DENSE, slow_host=slow, seed=stage, p2p_nic=False)
    assert int(slow[1:]) * 8 // 128 == stage
    recs = receives(DENSE, slow_host=slow, seed=stage)
    fs = groupwide.detect(_no_p2p(ws), _hosts(DENSE), records=recs)
    assert _named(fs) == [("host", slow)]
    first = int(slow[1:]) * 8
    assert json.loads(fs[0].evidence["members"]) == list(range(first, first + 8))
    assert any(g.startswith("pp:") for g in json.loads(fs[0].evidence["groups"]))
    # the page shows what the step pays (its DP rings), the receives tell the host apart
    assert fs[0].phase == "grads_reduce_scatter"
    assert "pp_recv_fwd" in json.loads(fs[0].evidence["phases"])


def test_a_nic_names_its_host_moe_layout_with_receives() -> None:
    # tp 2 x ep 8 x dp 8 x pp 4: its EP all-to-alls (2 nodes) and its receives intersect
    fs = groupwide.detect(
        _no_p2p(job(MOE, MOE_OPS, slow_host="h9", seed=1, p2p_nic=False)),
        _hosts(MOE),
        records=receives(MOE, slow_host="h9", seed=1),
    )
    assert _named(fs) == [("host", "h9")]


@pytest.mark.parametrize("lay", [DENSE, MOE])
def test_healthy_receives_name_nothing(lay: Layout) -> None:
    ops = DENSE_OPS if lay is DENSE else MOE_OPS
    for seed in range(2):
        fs = groupwide.detect(
            _no_p2p(job(lay, ops, cv=0.08, seed=seed)),
            _hosts(lay),
            records=receives(lay, seed=seed),
        )
        assert fs == [], (seed, _named(fs))


def test_a_stragglers_pipeline_waiting_names_no_host() -> None:
    # rank 162 (pp 1, dp 4) is late: the later stages of its pipelines wait in every forward
    # receive, so the next stage's node looks slow in its receives, but its DP collectives
    # are its stage's usual: no NIC
    recs = receives(DENSE, seed=3, straggler=162)
    fs = groupwide.detect(_no_p2p(job(DENSE, seed=3)), _hosts(DENSE), records=recs)
    assert not [f for f in fs if f.group_kind == "host"], _named(fs)


def test_receive_direction_and_sender_come_from_the_stages_that_have_the_phase() -> None:
    lay = Layout(tp=1, pp=3, dp=1)
    rows = [
        ("pp", "all", "recv_a", 1, 1, 8, 1e6),  # no stage 0: from the stage before
        ("pp", "all", "recv_a", 2, 2, 8, 1e6),
        ("pp", "all", "recv_b", 0, 0, 8, 9e6),  # no last stage: from the stage after
        ("pp", "all", "recv_b", 1, 1, 8, 9e6),
        ("pp", "all", "both", 0, 0, 1, 1e6),  # every stage: no direction, left out
        ("pp", "all", "both", 1, 1, 1, 1e6),
        ("pp", "all", "both", 2, 2, 1, 1e6),
    ]
    assert lay.world_size == 3
    got = {(g.phase, g.members, g.stage, g.weight) for g in groupwide.receive_stats([(0, rows)], 1)}
    assert got == {
        ("recv_a", (1, 0), 1, 8.0),
        ("recv_a", (2, 1), 2, 8.0),
        ("recv_b", (0, 1), 0, 8.0),
        ("recv_b", (1, 2), 1, 8.0),
    }


def test_receive_rows_take_the_shortest_entry_of_a_phase() -> None:
    c = layout_coords(Layout(tp=1, pp=2, dp=1), 1)
    rec = {
        "rank": 1,
        "coords": c,
        "phases": [
            {"name": "pp_recv_fwd", "stream_kind": "p2p", "start_ns": 0, "duration_ns": d}
            for d in (9_000_000, 800_000, 3_000_000)
        ]
        + [{"name": "mlp", "stream_kind": "compute", "start_ns": 0, "duration_ns": 5}],
    }
    assert groupwide.receive_rows([rec]) == [("pp", "all", "pp_recv_fwd", 1, 1, 3, 800_000.0)]


@pytest.mark.parametrize("lay", [DENSE, MOE])
def test_a_nic_seen_only_on_its_receives_names_its_host(lay: Layout) -> None:
    # a workload (or transport) where the slow NIC lengthens only the receives on its own
    # node: the next stage's receives from it look normal, which must not clear it
    ops = DENSE_OPS if lay is DENSE else MOE_OPS
    slow = "h20" if lay is DENSE else "h9"
    fs = groupwide.detect(
        _no_p2p(job(lay, ops, slow_host=slow, seed=6, p2p_nic=False)),
        _hosts(lay),
        records=receives(lay, slow_host=slow, seed=6, sender_nic=False),
    )
    assert _named(fs) == [("host", slow)]
