"""The production-hard simulator (issue 18): layouts, 1F1B waits, noise, faults, scoring."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from argus.schemas.codec import Codec
from argus.sim import LayoutError, SimRun, build, simulate
from argus.sim.evaluate import EngineRun, run_engine_on, score_pages
from argus.sim.mega import LAYOUTS, MegaFault, MegaModel, Noise, host_of
from argus.sim.scenarios import MEGA_HEALTHY, MEGA_SCENARIOS

DENSE = LAYOUTS["dense256"]


def _phase_totals(st, name: str) -> np.ndarray:
    """(R,) summed duration of a phase per rank, ms."""
    out = np.zeros(st.end_ms.size)
    for b in st.blocks:
        cols = [j for j, n in enumerate(b.phase_names) if n == name]
        if cols:
            out[b.ranks] = b.phase_dur[:, cols].sum(axis=1)
    return out


def _kernel_totals(st, model: MegaModel, pattern: str, exact: bool = False) -> np.ndarray:
    """(R,) summed duration of the kernels whose name contains (or is) ``pattern``, ms."""
    out = np.zeros(st.end_ms.size)
    for b in st.blocks:
        names = [model.names[k] for k in b.kernel_name]
        cols = [j for j, n in enumerate(names) if (n == pattern if exact else pattern in n)]
        out[b.ranks] = b.kernel_dur[:, cols].sum(axis=1)
    return out


def test_layouts_hosts_and_sizes() -> None:
    assert {k: v.world for k, v in LAYOUTS.items()} == {
        "dense256": 256,
        "moe256": 256,
        "dense512": 512,
        "dense2048": 2048,
        "moe512": 512,
    }
    moe = LAYOUTS["moe512"]
    assert (moe.tp, moe.ep, moe.dp, moe.pp) == (2, 8, 8, 4)
    assert host_of(0) == host_of(7) == "node0000" and host_of(8) == "node0001"
    assert SimRun.make("mega-noise", ranks=2048, steps=1).layout == LAYOUTS["dense2048"]
    assert SimRun.make("mega-moe-expert", ranks=512, steps=1).layout == moe
    with pytest.raises(LayoutError, match="no default layout"):
        SimRun.make("mega-noise", ranks=64, steps=1)
    with pytest.raises(LayoutError, match="Megatron"):
        SimRun.make("mega-noise", layout="dp=64", steps=1)


def test_phase_and_kernel_counts_per_rank_step() -> None:
    st = MegaModel(DENSE, seed=1).step(0)
    phases = [len(b.phase_names) for b in st.blocks]
    kernels = [b.kernel_name.size for b in st.blocks]
    assert phases == [60, 68, 68, 60]  # first/last stage have no recv from before/after
    assert all(200 <= k <= 240 for k in kernels), kernels
    mst = MegaModel(LAYOUTS["moe256"], seed=1).step(0)
    assert "moe_dispatch" in mst.blocks[1].phase_names
    assert all(220 <= b.kernel_name.size <= 250 for b in mst.blocks)
    # compute phases are the sum of their kernels (plus launch gaps of 5 us)
    b = st.blocks[1]
    j = b.phase_names.index("self_attention")
    ks = (b.kernel_start[0] >= b.phase_start[0, j]) & (
        b.kernel_start[0] < b.phase_start[0, j] + b.phase_dur[0, j]
    )
    assert b.kernel_dur[0, ks].sum() == pytest.approx(b.phase_dur[0, j], rel=0.01)


def test_1f1b_waits_travel_and_early_members_absorb_the_wait() -> None:
    slow = 2 * 64 + 8 * 3 + 5  # stage 2, TP group of ranks 152..159
    f = MegaFault("compute", (slow,), 0, factor=1.5)
    st = MegaModel(DENSE, Noise(), (f,), seed=3).step(0)
    base = MegaModel(DENSE, Noise(), (), seed=3).step(0)
    tp_peers = np.arange(152, 160)
    ar = _phase_totals(st, "tp_allreduce")
    # inside the TP group the straggler arrives last: its all-reduce phases are the shortest
    assert ar[slow] == ar[tp_peers].min() and ar[tp_peers].max() > 3 * ar[slow]
    # its pipeline (same tp, dp; other stages) waits on p2p: stage 1 waits for backward grads,
    # stage 3 for forward activations; other pipelines do not
    pipe = slow % 64 + 64 * np.arange(4)
    d_bwd = _phase_totals(st, "pp_recv_bwd") - _phase_totals(base, "pp_recv_bwd")
    d_fwd = _phase_totals(st, "pp_recv_fwd") - _phase_totals(base, "pp_recv_fwd")
    assert d_bwd[pipe[1]] > 50 and d_fwd[pipe[3]] > 50
    other = (slow % 64 + 8) % 64 + 64 * np.arange(4)
    assert abs(d_bwd[other[1]]) < 10
    # the DP group of stage 2, tp 5 waits for the straggler's pipeline in the reduce-scatter
    dp_members = np.flatnonzero(DENSE.group_index("dp") == DENSE.group_index("dp")[slow])
    rs = _phase_totals(st, "grads_reduce_scatter")
    assert rs[slow] == rs[dp_members].min() and np.median(rs[dp_members]) > rs[slow] + 100
    # the step ends later for everyone of stage 2 (the DP all-gather) by roughly the excess
    assert st.end_ms.max() > base.end_ms.max() + 100


def test_noise_statistics_roughly_as_specified() -> None:
    model = MegaModel(DENSE, Noise(hiccup_p=0.03, checkpoint_every=50), seed=5)
    steps = [model.step(s) for s in range(101)]
    # data loading: median 8 ms, log sigma 0.25 (hiccup steps excluded)
    dl = np.stack([_phase_totals(st, "data_load") for st in steps if not st.hiccup])
    ok = np.array([not st.checkpoint for st in steps if not st.hiccup])
    logs = np.log(dl[ok])
    assert np.exp(np.median(logs)) == pytest.approx(8.0, rel=0.05)
    assert logs.std() == pytest.approx(0.25, rel=0.1)
    # kernel CV of one name on one rank across steps within 3-8 % (+ rank-step 1 %), plus
    # 0.2 % of kernels 1.5-4x
    b_idx = 1
    k = np.stack(
        [st.blocks[b_idx].kernel_dur[:, 2] for st in steps if not (st.checkpoint or st.hiccup)]
    )
    ratio = k / np.median(k, axis=0)
    assert 0.001 < (ratio > 1.4).mean() < 0.01
    trimmed = np.where(ratio < 1.4, k, np.nan)
    cv = np.nanstd(trimmed, axis=0) / np.nanmean(trimmed, axis=0)
    assert 0.025 < np.median(cv) < 0.095
    # hiccups in ~3 % of steps; checkpoint steps at 50, 100 are ~8x slower
    assert 0 < sum(1 for st in steps if st.hiccup) <= 10
    ends = np.array([st.end_ms.max() for st in steps])
    assert steps[50].checkpoint and ends[50] > 6 * np.median(ends)
    # heavy jitter: CV 30 %
    heavy = MegaModel(DENSE, Noise(heavy_cv=0.3), seed=5)
    kh = np.stack([heavy.step(s).blocks[1].kernel_dur[:, 2] for s in range(40)])
    assert np.median(kh.std(axis=0) / kh.mean(axis=0)) == pytest.approx(0.3, rel=0.2)
    # uneven stages: first +15 %, last +25 % compute
    un = MegaModel(DENSE, Noise(stage_skew=(1.15, 1.25)), seed=5).step(0)
    att = _phase_totals(un, "self_attention")
    med = [np.median(att[s * 64 : (s + 1) * 64]) for s in range(4)]
    assert med[0] / med[1] == pytest.approx(1.15, rel=0.03)
    assert med[3] / med[1] == pytest.approx(1.25, rel=0.03)


@pytest.mark.parametrize(
    "name", [n for n in MEGA_SCENARIOS if n not in MEGA_HEALTHY and n != "mega-moe-expert"]
)
def test_each_fault_is_visible_where_it_should_be(name: str) -> None:
    sc = build(name, DENSE, 40, seed=2)
    t = sc.truth
    assert t.ranks and t.onset_step is not None and t.expected_levels
    assert t.phases or t.expected_levels == ("missing",)
    assert sc.noise is not None
    model = MegaModel(DENSE, sc.noise, sc.mega_faults, seed=2)
    clean = MegaModel(DENSE, sc.noise, (), seed=2)
    s = (t.fault_steps or (t.onset_step + 10,))[-1 if t.fault_steps else 0]
    for k in range(s):
        model.step(k)
        clean.step(k)
    st, base = model.step(s), clean.step(s)
    r = t.ranks[0]
    if name == "mega-rank-stops":
        assert not st.reporting[r] and st.reporting.sum() == DENSE.world - 1
        return
    if name == "mega-slow-nic":
        assert t.host == host_of(r) and len(t.ranks) == 8
        rs = _phase_totals(st, "grads_reduce_scatter") - _phase_totals(base, "grads_reduce_scatter")
        dp = DENSE.group_index("dp")
        hit = np.isin(dp, dp[list(t.ranks)])
        assert np.median(rs[hit]) > 10 and abs(np.median(rs[~hit])) < 2
        # its pipeline links: the shortest forward receive of a step is the transfer alone
        # (posted after the send), 1.6x where either end is the host
        fwd = np.full(DENSE.world, np.nan)
        for b in st.blocks:
            cols = [j for j, n in enumerate(b.phase_names) if n == "pp_recv_fwd"]
            if cols:
                fwd[b.ranks] = b.phase_dur[:, cols].min(axis=1)
        per_stage = DENSE.world // DENSE.pp
        rx = np.array([x for x in t.ranks if x >= per_stage] or [x + per_stage for x in t.ranks])
        assert np.median(fwd[rx]) / np.nanmedian(fwd) == pytest.approx(1.6, rel=0.1)
        return
    if name == "mega-data-stall":
        assert _phase_totals(st, "data_load")[r] > 1500
        return
    if t.kernels:
        one = name == "mega-gemm-kernel"
        pat = t.kernels[0] if one else "gemm"
        k_f = _kernel_totals(st, model, pat, one)
        k_b = _kernel_totals(base, clean, pat, one)
        want = 2.0 if name == "mega-gemm-kernel" else 1.25
        assert k_f[r] / k_b[r] == pytest.approx(want, rel=0.15)
    for rr in t.ranks:
        mlp = _phase_totals(st, "mlp")[rr] / _phase_totals(base, "mlp")[rr]
        assert mlp > 1.03, (name, rr, mlp)


def test_moe_expert_fault_and_records_decode() -> None:
    run = SimRun.make("mega-moe-expert", ranks=256, steps=2, seed=4)
    r = run.truth.ranks[0]
    recs = list(simulate(run))
    steps = [x for s, _, x in recs if s == "raw.steps"]
    kern = [x for s, _, x in recs if s == "raw.kernels"]
    assert len(steps) == len(kern) == 2 * 256
    codec = Codec()
    for suffix, key, rec in recs[:3] + recs[-3:]:
        name = "step_record" if suffix == "raw.steps" else "kernel_batch"
        dec = codec.decode_as(name, codec.encode(name, rec))
        assert {k: dec[k] for k in rec} == rec and key == f"{rec['job']}/{rec['rank']}"
    assert steps[r]["host"] == host_of(r) and steps[r]["coords"]["ep_size"] == 8
    assert {"moe_dispatch", "moe_combine", "data_load"} <= {p["name"] for p in steps[0]["phases"]}
    assert run.truth_dict()["host"] is None and run.truth.kernels


def test_rank_that_stops_sends_nothing_after_onset() -> None:
    run = SimRun.make("mega-rank-stops", ranks=256, steps=8, seed=1, kernels=False)
    r, onset = run.truth.ranks[0], run.truth.onset_step
    assert onset is not None
    seen = {(x["rank"], x["step"]) for s, _, x in simulate(run) if s == "raw.steps"}
    assert (r, onset - 1) in seen and not any((r, s) in seen for s in range(onset, 8))


def _er(alerts: list[dict], steps: int = 100) -> EngineRun:
    return EngineRun("j", steps, 10, alerts, {i: 3 for i in range(len(alerts))}, [], [], 0, 0, 0)


def test_score_pages_bars() -> None:
    lay = DENSE
    truth = {"scenario": "x", "ranks": [5], "phases": ["mlp"], "onset_step": 12}
    hit = {"action": "trigger", "ranks": [5], "phase": "mlp", "group_kind": "dp"}
    victim = {"action": "trigger", "ranks": [6], "phase": "tp_allreduce", "group_kind": "dp"}
    ok = score_pages(_er([hit]), truth, lay)
    assert ok.passed and ok.delay_windows == 2 and ok.precision == 1.0 and ok.recall == 1.0
    bad = score_pages(_er([hit, victim]), truth, lay)
    assert not bad.passed and bad.healthy_ranks == (6,) and bad.false_per_1000 == 10.0
    assert "1 healthy rank(s) paged" in bad.why and bad.precision == 0.5
    late = score_pages(_er([hit]), {**truth, "onset_step": 2}, lay)
    assert not late.passed and "delay 3 > 2" in late.why
    drift = score_pages(_er([hit]), {**truth, "onset_step": 2, "delay_windows": 3}, lay)
    assert drift.passed
    healthy = score_pages(_er([victim]), {"scenario": "mega-noise"}, lay)
    assert healthy.healthy and not healthy.passed and healthy.pages_healthy == 1
    # a host fault: a page naming the host's group (no ranks) counts as found
    nic = {
        "scenario": "n",
        "ranks": list(range(8, 16)),
        "phases": ["grads_reduce_scatter"],
        "host": "node0001",
        "onset_step": 20,
    }
    page = {
        "action": "trigger",
        "ranks": [],
        "summary": "host node0001 slow",
        "phase": "grads_reduce_scatter",
        "group_kind": "tp",
        "group_id": "pp0.dp1",
    }
    s = score_pages(_er([page]), nic, lay)
    assert s.found and s.passed and s.recall == 1.0


def test_engine_run_through_argus_diagnose_semantics() -> None:
    """A short stall run through the engine's roles: records streamed, pages scored."""
    run = SimRun.make("mega-data-stall", ranks=256, steps=12, seed=1, kernels=False)
    er = run_engine_on(run)
    assert er.n_step_records == 12 * 256 and er.n_kernel_batches == 0
    sc = score_pages(er, run.truth_dict(), run.layout)
    assert sc.scenario == "mega-data-stall" and sc.steps == 12
    assert sc.pages == sum(1 for a in er.alerts if a["action"] == "trigger")


KINETO = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kineto"


@pytest.mark.skipif(not KINETO.is_dir(), reason="the shared Kineto traces are not here")
def test_calibration_measures_real_kernel_spread() -> None:
    """The figures docs/simulator.md quotes for the single-rank ns-resolution trace."""
    from argus.sim.calibrate import kernel_spread

    s = kernel_spread(next(KINETO.glob("ns_resolution_trace_rank-0*.json.gz")), min_us=50)
    assert (s.steps, s.names) == (5, 44)
    assert 0.002 < s.launch_cv[1] < 0.008 and s.over_2x == 0.0
    with pytest.raises(ValueError, match="profiler steps"):
        kernel_spread(next(KINETO.glob("cpu_only*.json.gz")))


def test_a_job_wide_page_names_no_culprit() -> None:
    truth = {"scenario": "x", "ranks": [5], "phases": ["mlp"], "onset_step": 12}
    l1 = {"action": "trigger", "ranks": [], "group_kind": "job", "group_id": "all"}
    s = score_pages(_er([l1]), truth, DENSE)
    assert not s.found and s.pages_healthy == 1 and "naming no rank" in s.why
