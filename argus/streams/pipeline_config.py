"""Settings of the stream workers (``[streams]`` section), frozen and validated at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from argus.config import NON_NEGATIVE, POSITIVE, ConfigError, Range, build_config, check_ranges
from argus.streams.limits import Limits

__all__ = ["COMPRESSOR_RUNTIMES", "STEPS_ROUTER_RUNTIMES", "PipelineConfig"]

COMPRESSOR_RUNTIMES = ("kafka", "faust")
"""``streams.compressor_runtime``: the compressor's own confluent-kafka loop, or faust."""
STEPS_ROUTER_RUNTIMES = ("kafka", "faust")
"""``streams.steps_router_runtime``: the steps router on its own loop, or a faust agent."""

#: fields whose range is not ``> 0``; 0 turns max_skew_s, max_step_jump, producer_linger_s,
#: silent_steps off
_RANGES = {
    "metrics_port": Range(ge=0, le=65535),
    "max_skew_s": NON_NEGATIVE,
    "max_step_jump": NON_NEGATIVE,
    "silent_steps": NON_NEGATIVE,
    "silent_s": NON_NEGATIVE,
    "producer_linger_s": NON_NEGATIVE,
}


@dataclass(frozen=True, kw_only=True)
class PipelineConfig(Limits):
    """Stream worker knobs.

    Attributes
    ----------
    lateness_steps : int
        Allowed lateness of the steps roles, in steps of event time: a step closes without
        a rank that stopped reporting once the peers' watermark (the upper median of the
        block's ranks' newest steps) passed it by this many steps (:mod:`argus.streams.windows`).
        Arrival skew between ranks below it (lag, a restart, a broker outage, uneven
        partitions) changes no finding; the job tier waits ``2 * lateness_steps + 1`` for a
        whole block. 32: one 8 MiB fetch (``fetch_bytes``) of a partition holding ~150 ranks'
        ~2 KB step records runs ~27 steps ahead of the other partitions, inside it; at 15
        steps/min a rank that stopped is reported ~2 min later.
    silent_steps : int
        A rank whose records stopped while the ranks it shares an input partition with went
        on is reported missing once their upper median passed its step by this many steps
        (the *silent* rule of :mod:`argus.streams.windows`), instead of ``lateness_steps``:
        one partition is read in the order it was written, so no consumer lag or restart
        makes a rank silent, only a rank (or its collector) that stopped writing. 8 steps
        **and** ``silent_s``: a page within a funnel window of the stop. 0 turns the rule
        off; a smaller ``lateness_steps`` caps it.
    silent_s : float
        ... and the partition's ranks' event time (their steps' ends) passed the silent
        rank's newest step by this much (s). 10: a collector delivers a rank's records in
        bursts (a second's steps at a time, more while its broker is slow), so a job of
        200 ms steps saw healthy ranks 12 steps behind their partition between two bursts
        (`make demo`: false ``missing_rank`` pages); 10 s is 8 steps of a 1.2 s step.
    l3_lateness_windows : int
        The same for L3's kernel windows (window ids of event time). 4: a window spans one or
        more steps, and a dead rank's scope waits only this many windows for it.
    idle_close_s : float
        Processing time a key (a rank block, a job, an L3 scope) may go without input in
        this worker before its pending windows close **incomplete** (no ``missing_rank`` comes
        from them, their findings say so): the end of a job whose last steps lack a rank, or
        memory of a stalled one. Not a detection mechanism; 120 s outlasts a broker restart
        and a worker's rejoin, so neither closes a window early (s).
    steps_block_ranks : int
        Consecutive ranks per rank block of the steps roles (:mod:`argus.streams.step_digest`):
        a job's step records spread over workers by block, and the per-job tier receives one
        digest per block and step. 256: 64 records/s per block at 15 steps/min (a worker
        takes ~475/s), 40 blocks for a 10,000-rank job.
    l2_window_steps : int
        Closed steps per L2 evaluation (sliding). 4: medians over 4 steps tame jitter while
        a straggler still shows within one step of onset.
    l2_small_window_steps : int
        Closed steps per L2 evaluation of a *small* group (3-4 ranks with a compute or host
        phase, :mod:`argus.detectors.l2_small`), its ``min_effect`` scaled to the same
        standard error. 16: a 4-rank CPU job on a loaded host (+-50 % per-step noise) named
        its 2-3x slowed rank in 7-12 of 12 funnel windows over 16 steps, 4-7 over 4, and no
        healthy rank either way. At most ``l2_window_steps`` turns it off.
    l3_windows : int
        Kernel windows (steps) per L3 evaluation, aligned blocks. 10, as the funnel window
        and ``argus diagnose``: enough events per rank for stable distributions (4 gave
        spurious single-rank divergences), and at 15 steps/min a block ends within 40 s.
    funnel_window_steps : int
        Steps per funnel window (event time); persistence counts these windows. 10, as
        ``argus diagnose``.
    funnel_grace_s : float
        For jobs whose step records do not declare their kernel windows
        (``collector.kernels``) only: how long a funnel window stays open after the steps
        passed its end, for L3 scopes seen before to report (s). Declared jobs wait on event
        time instead (:mod:`argus.streams.roles.funnel`).
    funnel_l3_wait_s : float
        How long a job without progress waits, in processing time, for the L3 judgement its
        steps declared (``collector.kernels``) before its funnel windows close without it
        (s): a kernel worker down for good must not hold a finished job's alerts open for
        ever, and one that is merely late (restarted, started late, behind) must not lose
        its findings to the next window. 600: a late start or a rejoin takes seconds to a
        minute, a 4x backlog on 2 cores a few minutes.
    funnel_idle_s : float
        A job with no progress for this long closes one funnel window per period, so the
        last window of a finished or stalled job closes and its alerts resolve (s). Must
        exceed ``idle_close_s``, so that the steps and L3 windows a finished job left open
        close (incomplete) before the funnel's last window does. 150.
    internal_partitions : int
        Partitions of the re-key topics and tables (scale-out unit of L1/L2/L3/funnel).
    internal_retention_s : float
        ``retention.ms`` of the re-key topics (``<prefix>.internal.*``), set when a worker
        creates them (s; never on the table changelogs, which are compacted state). A record
        there is needed only until the window agent behind it commits, a second or so; a
        restarted worker reads from its committed offset, and only a role down (or a window
        agent stalled) longer than this loses the records it had not yet taken. 24 h: an
        overnight outage of the steps roles (``raw.steps`` keeps 7 days; the kernel path
        cannot outlast ``raw.kernels``' 6 h anyway), at 6.3 TB of disk for a 10,000-GPU job
        at 15 steps/min, replication 3, instead of the broker default's 7 days, 44 TB
        (docs/deploy.md, "Brokers and disks"). Topics created before keep theirs; the worker
        warns at start when it differs.
    l3_route_summaries : bool
        Whether L3 also reads ``summary.kernels`` and routes the summaries that reach it
        without their scope item (written by another producer than argus' compressor, or by
        an older one); argus' compressor sends each summary's item to its L3 scope itself
        (``argus.streams.agents.kernels``) and marks the summary, which L3 then skips
        undecoded. true (default): any producer's summaries are judged. false: L3 reads only
        what compressors routed, and does not fetch ``summary.kernels`` at all: half the L3
        worker's CPU at 1,024 ranks, a third of it with true (BENCHMARKS.md, "The compressor
        routes L3 itself").
    fidelity_every : int
        One in this many kernel windows is kept raw for the live fidelity check.
    stack_window_s : float
        Length of a stack-summary window (s).
    metrics_port : int
        Prometheus port on 127.0.0.1; 0 disables.
    replication : int
        Replication factor of internal and changelog topics.
    producer_linger_s : float
        How long the workers' producer waits to batch records into one request (s); 0 sends
        at once. 0.01 carried 1,024 ranks for 30 minutes (sending at once, the steps worker
        spent ~40% of its time in socket writes at 1,024 ranks). Crash-safe: offsets commit
        only after what they caused was acknowledged (:mod:`argus.streams.durable`), and a
        restarted worker's recovery no longer drops input (:mod:`argus.streams.recovery_seek`).
    producer_batch_bytes : int
        Largest producer batch per partition (bytes). 512 KiB: below the broker's default
        ``message.max.bytes`` (1 MiB) with room for the request overhead.
    fetch_bytes : int
        Largest fetch per partition (bytes). 8 MiB: a kernel batch is ~100 KB, the 1 MiB
        default fetched ~10 of them per round trip.
    compressor_runtime : str
        What runs the compressor role. ``kafka`` (default): its own loop on confluent-kafka
        clients (:mod:`argus.streams.compressor_loop`), consumer group
        ``<prefix>-compressor`` whatever roles share the process: 35 % less CPU a raw
        record than the faust agent (BENCHMARKS.md). ``faust``: the faust agent in the
        worker's app (consumer group ``<prefix>-<roles>``), as before session 18.
    steps_router_runtime : str
        What runs the steps roles' router (``raw.steps`` -> ``internal.steps-by-block``).
        ``kafka`` (default): a confluent-kafka loop on a thread beside the faust worker
        (:mod:`argus.streams.steps_router_loop`), in consumer group ``<prefix>-steps-router``:
        faust spends ~75 µs handing over each record (BENCHMARKS.md, "faust's fetch loop"),
        a loop ~1 µs; the steps worker needs 23 % less CPU (BENCHMARKS.md, "The steps router
        on its own loop"). ``faust``: an agent of the worker's app, as before session 21.

    Input limits: the ``max_*`` fields, inherited from :class:`argus.streams.limits.Limits`
    (their one definition, documented there; :mod:`argus.streams.validate` sends a record
    outside them to the DLQ with the reason, docs/reliability.md), and:

    dlq_max_value_bytes : int
        Original bytes a DLQ record carries; a longer value is cut to this many bytes and
        the reason says so (the record's topic/partition/offset still point at the whole).
    """

    lateness_steps: int = 32
    silent_steps: int = 8
    silent_s: float = 10.0
    l3_lateness_windows: int = 4
    idle_close_s: float = 120.0
    steps_block_ranks: int = 256
    l2_window_steps: int = 4
    l2_small_window_steps: int = 16
    l3_windows: int = 10
    funnel_window_steps: int = 10
    funnel_grace_s: float = 15.0
    funnel_idle_s: float = 150.0
    funnel_l3_wait_s: float = 600.0
    internal_partitions: int = 4
    internal_retention_s: float = 86_400.0
    l3_route_summaries: bool = True
    fidelity_every: int = 16
    stack_window_s: float = 10.0
    metrics_port: int = 0
    replication: int = 1
    producer_linger_s: float = 0.01
    producer_batch_bytes: int = 1 << 19
    fetch_bytes: int = 8 << 20
    dlq_max_value_bytes: int = 900_000
    compressor_runtime: str = "kafka"
    steps_router_runtime: str = "kafka"

    def __post_init__(self) -> None:
        ranged = (f.name for f in fields(self) if f.type not in ("bool", "str"))
        check_ranges(self, "streams", {n: _RANGES.get(n, POSITIVE) for n in ranged})
        if self.compressor_runtime not in COMPRESSOR_RUNTIMES:
            raise ConfigError(
                f"streams.compressor_runtime = {self.compressor_runtime!r}: choose "
                + " or ".join(COMPRESSOR_RUNTIMES)
            )
        if self.steps_router_runtime not in STEPS_ROUTER_RUNTIMES:
            raise ConfigError(
                f"streams.steps_router_runtime = {self.steps_router_runtime!r}: choose "
                + " or ".join(STEPS_ROUTER_RUNTIMES)
            )
        if self.funnel_idle_s <= self.idle_close_s:
            raise ConfigError(
                f"streams.funnel_idle_s ({self.funnel_idle_s}) must exceed streams.idle_close_s"
                f" ({self.idle_close_s}): a finished job's last steps close before its last"
                " funnel window"
            )

    @classmethod
    def from_mapping(
        cls, m: Mapping[str, Any] | None, origins: Mapping[str, str] | None = None
    ) -> PipelineConfig:
        """Build from a ``[streams]`` table (:func:`argus.config.build_config`: strings from the
        environment converted, unknown keys and bad values a :class:`ConfigError`)."""
        return build_config(cls, m, section="streams", origins=origins)
