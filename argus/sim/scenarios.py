"""Fault scenarios with ground truth (paper cases 1-5 and two more).

Every scenario picks its culprits deterministically from the layout and the seed, and says
which level the paper expects to find it (``expected_levels``) and what a correct verdict
names (``ranks``, ``phases``, ``kernels`` or ``group``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from argus.sim.layout import Layout, LayoutError
from argus.sim.model import Fault

__all__ = ["SCENARIOS", "GroundTruth", "Scenario", "build", "scenario_names"]


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
        }


@dataclass(frozen=True)
class Scenario:
    name: str
    faults: tuple[Fault, ...]
    truth: GroundTruth
    kernel_factors: dict[str, dict[int, float]] = field(default_factory=dict)
    """Extra kernel-only slowdowns: kernel name -> {rank: factor} (from onset)."""


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


SCENARIOS: dict[str, Callable[[Layout, int, np.random.Generator], Scenario]] = {
    "healthy": _healthy,
    "compute-straggler": _compute_straggler,
    "link-degradation": _link_degradation,
    "pp-stage-straggler": _pp_stage_straggler,
    "jit-stalls": _jit_stalls,
    "masked-compute-straggler": _masked_compute_straggler,
    "thermal-throttle": _thermal_throttle,
    "noisy-neighbour": _noisy_neighbour,
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
