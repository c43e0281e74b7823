"""Per-step timing model of a synchronous MoE training job, vectorised over ranks.

One step runs, on every rank (ms, before noise and faults)::

    self_attention 10 -> tp_allreduce 1 (TP) -> mlp 14 -> ep_alltoall 2.5 (EP)
    -> backward 40 [+ pp_p2p wait (PP chain)] (expert_grad_sync 4 (EDP) overlapped)
    -> dp_grad_sync 6 (DP) -> optimizer 3

Collectives synchronise: a collective ends at the latest arrival in its group plus its own
transfer time, so each rank's *measured* collective time is ``end - its arrival``; a late
rank's collective looks shorter and its peers' longer (paper case 5). With ``pp > 1`` the
measured ``backward`` span covers the wait for the slowest stage of the pipeline chain and
``pp_p2p`` is that wait (paper case 3: grad sync aligns iteration times). The expert-grad
sync overlaps the backward pass, so slowing it leaves the iteration time flat until it
outgrows the backward (paper case 2). All ranks start each step together (the next step's
collectives synchronise the job).

Noise: per-rank static factor (lognormal σ 1 %), per-step job-wide factor on compute (σ 2 %,
data-dependent work), per-rank per-step noise (σ 2 % compute, 5 % comm).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from argus.sim.layout import Layout

__all__ = ["BASE_MS", "PHASES", "Fault", "PhaseSpec", "StepTimes", "TimingModel"]


@dataclass(frozen=True)
class PhaseSpec:
    name: str
    stream_kind: str  # compute | comm | p2p
    group: str | None  # group kind the collective synchronises; None for compute
    needs: str | None = None  # layout dim that must be > 1 for the phase to exist


PHASES: tuple[PhaseSpec, ...] = (
    PhaseSpec("self_attention", "compute", None),
    PhaseSpec("tp_allreduce", "comm", "tp", "tp"),
    PhaseSpec("mlp", "compute", None),
    PhaseSpec("ep_alltoall", "comm", "ep", "ep"),
    PhaseSpec("backward", "compute", None),
    PhaseSpec("pp_p2p", "p2p", "pp", "pp"),
    PhaseSpec("expert_grad_sync", "comm", "edp", "ep"),
    PhaseSpec("dp_grad_sync", "comm", "dp"),
    PhaseSpec("optimizer", "compute", None),
)

BASE_MS: Mapping[str, float] = {
    "self_attention": 10.0,
    "tp_allreduce": 1.0,
    "mlp": 14.0,
    "ep_alltoall": 2.5,
    "backward": 40.0,
    "pp_p2p": 0.3,
    "expert_grad_sync": 4.0,
    "dp_grad_sync": 6.0,
    "optimizer": 3.0,
}


@dataclass(frozen=True)
class Fault:
    """A slowdown of some ranks' phases over some steps.

    Attributes
    ----------
    ranks : tuple of int
    factors : mapping phase -> float
        Multiplier at full strength (e.g. ``{"mlp": 3.0}``).
    onset : int
        First affected step.
    profile : str
        ``step`` (constant from onset), ``ramp`` (linear to full strength over ``ramp``
        steps), ``bursts`` (full strength ``on`` steps out of every ``period``), ``spikes``
        (only at ``at_steps``).
    host_stall : bool
        The time is spent on the host (JIT, GC): kernels keep their durations.
    """

    ranks: tuple[int, ...]
    factors: Mapping[str, float]
    onset: int = 0
    profile: str = "step"
    ramp: int = 1
    period: int = 50
    on: int = 15
    at_steps: tuple[int, ...] = ()
    host_stall: bool = False

    def strength(self, step: int) -> float:
        """0..1 strength at ``step``."""
        if self.profile == "spikes":
            return 1.0 if step in self.at_steps else 0.0
        if step < self.onset:
            return 0.0
        k = step - self.onset
        if self.profile == "ramp":
            return min(1.0, (k + 1) / max(self.ramp, 1))
        if self.profile == "bursts":
            return 1.0 if k % self.period < self.on else 0.0
        return 1.0


@dataclass
class StepTimes:
    """One simulated step for all ranks.

    ``start_ms``/``dur_ms``: phase -> (R,) offsets from the step start and durations, ms.
    ``kernel_ms``: phase -> (R,) time the phase's kernels run (differs from the phase for
    host stalls and pipeline waits), ms. ``end_ms``: (R,) end of each rank's step, ms.
    """

    step: int
    phases: tuple[PhaseSpec, ...]
    start_ms: dict[str, np.ndarray]
    dur_ms: dict[str, np.ndarray]
    kernel_ms: dict[str, np.ndarray]
    end_ms: np.ndarray


def _gmax(x: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    buf = np.full(n, -np.inf)
    np.maximum.at(buf, idx, x)
    return buf[idx]


@dataclass
class TimingModel:
    """Vectorised step generator for a layout and a list of faults."""

    layout: Layout
    faults: tuple[Fault, ...] = ()
    seed: int = 0
    rank_sigma: float = 0.01
    job_sigma: float = 0.02
    compute_sigma: float = 0.02
    comm_sigma: float = 0.05
    _rng: np.random.Generator = field(init=False, repr=False)
    _static: np.ndarray = field(init=False, repr=False)
    _groups: dict[str, tuple[np.ndarray, int]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)
        self._static = np.exp(self._rng.normal(0.0, self.rank_sigma, self.layout.world))
        self._groups = {}
        for kind in ("tp", "ep", "pp", "edp", "dp"):
            idx = self.layout.group_index(kind)
            self._groups[kind] = (idx, int(idx.max()) + 1)

    @property
    def phases(self) -> tuple[PhaseSpec, ...]:
        lay = self.layout
        return tuple(p for p in PHASES if p.needs is None or getattr(lay, p.needs) > 1)

    def _factor(self, phase: str, step: int, *, for_kernels: bool = False) -> np.ndarray:
        f = np.ones(self.layout.world)
        for fault in self.faults:
            if phase not in fault.factors or (for_kernels and fault.host_stall):
                continue
            s = fault.strength(step)
            if s > 0:
                idx = np.asarray(fault.ranks, dtype=np.int64)
                f[idx] *= 1.0 + (fault.factors[phase] - 1.0) * s
        return f

    def step(self, step: int) -> StepTimes:
        """Simulate one step (call in increasing step order; the noise stream is shared)."""
        rng, n = self._rng, self.layout.world
        job = float(np.exp(rng.normal(0.0, self.job_sigma)))
        names = {p.name for p in self.phases}

        def compute(name: str) -> tuple[np.ndarray, np.ndarray]:
            noise = np.exp(rng.normal(0.0, self.compute_sigma, n))
            base = BASE_MS[name] * self._static * job * noise
            return base * self._factor(name, step), base * self._factor(
                name, step, for_kernels=True
            )

        def transfer(name: str) -> np.ndarray:
            noise = np.exp(rng.normal(0.0, self.comm_sigma, n))
            return BASE_MS[name] * noise * self._factor(name, step)

        start: dict[str, np.ndarray] = {}
        dur: dict[str, np.ndarray] = {}
        kern: dict[str, np.ndarray] = {}

        def collective(name: str, kind: str, arrive: np.ndarray) -> np.ndarray:
            idx, g = self._groups[kind]
            end = _gmax(arrive, idx, g) + transfer(name)
            start[name] = arrive
            dur[name] = end - arrive
            kern[name] = dur[name]  # an NCCL kernel spins while it waits for peers
            return end

        t = np.zeros(n)
        d, k = compute("self_attention")
        start["self_attention"], dur["self_attention"], kern["self_attention"] = t, d, k
        t = t + d
        if "tp_allreduce" in names:
            t = collective("tp_allreduce", "tp", t)
        d, k = compute("mlp")
        start["mlp"], dur["mlp"], kern["mlp"] = t, d, k
        t = t + d
        if "ep_alltoall" in names:
            t = collective("ep_alltoall", "ep", t)
        bwd, bwd_k = compute("backward")
        bwd_start = t
        if "pp_p2p" in names:
            idx, g = self._groups["pp"]
            span = _gmax(bwd, idx, g)
            wait = span - bwd + transfer("pp_p2p")
            start["pp_p2p"] = t + bwd
            dur["pp_p2p"] = wait
            kern["pp_p2p"] = wait
            bwd_end = t + bwd + wait  # the backward span closes when the last recv lands
            dur["backward"] = bwd_end - t
        else:
            bwd_end = t + bwd
            dur["backward"] = bwd
        start["backward"], kern["backward"] = bwd_start, bwd_k
        t = bwd_end
        if "expert_grad_sync" in names:
            arrive = bwd_start + 0.2 * bwd
            idx, g = self._groups["edp"]
            end = _gmax(arrive, idx, g) + transfer("expert_grad_sync")
            start["expert_grad_sync"] = arrive
            dur["expert_grad_sync"] = end - arrive
            kern["expert_grad_sync"] = dur["expert_grad_sync"]
            t = np.maximum(t, end)
        t = collective("dp_grad_sync", "dp", t)
        d, k = compute("optimizer")
        start["optimizer"], dur["optimizer"], kern["optimizer"] = t, d, k
        t = t + d
        return StepTimes(step, self.phases, start, dur, kern, t)
