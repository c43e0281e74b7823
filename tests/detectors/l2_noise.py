"""A production-like noise generator for L2 (issue 18): group windows of one data-parallel job.

One step of every rank (ms, before noise; an ~880 ms step)::

    data_load 8 (host) -> forward 260 -> lm_head 24 -> backward 480
    -> grads_reduce_scatter 60 (DP collective) -> optimizer 10 -> param_all_gather 30 (DP)

Compute phases are sums of kernels (``PHASES``: kernel count and CV), so their phase-level
spread comes from the kernels: log-normal kernel durations (CV 3-8 %; 30 % in the
optimizer), 0.2 % of kernels 1.5-4x slower (heavy tail), a static per-GPU speed factor
(1.5 %), a per-(rank, step) factor (1 %). ``data_load`` is log-normal with sigma 0.25 per
step. ``jitter`` adds a log-normal per-(rank, step, phase) factor to the compute and host
phases named in ``jitter_on`` (default: all of them; the issue's stress: sigma 0.10-0.25). Collectives end at the group's last arrival
plus their transfer, so each rank's measured collective is its wait plus the transfer.
Ranks form groups of ``group`` consecutive ranks (the DP comparison group); iteration times
are per group (all members end the step together).

Faults (``Fault``): a factor on one rank's phase, on one kernel of a phase, an added stall
(ms) in some steps, or a drift (a factor growing by ``drift`` per step from ``onset``: a GPU
heating up).

Healthy events every rank shares (issue 18): ``hiccups`` (a share of the steps where either
every rank's data loading stalls, 0.2-1.5 s each, or the DP collectives are congested, 2-4x)
and a checkpoint every ``checkpoint_every`` steps (every phase of every rank 8x).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from argus.detectors.l2 import GroupWindow

__all__ = ["PHASES", "SHORT", "Fault", "NoiseJob", "PhaseSpec", "group_windows", "simulate"]


@dataclass(frozen=True)
class PhaseSpec:
    """One phase: ``kernels`` kernels of mean ``base_ms / kernels`` (the first takes
    ``lead`` of the phase when > 0), log-normal CV ``cv``."""

    name: str
    stream_kind: str  # compute | host | comm
    base_ms: float
    kernels: int = 1
    cv: float = 0.05
    lead: float = 0.0


PHASES: tuple[PhaseSpec, ...] = (
    PhaseSpec("data_load", "host", 8.0, 1, 0.25),
    PhaseSpec("forward", "compute", 260.0, 80, 0.05),
    PhaseSpec("lm_head", "compute", 24.0, 2, 0.03, lead=0.85),  # one GEMM dominates
    PhaseSpec("backward", "compute", 480.0, 120, 0.05),
    PhaseSpec("grads_reduce_scatter", "comm", 60.0, 1, 0.05),
    PhaseSpec("optimizer", "compute", 10.0, 6, 0.30),
    PhaseSpec("param_all_gather", "comm", 30.0, 1, 0.05),
)

SHORT = ("data_load", "lm_head", "optimizer")
"""The short phases (8-24 ms of an ~880 ms step): where the issue's per-step jitter lives."""


@dataclass(frozen=True)
class Fault:
    """A slowdown of ``rank``: ``factor`` on ``phase`` (or only on its kernel ``kernel``),
    or ``stall_ms`` added to the phase; in ``steps`` (None: every step)."""

    rank: int
    phase: str
    factor: float = 1.0
    kernel: int | None = None
    stall_ms: float = 0.0
    steps: Sequence[int] | None = None
    drift: float = 0.0
    onset: int = 0


@dataclass(frozen=True)
class NoiseJob:
    """Durations of a simulated job: ``durations_ms`` (R, S, P), ``iter_ms`` (R, S)."""

    durations_ms: np.ndarray
    iter_ms: np.ndarray
    phases: tuple[PhaseSpec, ...]
    group: int
    faults: tuple[Fault, ...] = field(default_factory=tuple)


