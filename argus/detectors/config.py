"""Detector thresholds: one frozen dataclass per level, overridable from settings.

Every default says where it comes from: **paper** (arXiv 2606.20374, via the notes in
``shared/notes/paper.md``), **DUO** (a third-party reimplementation's choice) or **ours**
(reasoned here; the reason is in the field comment). Override any field from the
``[detectors]`` settings section, e.g.::

    [detectors.l2]
    z = 4.0
    [detectors.l3]
    iqr_alpha = 2.0

or from the environment: ``ARGUS_DETECTORS__L2__Z=4``. Each level's value ranges are a table
(``_L1_RANGES`` ...) checked by :func:`argus.config.check_ranges`, so a bad value reads as in
every section: ``detectors.l2.alpha must be in (0, 1), got 1.0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from argus.config import NON_NEGATIVE, POSITIVE, Range, build_config, check_ranges
from argus.errors import DetectorConfigError

__all__ = [
    "DetectorsConfig",
    "FunnelConfig",
    "L1Config",
    "L2Config",
    "L3Config",
    "config_from_mapping",
]


_AT_LEAST_1 = Range(ge=1)
_PROBABILITY = Range(gt=0, lt=1)
#: each level's value ranges (:func:`argus.config.check_ranges`), checked in this order
_L1_RANGES = {
    **dict.fromkeys(("window", "min_history", "cp_min_segment", "smooth"), POSITIVE),
    **dict.fromkeys(("spike_ratio", "cp_min_ratio"), _AT_LEAST_1),
    **dict.fromkeys(("merge_gap", "cp_min_effect"), NON_NEGATIVE),
}
_L2_RANGES = {
    **dict.fromkeys(("z", "mad_floor", "min_steps", "burst_z"), POSITIVE),
    **dict.fromkeys(
        (
            "min_excess",
            "min_effect",
            "cv",
            "min_abs_ms",
            "late_step_share",
            "min_step_share",
            "spike_step_share",
        ),
        NON_NEGATIVE,
    ),
    "pair_ratio": _AT_LEAST_1,
    "alpha": _PROBABILITY,
    "outlier_ratio": Range(gt=1),
}
_L3_RANGES = {
    **dict.fromkeys(
        ("iqr_alpha", "min_rel_w1", "min_rel_w1_comm", "min_median_ratio"), NON_NEGATIVE
    ),
    **dict.fromkeys(("n_probs", "pairwise_max", "min_events"), POSITIVE),
    **dict.fromkeys(("min_ranks", "min_groups", "rank_test_min_ranks"), Range(ge=2)),
    **dict.fromkeys(("group_alpha", "rank_alpha"), _PROBABILITY),
}
_FUNNEL_RANGES = {
    "trigger_confidence": Range(gt=0, le=1),
    **dict.fromkeys(("resolve_after", "l3_only_persistence"), POSITIVE),
    "job_regression_min_s": NON_NEGATIVE,
}


@dataclass(frozen=True, kw_only=True)
class L1Config:
    """Iteration-time detector (L1).

    Attributes
    ----------
    window : int
        Trailing steps forming the spike baseline (median of the previous ``window`` steps).
        8 (DUO's choice; paper value NOT FOUND).
    spike_ratio : float
        A step is a spike when ``time / baseline >= spike_ratio``. 2.0 (paper: spikes
        "above 2x baseline" in the motivation section).
    merge_gap : int
        Spikes at most this many steps apart form one jitter window. 2 (ours).
    min_history : int
        Steps needed before any L1 verdict. 8 (ours: one baseline window).
    cp_min_ratio : float
        A change point is a regression when the median after / median before
        ``>= cp_min_ratio``. 1.10 (ours: a 10 % persistent slowdown matters at 4,096 GPUs;
        DUO uses 1.5, which misses thermal drift).
    cp_min_effect : float
        ... and the shift exceeds ``cp_min_effect`` robust standard deviations of the step
        noise (MAD of first differences x 1.4826 / sqrt 2). 6.0 (ours: no false change point over 1,000 healthy steps).
    cp_min_segment : int
        Steps required on each side of a change point. 8 (ours).
    smooth : int
        Width of the running median applied before change-point search, so isolated
        spikes (jitter) do not make a change point. 5 (ours).
    """

    window: int = 8
    spike_ratio: float = 2.0
    merge_gap: int = 2
    min_history: int = 8
    cp_min_ratio: float = 1.10
    cp_min_effect: float = 6.0
    cp_min_segment: int = 8
    smooth: int = 5

    def __post_init__(self) -> None:
        check_ranges(self, "detectors.l1", _L1_RANGES, error=DetectorConfigError)


@dataclass(frozen=True, kw_only=True)
class L2Config:
    """Phase-level straggler detector (L2).

    A rank is named in a phase when its excess is beyond chance (``alpha``) and material
    (``min_excess``, ``min_abs_ms``, ``min_step_share``), or when one of its steps is a burst
    beyond noise (``outlier_ratio``, ``burst_z``) that is material over the window; see
    :mod:`argus.detectors.l2`.

    Attributes
    ----------
    alpha : float
        Family-wise false-naming rate of one group window: Holm over its (rank, phase) tests
        of the exact within-step permutation test. 0.001 (ours; the previous robust-z gate,
        ``z >= 3.5`` per test, was calibrated neither for R x P tests per window nor for the
        phase's noise: 1,198 / 1,481 / 1,880 false (rank, window) pairs per 512-rank,
        120-step job at jitter sigma 0.10 / 0.15 / 0.25 in short phases, now 0
        (``bench/bench_l2_noise.py``). Lower than ``l3.rank_alpha`` (0.01) because L2 judges
        every group after every step: ~3,700 group windows per such job).
    min_step_share : float
        A named rank's excess (ns per step) must be at least this share of the window's
        median iteration time (when the window carries iteration times): a phase is judged by
        what it costs the step, not by its own size. 0.02 (ours: 2 ms in an 8 ms
        ``data_load`` of an 880 ms step is 0.2 %; a rank 1.25x slower in a phase of 10 % of
        the step costs 2.5 %).
    outlier_ratio : float
        The largest single-step slowdown noise makes (a kernel 1.5-4x slower): per-step
        scores are clipped at ``log(outlier_ratio)``, and a burst must exceed it. 4.0 (ours:
        the issue's heavy tail, 0.2 % of kernels 1.5-4x).
    burst_z : float
        A burst is a step ``log(d / step median) >= log(outlier_ratio) + burst_z * sigma``,
        ``sigma`` the robust (MAD) sigma of the phase's log ratios in the window. 6.0 (ours:
        a 1.5 s stall of an 8 ms ``data_load`` with sigma 0.25 is at 15; a 4x outlier on
        top of 0.25-sigma jitter needs a 6-sigma draw).
    z : float
        Robust z-score, ``(x - median) / (1.4826 * MAD)`` of the ranks' window medians:
        evidence, and the gate of the collectives' waiting *victims* (evidence only). 3.5
        (ours, Iglewicz-Hoaglin). No longer a gate for naming a rank: it is per test and
        depends on the spread of 16 medians, so it named ~1 rank in 1,000 per phase.
    min_effect : float
        ... and that excess (the mean log ratio to the step median over the window's steps
        but the worst) is at least this many robust sigmas of the phase's per-step log ratios
        in the window. 2.5 (ours: where one step's noise is as large as a straggler's excess,
        a phase that is the whole step with per-step jitter sigma 0.25, a 4-step window cannot
        tell the straggler from the rank that drew the slowest steps; a GEMM phase's per-step
        noise is 1-2 %, so a 1.25x slowdown is at ~15).
    min_excess : float
        ... and the rank's excess (ns per step, mean over the window's steps without its
        worst one) is at least this fraction of the phase's median duration. 0.15 (ours: a
        persistent excess that is statistically clear but a few % of its phase is the
        healthy per-GPU speed spread, 1-2 %; L3 sees smaller effects).
    cv : float
        CV of the group's per-rank window medians above which the phase is reported
        *imbalanced* (evidence only). 0.15 (DUO). Not a gate for naming ranks: one
        straggler in R ranks moves the CV by about 1/sqrt(R), so at 4,096 ranks a CV gate
        would hide every single straggler.
    mad_floor : float
        MAD floor as a fraction of the median (of the log ratios for bursts), so ties
        (MAD = 0) give finite z. 0.01 (ours).
    pair_ratio : float
        Groups of 2 ranks have no robust spread; the slower is named when it is slower in
        every step and ``slower / faster >= pair_ratio`` (window medians). 1.5 (ours).
    min_abs_ms : float
        ... and the excess is at least this much, ms per step. 1.0 (ours: below 1 ms per
        step a phase-level verdict is not actionable, and pipeline/collective waits of a
        few hundred us are noise).
    min_steps : int
        Steps with data a rank needs in the window to be judged. 2 (ours: one step is no
        test of persistence; at 2,048 ranks, tp 8 x pp 4 x dp 64, a job's first step alone
        named 7 healthy ranks 1.17-1.27x their DP peers in ``mlp`` over 200 healthy steps,
        and none once two steps were asked for). Step-time spikes are judged apart.
    late_step_share : float
        ``min_step_share`` for collectives: a late arrival must have shortened its
        collective by at least this share of the median iteration time. 0.10 (ours: a 1-2 %
        per-GPU speed spread makes the slowest GPU of a 16-rank group arrive 3-5 % of the
        step after the median one, in every step; 0.05 named such GPUs).
    late_arrival : bool
        Name ranks whose *collective* phase is markedly shorter than the group's (they
        arrived late; their peers waited, paper case 5). True (paper case 5).
    spike_step_share : float
        Step-time spikes (:func:`argus.detectors.l2.spikes`): a rank is named for one step
        when its own time (non-collective phases) exceeds the step's median by at least this
        share of the window's median iteration time, beyond ``burst_z`` robust sigmas, the
        step's time rose with it and no other rank explains it. 0.25 (ours: a 1.5 s
        data-loading stall in an 880 ms step is 1.7; a 4x outlier of the largest single GEMM,
        ~20 ms, is 0.07).
    """

    alpha: float = 0.001
    min_step_share: float = 0.02
    outlier_ratio: float = 4.0
    burst_z: float = 6.0
    z: float = 3.5
    min_excess: float = 0.10
    min_effect: float = 2.5
    cv: float = 0.15
    mad_floor: float = 0.01
    pair_ratio: float = 1.5
    min_abs_ms: float = 1.0
    min_steps: int = 2
    late_step_share: float = 0.10
    late_arrival: bool = True
    spike_step_share: float = 0.25

    def __post_init__(self) -> None:
        check_ranges(self, "detectors.l2", _L2_RANGES, error=DetectorConfigError)


@dataclass(frozen=True, kw_only=True)
class L3Config:
    """Kernel-distribution detector (L3).

    Attributes
    ----------
    iqr_alpha : float
        IQR fence multiplier: flag ``score > Q3 + alpha * (Q3 - Q1)``. 3.0 (Tukey's "far
        out"; paper value NOT FOUND). Ours, measured: one L3 block judges ~150 (kernel,
        stream) groups x every rank, so the per-rank false-flag rate is multiplied by the
        kernel count. On 64 healthy i.i.d. ranks of the 150-kernel synthetic mix (3,000
        events per rank-step, 10 steps) 1.5 flagged 120 rank-kernels (83 even on the raw
        samples) vs 20 with 3.0, while ranks slowed 1.2-1.5x were still flagged on 154 of
        their 205 kernels (167 with 1.5).
    min_rel_w1 : float
        ... and ``score >= min_rel_w1 * mean(Q_ref)``, i.e. the rank's W1 to the reference is
        at least this fraction of the reference mean duration. 0.10 (ours: the fence alone
        flags ~0.7 % of a healthy normal population, i.e. ~28 of 4,096 ranks).
    min_rel_w1_comm : float
        ``min_rel_w1`` for collective kernels (NCCL, comm/p2p streams). 1.0 (ours: a
        collective kernel's duration includes waiting for its peers, so it varies across
        ranks by its own size; only a collective at least ~2x slower is named).
    min_median_ratio : float
        ... and ``score >= min_median_ratio * median(score)``. 2.0 (DUO's extra gate).
    n_probs : int
        Size M of the probability grid of quantile functions. 64 (ours).
    pairwise_max : int
        Groups with at most this many ranks also get the full R x R W1 matrix (for display).
        64 (ours).
    min_ranks : int
        Groups with fewer ranks are not judged within the group (the fence needs a
        population). 4 (ours).
    min_groups : int
        Group-vs-group comparison needs at least this many groups. 3 (ours).
    group_alpha : float
        Family-wise false-flag rate of one group-vs-group comparison (one scope group, one
        (kernel, stream), one partition kind): a group is named only when it is slower by
        ``min_rel_w1`` (``min_rel_w1_comm``) of the reference mean and the exact chance that
        its ranks are that slow together (all of them, or all but one, among the scope's
        slowest by mean slowdown) is at most ``group_alpha / G`` over the ``G`` groups
        compared (``argus.detectors.l3.slow_together_p``). 0.01 (ours: replaces an IQR fence
        over the group scores and a 3x intra-group-spread ratio that were not calibrated for
        32 EP groups per (scope, kernel): the soak's healthy 1,024-rank workload gave
        ~120 group findings per window and 8 group pages in 12 windows, now 17 findings in
        12 windows and 0 pages (``bench/bench_l3_groups.py``); measured family-wise rate of
        the test 0.4-0.65 %). Case 2 in the smallest scope: all 4 ranks of one of 4 EDP
        groups in 16 ranks give ``p = 1/910 <= 0.01/4``.
    rank_alpha : float
        Family-wise false-flag rate of one scope group's per-rank comparison in one window,
        over all its (rank, kernel) tests: besides the fence and the effect-size gates, a rank
        is named on a kernel only when ``exceedance_p <= rank_alpha / n``, ``n`` the valid
        ranks summed over the scope's judged kernels (``argus.detectors.l3.exceedance_p``: an
        exponential tail fitted to the scores above the median, so the rank must hold a large
        share of the upper half's total excess over the median: >= 20 % in a 128-rank scope
        of 145 kernels, >= 76 % in a 16-rank scope of 30). 0.01 (ours, as ``group_alpha``: the
        IQR fence alone was not calibrated for ~150 kernels x the scope's ranks; the soak's
        healthy 1,024-rank workload gave 122 ``kernel_divergence`` findings per window, now
        0.25 (``bench/bench_l3_groups.py``)).
    rank_test_min_ranks : int
        Smallest scope group (valid ranks of a kernel) the ``rank_alpha`` chance test applies
        to; smaller ones keep the fence and the effect-size gates alone. 32 (ours): the false
        findings the test removes come from large scopes (~150 kernels x 128 ranks of tests
        per window), while in a small scope the test has no power left: two slow ranks of an
        8-rank scope share the upper half's excess and neither reaches the >= 96 % it
        requires (the 32-rank ``compute-straggler`` lost all its L3 findings).
    min_events : int
        A rank's (kernel, stream) is judged only with at least this many events in the
        window (summed cluster counts). 24 (ours: with 8-16 events per rank-window the KDE
        summaries of a 512-rank group gave false divergences in ``bench/bench_detectors.py``;
        the default 10-step window holds >= 40 events of every simulated kernel).
    skip_stream_kinds : tuple of str
        Streams whose kernels L3 does not judge. ``("p2p",)`` (ours: pipeline send/recv
        kernel time is the pipeline bubble, i.e. waiting; L2 judges it per PP chain).
    match_stream : bool
        Compare a kernel only with the same stream id on other ranks (paper: per
        (kernel, stream)). Set False when stream ids differ between ranks. True.
    """

    iqr_alpha: float = 3.0
    min_rel_w1: float = 0.10
    min_rel_w1_comm: float = 1.0
    min_median_ratio: float = 2.0
    n_probs: int = 64
    pairwise_max: int = 64
    min_ranks: int = 4
    min_groups: int = 3
    group_alpha: float = 0.01
    rank_alpha: float = 0.01
    rank_test_min_ranks: int = 32
    min_events: int = 24
    skip_stream_kinds: tuple[str, ...] = ("p2p",)
    match_stream: bool = True

    def __post_init__(self) -> None:
        check_ranges(self, "detectors.l3", _L3_RANGES, error=DetectorConfigError)


@dataclass(frozen=True, kw_only=True)
class FunnelConfig:
    """Funnel: joining findings into culprits and alerts.

    Attributes
    ----------
    trigger_confidence : float
        A culprit's alert is triggered once its confidence reaches this. 0.5 (ours).
    resolve_after : int
        An active alert resolves after this many windows without its culprit. 3 (ours).
    level_weight : mapping
        Confidence one finding of a level contributes at the threshold, before the score
        margin and persistence. L1 0.3, L2 0.5, L3 0.5 (ours: L1 names no rank).
    l3_only_persistence : int
        A culprit named only by L3 (kernel divergences of ranks, or a group's divergence)
        triggers once it was seen in this many consecutive windows. 3 (ours: healthy ranks
        and groups of a 150-kernel mix still give a few random L3 flags per block, often 2-3x
        over the threshold, so the margin does not tell them apart; they rarely repeat, a
        degraded kernel or link does. The funnel run offline over the anomalies of a
        1,024-rank soak, 12 windows: 690 false triggers with 1, 43 with 2 (all group
        divergences of 4-rank EP groups), 11 with 3, 0 with 4; the injected faults were
        alerted in every case. At 15 steps/min, 3 windows are 2 minutes).
    job_regression_min_s : float
        A job culprit of L1 regressions alone (no rank, group or host explains them) pages
        once it lasted ``l3_only_persistence`` windows **and** this long in event time (from
        its first window's start to its last window's end, s). 60 (ours: a whole job slower
        for seconds is a host's other tenants or a storage hiccup, not a fault to wake
        anyone for; a live 4-rank CPU DDP job of 95 ms steps slowed 2.3x for 20 steps, 4 s,
        while another process took the cores, and paged "the whole job" from 3 windows. At
        1 s steps it is 6 windows; a lasting regression still pages).
    """

    trigger_confidence: float = 0.5
    resolve_after: int = 3
    l3_only_persistence: int = 3
    job_regression_min_s: float = 60.0
    level_weight: Mapping[str, float] = field(
        default_factory=lambda: {"L1": 0.3, "L2": 0.5, "L3": 0.5}
    )

    def __post_init__(self) -> None:
        check_ranges(self, "detectors.funnel", _FUNNEL_RANGES, error=DetectorConfigError)


@dataclass(frozen=True, kw_only=True)
class DetectorsConfig:
    """All detector settings, as read from the ``[detectors]`` section."""

    l1: L1Config = field(default_factory=L1Config)
    l2: L2Config = field(default_factory=L2Config)
    l3: L3Config = field(default_factory=L3Config)
    funnel: FunnelConfig = field(default_factory=FunnelConfig)
    routing: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from argus.routing import Routing

        Routing.from_config(self.routing)  # rules, group kinds and dims checked at load time

    @classmethod
    def from_settings(
        cls, section: Mapping[str, Any] | None, origins: Mapping[str, str] | None = None
    ) -> DetectorsConfig:
        """Build from ``Settings.section("detectors")`` (:func:`argus.config.build_config`).

        Raises
        ------
        DetectorConfigError
            An unknown key, or a value of the wrong type or range (the message names it).
        """
        return build_config(
            cls, section, section="detectors", origins=origins, error=DetectorConfigError
        )


_C = TypeVar("_C")


def config_from_mapping(cls: type[_C], values: Any, where: str) -> _C:
    """Build config dataclass ``cls`` from a mapping (:func:`argus.config.build_config`).

    Raises
    ------
    DetectorConfigError
        ``values`` is not a table, has an unknown key, or a value does not convert.
    """
    return build_config(cls, values, section=where, error=DetectorConfigError)
