"""The shapes of what the roles keep and send each other: typed, JSON-able, named keys.

Every role's persisted state (faust tables, in memory for ``argus diagnose``) and every message
on an internal topic is one of these ``TypedDict``s, so a reader sees what a key holds and mypy
checks it. Times are ns since the epoch, durations ns; steps and window ids are the job's.
Tuples travel as JSON arrays (lists after a round trip); the code only unpacks them.

A change of these shapes is a change of the persisted state: see docs/deploy.md "Upgrading"
(drain the internal topics before upgrading the workers).
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from argus.streams.roles.outbox import OutboxEntry
from argus.streams.windows import WindowState

__all__ = [
    "BlockHistory",
    "BlockState",
    "Digest",
    "FunnelJobState",
    "JobHistory",
    "JobState",
    "JobStepAggregate",
    "KernelItem",
    "L3Progress",
    "L3State",
    "StepAggregate",
    "StepCell",
    "StepItem",
    "StepProgress",
    "TransferPart",
    "TransferRow",
]


TransferRow = tuple[str, str, str, list[int], float | None]
"""One group's transfer time at one step: (kind, group id, phase, members, ns or None)
(:mod:`argus.streams.roles.transfer`); a digest or state from before :class:`TransferPart`
holds a list of them."""


class TransferPart(TypedDict):
    """One part's transfer rows of one step as columns (``steps-transfer``, a digest's
    ``transfer``; :func:`argus.streams.roles.transfer.columns`): the group rows' kind, group
    id, phase and ns (None: no data) one list each, ``m`` their members when the part sends
    them (``[]`` for a row without); ``rx`` the receive rows' (kind without ``>rx``, group
    id, phase, rank, stage, entries, shortest ns) one list each."""

    k: list[str]
    g: list[str]
    p: list[str]
    t: list[float | None]
    m: NotRequired[list[list[int]]]
    rx: NotRequired[list[list[Any]]]


class StepItem(TypedDict):
    """One step record as the router sends it to its rank block (``steps-by-block``)."""

    rank: int
    step: int
    start_ns: int
    end_ns: int
    world: int  # ranks in the job (product of the coords' sizes)
    coords: dict[str, int]
    phases: list[tuple[str, str, int, int]]  # (name, stream kind, duration ns, start ns)
    kernels: bool  # a kernel batch covers this step (the funnel waits for its L3 scopes)
    part: int  # the raw partition it came from (the windows' watermark)
    host: NotRequired[str]  # the rank's host, when the record names one (the alert's hosts)


class StepCell(TypedDict):
    """What the block tier keeps of one rank's step until the step closes (``steps-cells``)."""

    start_ns: int
    end_ns: int
    coords: dict[str, int]
    phases: list[tuple[str, str, int, int]]  # a state from before the start: 3-tuples
    host: NotRequired[str]


class StepAggregate(TypedDict):
    """A step's iteration-time aggregate over the ranks folded so far."""

    iter_ns: float  # max over ranks of end - start
    start_ns: int  # min over ranks
    end_ns: int  # max over ranks
    world: int


class JobStepAggregate(StepAggregate):
    """The job tier's aggregate of one step over the blocks' digests."""

    ranks: list[int]  # ranks that reported, over the digests so far
    ids: dict[str, int]  # the blocks' finding ids -> window end step (announced to the funnel)
    incomplete: bool  # a block closed the step incomplete
    l3_scopes: int  # L3 scopes that will judge the step's kernels


class Digest(TypedDict):
    """One block's closed step, for the job tier (``steps-by-job``; :mod:`step_digest`)."""

    step: int
    block: int
    agg: StepAggregate
    ranks: list[int]  # the block's ranks that reported
    part: int  # internal partition of the block (the job tier's watermark)
    incomplete: NotRequired[bool]
    l3_scopes: NotRequired[int]
    group_windows: NotRequired[list[dict[str, Any]]]  # spanning groups (window_to_json)
    ids: NotRequired[dict[str, int]]  # findings made by the block -> window end step
    # the block's own groups' transfer times (a list of rows: a block from before columns)
    transfer: NotRequired[TransferPart | list[TransferRow]]
    hosts: NotRequired[dict[str, str]]  # rank -> host (the block's first step, then every 64)


