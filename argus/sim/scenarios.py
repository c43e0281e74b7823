"""Fault scenarios with ground truth (paper cases 1-5 and two more).

Every scenario picks its culprits deterministically from the layout and the seed, and says
which level the paper expects to find it (``expected_levels``) and what a correct verdict
names (``ranks``, ``phases``, ``kernels`` or ``group``).

Two fault types on purpose, one per simulator: the paper scenarios' :class:`~argus.sim.model.
Fault` multiplies phases of the phase-level :class:`~argus.sim.model.TimingModel` (profiles
step, ramp, bursts, spikes), the ``mega-*`` scenarios' :class:`~argus.sim.mega.MegaFault` acts
on kernels, data loading or links of the 1F1B :class:`~argus.sim.mega.MegaModel` (kinds
kernels, compute, drift, data_stall, nic, stop). The two models share no step, so neither
fault means anything to the other; the faulty ``mega-*`` builders share their noise and
naming through ``_mega_fault``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from argus.sim.layout import Layout, LayoutError
from argus.sim.mega import GPUS_PER_HOST, LAYOUTS, MegaFault, Noise, host_of, kernel_names
from argus.sim.model import Fault

__all__ = [
    "MEGA_HEALTHY",
    "MEGA_SCENARIOS",
    "SCENARIOS",
    "GroundTruth",
    "Scenario",
    "build",
    "default_layout",
    "scenario_names",
]


@dataclass(frozen=True)
class GroundTruth:
    """What a correct diagnosis names."""

    scenario: str
    description: str
    ranks: tuple[int, ...] = ()
    phases: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    group: tuple[str, str] | None = None  # (kind, id) for group-wide faults
    onset_step: int | None = None
    fault_steps: tuple[int, ...] = ()  # for transient faults
    expected_levels: tuple[str, ...] = ()
    paper_case: int | None = None
    notes: str = ""
    host: str | None = None  # host-wide faults (a NIC): the host a correct page names
    delay_windows: int = 2  # bar: first correct page within this many windows of onset

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "description": self.description,
            "ranks": list(self.ranks),
            "phases": list(self.phases),
            "kernels": list(self.kernels),
            "group": {"kind": self.group[0], "id": self.group[1]} if self.group else None,
            "onset_step": self.onset_step,
            "fault_steps": list(self.fault_steps),
            "expected_levels": list(self.expected_levels),
            "paper_case": self.paper_case,
            "notes": self.notes,
            "host": self.host,
            "delay_windows": self.delay_windows,
        }


@dataclass(frozen=True)
class Scenario:
    name: str
    faults: tuple[Fault, ...]
    truth: GroundTruth
    kernel_factors: dict[str, dict[int, float]] = field(default_factory=dict)
    """Extra kernel-only slowdowns: kernel name -> {rank: factor} (from onset)."""
    noise: Noise | None = None
    """Set for the production-hard (``mega-*``) scenarios: run :class:`~argus.sim.mega.MegaModel`."""
    mega_faults: tuple[MegaFault, ...] = ()


def _pick(rng: np.random.Generator, world: int, lo: float = 0.3, hi: float = 0.7) -> int:
    return int(rng.integers(int(world * lo), max(int(world * hi), int(world * lo) + 1)))


def _healthy(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    return Scenario("healthy", (), GroundTruth("healthy", "no fault; natural jitter only"))


def _compute_straggler(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    if lay.dp < 2:
        raise LayoutError("compute-straggler needs dp >= 2 (two adjacent DP replicas)")
    a = _pick(rng, lay.world)
    c = lay.coords(a)
    if c["dp_rank"] == lay.dp - 1:
        a -= lay.tp * lay.cp * lay.ep  # step back one dp index
    b = a + lay.tp * lay.cp * lay.ep  # the next DP replica at the same (pp, tp, cp, ep)
    onset = steps // 4
    f = Fault((a, b), {"self_attention": 8.0, "mlp": 8.0}, onset=onset)
    return Scenario(
        "compute-straggler",
        (f,),
        GroundTruth(
            "compute-straggler",
            "two adjacent DP replicas run forward compute 8x slower (local GPU fault)",
            ranks=(a, b),
            phases=("self_attention", "mlp"),
            onset_step=onset,
            expected_levels=("L1", "L2"),
            paper_case=1,
        ),
    )


def _link_degradation(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    if lay.ep < 2 or lay.dp < 2:
        raise LayoutError("link-degradation needs ep >= 2 and dp >= 2 (EDP groups to compare)")
    r = _pick(rng, lay.world)
    gid = lay.group_id_of(r, "edp")
    idx = lay.group_index("edp")
    members = tuple(int(x) for x in np.flatnonzero(idx == idx[r]))
    onset = steps // 4
    f = Fault(members, {"expert_grad_sync": 6.0}, onset=onset)
    return Scenario(
        "link-degradation",
        (f,),
        GroundTruth(
            "link-degradation",
            "one EDP group's expert-gradient collectives 6x slower (PCIe fault); overlapped "
            "with backward, so iteration time stays flat",
            ranks=members,
            phases=("expert_grad_sync",),
            kernels=("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL",),
            group=("edp", gid),
            onset_step=onset,
            expected_levels=("L3",),
            paper_case=2,
        ),
    )


def _pp_stage_straggler(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    if lay.pp < 2:
        raise LayoutError("pp-stage-straggler needs pp >= 2")
    per_stage = lay.world // lay.pp
    r = (lay.pp - 1) * per_stage + int(rng.integers(0, per_stage))
    f = Fault((r,), {"backward": 1.9}, onset=0)
    return Scenario(
        "pp-stage-straggler",
        (f,),
        GroundTruth(
            "pp-stage-straggler",
            "a last-stage rank's backward compute 1.9x slower from the start; the pipeline "
            "waits for it and grad sync aligns iteration times (no L1 change point)",
            ranks=(r,),
            phases=("backward",),
            onset_step=0,
            expected_levels=("manual",),
            paper_case=3,
            notes="paper: not found by L1-L3; found by manual semantics inspection + L4",
        ),
    )


def _jit_stalls(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    n = max(2, steps // 300)
    at = tuple(
        sorted(int(s) for s in rng.choice(np.arange(steps // 5, steps - 10), n, replace=False))
    )
    faults = tuple(
        Fault(
            (int(rng.integers(0, lay.world)),),
            {"backward": 40.0},
            profile="spikes",
            at_steps=(s,),
            host_stall=True,
        )
        for s in at
    )
    return Scenario(
        "jit-stalls",
        faults,
        GroundTruth(
            "jit-stalls",
            "rare ~40x backward stalls on the host (JIT compilation of uncached shapes)",
            ranks=tuple(sorted({f.ranks[0] for f in faults})),
            phases=("backward",),
            fault_steps=at,
            expected_levels=("L1",),
            paper_case=4,
            notes="L2/L3 dilute single-step events by design; the culprit is host-side (L5)",
        ),
    )


def _masked_compute_straggler(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    if lay.ep < 2:
        raise LayoutError("masked-compute-straggler needs ep >= 2")
    r = _pick(rng, lay.world)
    onset = steps // 4
    f = Fault((r,), {"mlp": 2.5}, onset=onset)
    return Scenario(
        "masked-compute-straggler",
        (f,),
        GroundTruth(
            "masked-compute-straggler",
            "one rank's mlp 2.5x slower; its EP peers wait in the all-to-all, whose time on "
            "the straggler looks shorter",
            ranks=(r,),
            phases=("mlp",),
            onset_step=onset,
            expected_levels=("L2",),
            paper_case=5,
        ),
    )


def _thermal_throttle(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    r = _pick(rng, lay.world)
    onset = steps // 4
    f = Fault(
        (r,),
        {"self_attention": 1.6, "mlp": 1.6, "backward": 1.6, "optimizer": 1.6},
        onset=onset,
        profile="ramp",
        ramp=max(steps // 3, 1),
    )
    return Scenario(
        "thermal-throttle",
        (f,),
        GroundTruth(
            "thermal-throttle",
            "one GPU's clocks drift down: all its compute slows gradually to 1.6x",
            ranks=(r,),
            phases=("self_attention", "mlp", "backward", "optimizer"),
            onset_step=onset,
            expected_levels=("L1", "L2"),
        ),
    )


def _noisy_neighbour(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    r = _pick(rng, lay.world)
    onset = steps // 4
    f = Fault(
        (r,),
        {"self_attention": 1.8, "mlp": 1.8, "backward": 1.8},
        onset=onset,
        profile="bursts",
        period=max(steps // 6, 10),
        on=max(steps // 15, 5),
    )
    return Scenario(
        "noisy-neighbour",
        (f,),
        GroundTruth(
            "noisy-neighbour",
            "a co-located job steals one GPU's time in bursts (1.8x compute, intermittent)",
            ranks=(r,),
            phases=("self_attention", "mlp", "backward"),
            onset_step=onset,
            expected_levels=("L2",),
        ),
    )


# -- production-hard scenarios (issue 18): Megatron layouts, 1F1B, realistic noise -------------

NOISE_BASE = Noise()
PROD_NOISE = Noise(stage_skew=(1.15, 1.25), checkpoint_every=50, hiccup_p=0.03)
"""Every production property at once: the faulty ``mega-*`` scenarios run on it."""

MEGA_HEALTHY: dict[str, tuple[Noise, str]] = {
    "mega-noise": (NOISE_BASE, "kernel CV 3-8 %, 0.2 % outliers, GPU spread, data loading"),
    "mega-jitter": (Noise(heavy_cv=0.30), "heavy jitter: kernel CV 30 %"),
    "mega-uneven": (Noise(stage_skew=(1.15, 1.25)), "first stage +15 %, last +25 %"),
    "mega-checkpoint": (Noise(checkpoint_every=50), "a checkpoint every 50 steps, 8x slower"),
    "mega-hiccups": (
        Noise(hiccup_p=0.03),
        "3 % of steps: storage stall of every rank's data loading or congested DP collectives",
    ),
    "mega-prod": (PROD_NOISE, "all of the above but heavy jitter"),
}

_COMPUTE = ("self_attention", "mlp", "backward", "optimizer")
_GEMM = r"gemm"


def _need_dense(lay: Layout, name: str) -> None:
    if lay.pp < 2 or lay.tp < 2 or lay.dp < 2:
        raise LayoutError(f"{name} needs pp, tp and dp >= 2 (a Megatron layout, e.g. dense512)")


def _mega_onset(steps: int) -> int:
    return max(steps // 4, 1)


def _mega_rank(lay: Layout, rng: np.random.Generator) -> int:
    """A rank in the middle of the job (any stage), by the seed."""
    return _pick(rng, lay.world, 0.2, 0.8)


def _mega_healthy(name: str) -> Callable[[Layout, int, np.random.Generator], Scenario]:
    noise, what = MEGA_HEALTHY[name]

    def fn(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
        _need_dense(lay, name)
        return Scenario(name, (), GroundTruth(name, f"healthy: {what}"), noise=noise)

    return fn


def _mega_fault(truth: GroundTruth, *faults: MegaFault) -> Scenario:
    """A faulty ``mega-*`` scenario: ``faults`` on the production noise (:data:`PROD_NOISE`),
    named by its ground truth."""
    return Scenario(truth.scenario, (), truth, noise=PROD_NOISE, mega_faults=faults)


def _mega_gemm_gpu(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    _need_dense(lay, "mega-gemm-gpu")
    r, onset = _mega_rank(lay, rng), _mega_onset(steps)
    gemms = tuple(n for n in kernel_names(lay.ep > 1) if "gemm" in n)
    return _mega_fault(
        GroundTruth(
            "mega-gemm-gpu",
            "every GEMM kernel on one GPU 1.25x slower (a degraded GPU)",
            ranks=(r,),
            phases=("self_attention", "mlp", "backward"),
            kernels=gemms,
            onset_step=onset,
            expected_levels=("L2", "L3"),
        ),
        MegaFault("kernels", (r,), onset, factor=1.25, kernels=_GEMM),
    )


def _mega_gemm_kernel(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    _need_dense(lay, "mega-gemm-kernel")
    r, onset = _mega_rank(lay, rng), _mega_onset(steps)
    k = "grouped_gemm_bf16_fc1" if lay.ep > 1 else "sm90_xmma_gemm_bf16_fc1"
    return _mega_fault(
        GroundTruth(
            "mega-gemm-kernel",
            f"one GEMM kernel ({k}, forward MLP) 2x slower on one rank",
            ranks=(r,),
            phases=("mlp",),
            kernels=(k,),
            onset_step=onset,
            expected_levels=("L3", "L2"),
        ),
        MegaFault("kernels", (r,), onset, factor=2.0, kernels=f"^{k}$"),
    )


def _mega_data_stall(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    _need_dense(lay, "mega-data-stall")
    r, onset = _mega_rank(lay, rng), _mega_onset(steps)
    at: list[int] = []
    s = onset
    while s < steps:
        at.append(s)
        s += int(rng.integers(13, 18))  # every ~15 steps
    return _mega_fault(
        GroundTruth(
            "mega-data-stall",
            "one rank's data loading stalls 1.5 s every ~15 steps (its storage mount)",
            ranks=(r,),
            phases=("data_load",),
            onset_step=onset,
            fault_steps=tuple(at),
            expected_levels=("L1", "L2"),
            notes="intermittent: a correct page names the rank that arrived last in the "
            "stalled steps",
        ),
        MegaFault("data_stall", (r,), onset, stall_ms=1500.0, at_steps=tuple(at)),
    )


def _mega_slow_nic(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    _need_dense(lay, "mega-slow-nic")
    onset = _mega_onset(steps)
    h = _mega_rank(lay, rng) // GPUS_PER_HOST
    ranks = tuple(range(h * GPUS_PER_HOST, (h + 1) * GPUS_PER_HOST))
    phases = ["grads_reduce_scatter", "params_all_gather", "pp_recv_fwd", "pp_recv_bwd"]
    if lay.ep > 1:
        phases += ["moe_dispatch", "moe_combine"]
    return Scenario(
        "mega-slow-nic",
        (),
        GroundTruth(
            "mega-slow-nic",
            "one node's NIC degraded: inter-node transfers touching its 8 ranks 1.6x slower "
            "(their DP rings, pipeline p2p, MoE all-to-all slow evenly)",
            ranks=ranks,
            phases=tuple(phases),
            kernels=(
                "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL",
                "ncclDevKernel_AllGather_bf16_RING_LL",
                "ncclDevKernel_SendRecv",
            ),
            onset_step=onset,
            expected_levels=("L2", "L3"),
            host=host_of(ranks[0]),
            notes="a correct page names the host (or only its ranks)",
        ),
        noise=PROD_NOISE,
        mega_faults=(MegaFault("nic", ranks, onset, factor=1.6),),
    )


def _mega_thermal_drift(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    _need_dense(lay, "mega-thermal-drift")
    r, onset = _mega_rank(lay, rng), _mega_onset(steps)
    return _mega_fault(
        GroundTruth(
            "mega-thermal-drift",
            "one GPU throttles progressively: all its compute 0.4 % slower per step from onset",
            ranks=(r,),
            phases=_COMPUTE,
            onset_step=onset,
            expected_levels=("L2", "L3"),
            delay_windows=3,
        ),
        MegaFault("drift", (r,), onset, rate=0.004),
    )


def _mega_two_stragglers(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    _need_dense(lay, "mega-two-stragglers")
    onset = _mega_onset(steps)
    dp = lay.group_index("dp")
    a = _mega_rank(lay, rng)
    b = _mega_rank(lay, rng)
    while dp[b] == dp[a] or b // GPUS_PER_HOST == a // GPUS_PER_HOST:
        b = (b + 37) % lay.world
    return _mega_fault(
        GroundTruth(
            "mega-two-stragglers",
            "two independent stragglers in different DP groups: all compute 1.3x slower",
            ranks=tuple(sorted((a, b))),
            phases=_COMPUTE,
            onset_step=onset,
            expected_levels=("L2", "L3"),
        ),
        MegaFault("compute", (a,), onset, factor=1.3),
        MegaFault("compute", (b,), onset + 3, factor=1.3),
    )


def _mega_moe_expert(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    _need_dense(lay, "mega-moe-expert")
    if lay.ep < 2:
        raise LayoutError("mega-moe-expert needs ep >= 2 (the moe512 layout)")
    r, onset = _mega_rank(lay, rng), _mega_onset(steps)
    return _mega_fault(
        GroundTruth(
            "mega-moe-expert",
            "the grouped GEMMs of the expert on one GPU 1.3x slower (forward and backward)",
            ranks=(r,),
            phases=("mlp", "backward"),
            kernels=tuple(n for n in kernel_names(True) if n.startswith("grouped_gemm")),
            onset_step=onset,
            expected_levels=("L2", "L3"),
        ),
        MegaFault("kernels", (r,), onset, factor=1.3, kernels="^grouped_gemm"),
    )


def _mega_rank_stops(lay: Layout, steps: int, rng: np.random.Generator) -> Scenario:
    _need_dense(lay, "mega-rank-stops")
    r, onset = _mega_rank(lay, rng), _mega_onset(steps)
    return _mega_fault(
        GroundTruth(
            "mega-rank-stops",
            "one rank stops reporting at onset (its collector died; the job runs on)",
            ranks=(r,),
            onset_step=onset,
            expected_levels=("missing",),
        ),
        MegaFault("stop", (r,), onset),
    )


MEGA_SCENARIOS: dict[str, Callable[[Layout, int, np.random.Generator], Scenario]] = {
    **{name: _mega_healthy(name) for name in MEGA_HEALTHY},
    "mega-gemm-gpu": _mega_gemm_gpu,
    "mega-gemm-kernel": _mega_gemm_kernel,
    "mega-data-stall": _mega_data_stall,
    "mega-slow-nic": _mega_slow_nic,
    "mega-thermal-drift": _mega_thermal_drift,
    "mega-two-stragglers": _mega_two_stragglers,
    "mega-moe-expert": _mega_moe_expert,
    "mega-rank-stops": _mega_rank_stops,
}


def default_layout(name: str, ranks: int | None) -> Layout | None:
    """The layout a ``mega-*`` scenario runs on by default (512: dense512, or moe512 for
    ``mega-moe-expert``; 2,048: dense2048; 256: dense256 / moe256, the quick sizes);
    None for the other scenarios.

    Raises
    ------
    LayoutError
        A ``mega-*`` scenario at a size with no named layout.
    """
    if name not in MEGA_SCENARIOS:
        return None
    n = ranks or 512
    kind = "moe" if name == "mega-moe-expert" else "dense"
    key = f"{kind}{n}"
    if key not in LAYOUTS:
        raise LayoutError(
            f"{name}: no default layout for {n} ranks; use 256, 512 or 2048 (moe: 256, 512) or give "
            "--layout (e.g. dp=16,tp=8,pp=4)"
        )
    return LAYOUTS[key]


SCENARIOS: dict[str, Callable[[Layout, int, np.random.Generator], Scenario]] = {
    "healthy": _healthy,
    "compute-straggler": _compute_straggler,
    "link-degradation": _link_degradation,
    "pp-stage-straggler": _pp_stage_straggler,
    "jit-stalls": _jit_stalls,
    "masked-compute-straggler": _masked_compute_straggler,
    "thermal-throttle": _thermal_throttle,
    "noisy-neighbour": _noisy_neighbour,
    **MEGA_SCENARIOS,
}


def scenario_names() -> list[str]:
    return list(SCENARIOS)


def build(name: str, layout: Layout, steps: int, seed: int = 0) -> Scenario:
    """The scenario ``name`` for a layout and run length.

    Raises
    ------
    LayoutError
        Unknown scenario, or a layout the scenario cannot run on (the message says why).
    """
    try:
        fn = SCENARIOS[name]
    except KeyError:
        raise LayoutError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None
    rng = np.random.default_rng([seed, 7])
    return fn(layout, steps, rng)