def simulate(
    ranks: int = 512,
    steps: int = 120,
    *,
    group: int = 16,
    jitter: float = 0.0,
    jitter_on: Sequence[str] | None = None,
    faults: Sequence[Fault] = (),
    seed: int = 0,
    gpu_spread: float = 0.015,
    rank_step: float = 0.01,
    outlier_rate: float = 0.002,
    phases: tuple[PhaseSpec, ...] = PHASES,
    hiccups: float = 0.0,
    checkpoint_every: int = 0,
) -> NoiseJob:
    """Simulate ``ranks`` x ``steps`` phase durations (ms); see the module docstring."""
    rng = np.random.default_rng(seed)
    r, s = ranks, steps
    gpu = np.exp(rng.normal(0.0, gpu_spread, (r, 1)))
    rs = np.exp(rng.normal(0.0, rank_step, (r, s)))
    work = np.zeros((r, s, len(phases)))
    for j, ph in enumerate(phases):
        if ph.stream_kind == "comm":
            work[:, :, j] = ph.base_ms * np.exp(rng.normal(0.0, ph.cv, (r, s)))
            continue
        k = ph.kernels
        mean = np.full(k, ph.base_ms / k)
        if ph.lead > 0 and k > 1:
            mean[0] = ph.base_ms * ph.lead
            mean[1:] = ph.base_ms * (1 - ph.lead) / (k - 1)
        sig = np.sqrt(np.log1p(ph.cv**2))
        kern = mean * np.exp(rng.normal(-0.5 * sig**2, sig, (r, s, k)))
        hit = rng.random((r, s, k)) < outlier_rate
        kern = np.where(hit, kern * rng.uniform(1.5, 4.0, (r, s, k)), kern)
        for f in faults:
            if f.phase == ph.name and f.kernel is not None:
                kern[f.rank, _steps(f, s), f.kernel] *= f.factor
        d = kern.sum(axis=2)
        if ph.stream_kind == "compute":
            d = d * gpu * rs
        if jitter > 0 and (jitter_on is None or ph.name in jitter_on):
            d = d * np.exp(rng.normal(0.0, jitter, (r, s)))
        work[:, :, j] = d
    for f in faults:
        j = [p.name for p in phases].index(f.phase)
        if f.kernel is None:
            work[f.rank, _steps(f, s), j] *= f.factor
        work[f.rank, _steps(f, s), j] += f.stall_ms
        if f.drift:
            age = np.maximum(np.arange(s) - f.onset, 0)
            work[f.rank, :, j] *= (1.0 + f.drift) ** age
    hic = np.flatnonzero(rng.random(s) < hiccups)
    kinds = [p.stream_kind for p in phases]
    for step in hic:  # every rank: a storage stall of data loading, or congested collectives
        if rng.random() < 0.5 and "host" in kinds:
            work[:, step, kinds.index("host")] += rng.uniform(200.0, 1500.0, r)
        else:
            comm = [j for j, k in enumerate(kinds) if k == "comm"]
            work[:, step, comm] *= rng.uniform(2.0, 4.0)
    if checkpoint_every > 0:
        work[:, checkpoint_every - 1 :: checkpoint_every] *= 8.0
    dur = work.copy()
    t = np.zeros((r, s))  # each rank's clock inside the step, ms
    g = np.arange(r) // group
    for j, ph in enumerate(phases):
        if ph.stream_kind == "comm":  # ends at the group's last arrival plus the transfer
            last = np.zeros((g.max() + 1, s))
            np.maximum.at(last, g, t)
            end = last[g] + work[:, :, j]
            dur[:, :, j] = end - t
            t = end
        else:
            t = t + work[:, :, j]
    it = np.zeros((g.max() + 1, s))
    np.maximum.at(it, g, t)
    return NoiseJob(dur, it[g] + 2.0, phases, group, tuple(faults))


def _steps(f: Fault, s: int) -> np.ndarray:
    return np.arange(s) if f.steps is None else np.asarray(f.steps, dtype=np.int64)


def group_windows(
    job: NoiseJob, width: int, *, slide: int | None = None, first: int = 0
) -> Iterator[GroupWindow]:
    """Every group's windows of ``width`` steps, every ``slide`` steps (default: tumbling)."""
    r, s, _ = job.durations_ms.shape
    slide = slide or width
    ranks = np.arange(r)
    for a in range(first, s - width + 1, slide):
        for g0 in range(0, r, job.group):
            idx = slice(g0, g0 + job.group)
            yield GroupWindow(
                job="noise",
                group_kind="dp",
                group_id=f"g{g0 // job.group}",
                ranks=ranks[idx],
                steps=np.arange(a, a + width),
                phases=tuple(p.name for p in job.phases),
                stream_kinds=tuple(p.stream_kind for p in job.phases),
                durations_ns=job.durations_ms[idx, a : a + width] * 1e6,
                iter_ns=job.iter_ms[idx, a : a + width] * 1e6,
            )