class BlockState(TypedDict):
    """Block tier state of one ``job|b<block>`` key."""

    win: WindowState
    agg: dict[str, StepAggregate]  # step -> aggregate
    l3: dict[str, int]  # step -> L3 scopes declared by its records
    hosts_sent: NotRequired[bool]  # a digest carried the block's hosts


class JobState(TypedDict):
    """Job tier state of one job."""

    win: WindowState
    agg: dict[str, JobStepAggregate]  # step -> aggregate
    hosts: NotRequired[dict[str, str]]  # rank -> host from digests, for the next progress


class BlockHistory(TypedDict):
    """The block tier's L2 history of one key (``steps-block-history``)."""

    recent: list[tuple[int, list[int]]]  # (closed step, blocks holding its windows)
    emitted: list[str]  # ids of findings sent (bounded; duplicates are not sent twice)


class JobHistory(BlockHistory):
    """The job tier's history of one job (``steps-history``)."""

    rows: list[tuple[int, float, int, int]]  # (step, iteration ns, start ns, end ns) for L1


class StepProgress(TypedDict):
    """The job tier's progress for the funnel (``funnel-jobs``): steps closed up to ``progress``."""

    progress: int
    l3n: NotRequired[int]  # L3 scopes that will judge this step
    ids: NotRequired[dict[str, int]]  # findings announced: id -> window end step
    hosts: NotRequired[dict[str, str]]  # rank -> host learnt since the last progress


class L3Progress(TypedDict):
    """An L3 scope's progress for the funnel: its kernel windows judged up to ``upto``."""

    scope: str  # the scope key, ``job/dp/<group>``
    upto: int  # window id
    ids: dict[str, int]  # findings announced: id -> window end step


class KernelItem(TypedDict):
    """One kernel summary as the router sends it to its L3 scope."""

    rank: int
    window: int
    expected: int  # ranks of the scope
    blob: bytes  # the encoded kernel_summary (after the message's JSON: rekey.BLOB)
    part: int  # its input partition: raw.kernels' when its compressor routed it, else summary.kernels'
    offset: int  # its offset on summary.kernels (-1: routed by its compressor, or not from Kafka)
    names: dict[str, str]  # kernel id -> name announced by this summary
    summary: NotRequired[str]  # before blobs: the encoded kernel_summary in base64


class L3State(TypedDict):
    """L3 state of one scope."""

    win: WindowState
    block: list[tuple[int, list[int]]]  # closed windows of the open block: (window, ranks)
    emitted: list[str]
    block_id: NotRequired[int]  # the open block (window id // l3_windows)
    block_inc: NotRequired[int]  # a window of it that closed incomplete


class FunnelJobState(TypedDict):
    """The funnel role's state of one job; each open window's findings are in the table
    ``funnel-buckets`` under ``job|<window>`` (a job's state stays small under lag)."""

    fs: dict[str, Any]  # argus.detectors.funnel.FunnelState.to_dict()
    buckets: dict[str, int]  # open window -> findings held for it
    closed: int | None  # last closed window; None before the job's first progress
    progress: int  # steps closed up to here (the job tier's progress)
    passed: dict[str, float]  # window -> when the steps passed it (s, this process)
    t_progress: float  # last progress (s, this process): the idle bound
    l3: dict[str, int]  # L3 scope -> window id judged up to
    l3n: dict[str, int]  # window -> L3 scopes declared by its steps
    seen: list[str]  # finding ids taken (bounded; a replay is a duplicate)
    outbox: list[OutboxEntry]  # records to send (the driver empties it)
    expect: dict[str, int]  # announced finding id -> window end step, not arrived yet
