"""The in-memory driver of the engine: the live roles, run over records without Kafka.

The faust agents (:mod:`argus.streams.agents`) and this driver run the very same role
classes (the steps block and job tiers, the L3 windows, the funnel); this driver only
replaces the transport, as an in-memory exporter does in OpenTelemetry: tables are dicts,
internal topics are one FIFO queue delivered at once, ``argus.anomalies`` is forwarded to
the funnel as its router does, and the funnel's outbox is emptied into lists. Records are
fed in event order (steps, then the kernel windows that end with them). Windows close on
event time (:mod:`argus.streams.windows`), so the findings, the funnel's verdicts and its
alerts are those of a live run whatever its lag; at the end of the input every key is
closed as the live idle bound closes it (incomplete windows, then the funnel's quiet
windows).

``argus diagnose``, ``argus replay`` and the tests use it through :func:`run_engine`.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from argus.detectors.config import DetectorsConfig
from argus.detectors.inputs import validate_step_record
from argus.routing import Routing
from argus.schemas import Codec
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.roles.funnel import Funnel
from argus.streams.roles.l3 import L3Windows, route_summary
from argus.streams.roles.steps import JobSteps, StepBlocks, route_step
from argus.summaries.summary_record import (
    REANNOUNCE_WINDOWS,
    NameAnnouncements,
    SummarizedBatches,
    batch_columns,
    summarize_batch,
)

__all__ = ["EngineResult", "batch_summaries", "batches_summaries", "replay_stream", "run_engine"]

_IDLE_ROUNDS = 100_000  # funnel idle periods at most, at the end of the input
_CHUNK_EVENTS = 1 << 16  # kernel events per summarize_batches call: its arrays stay in cache


class _Topic:
    def __init__(self, name: str) -> None:
        self.name = name

    def get_topic_name(self) -> str:
        return self.name


@dataclass
class _MemoryCtx:
    """What the roles use of a worker's context (:class:`argus.streams.app.Ctx`)."""

    detectors: DetectorsConfig
    pcfg: PipelineConfig
    codec: Codec = field(default_factory=Codec)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    queue: deque[tuple[str, str, Any]] = field(default_factory=deque)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # late items, with their reasons

    def table(self, name: str) -> dict[str, Any]:
        return self.tables.setdefault(name, {})

    async def late(self, role: str, reason: str) -> None:
        self.rejected.append(reason)

    def internal_topic(self, name: str) -> _Topic:
        return _Topic(name)

    async def send_keyed(self, topic: _Topic, key: str, value: Any) -> None:
        self.queue.append((topic.name, key, value))

    async def emit(
        self, suffix: str, key: str, record_name: str, value: dict[str, Any], role: str
    ) -> None:
        if suffix == "alerts":
            self.alerts.append(value)
            return
        self.anomalies.append(value)
        if value.get("level") != "funnel":  # the funnel's router: on to the job's windows
            item = {k: v for k, v in value.items() if k != "detected_ns"}
            self.queue.append(("funnel-jobs", str(value["job"]), {"items": [item]}))


@dataclass(frozen=True)
class EngineResult:
    """What the engine emitted, in emission order: ``anomaly`` records (L1-L3 findings and
    the funnel's verdicts, level ``funnel``) and ``alert`` records; ``windows``: each closed
    funnel window's ``(first step, last step, FunnelOutput)``."""

    anomalies: list[dict[str, Any]]
    alerts: list[dict[str, Any]] = field(default_factory=list)
    windows: list[tuple[int, int, Any]] = field(default_factory=list)
    #: records not used, with their reasons (late items; kernel windows missing parts)
    rejected: list[str] = field(default_factory=list)

    @property
    def ids(self) -> set[str]:
        """Ids of the L1-L3 findings (the funnel's verdicts excluded)."""
        return {a["id"] for a in self.anomalies if a.get("level") != "funnel"}

    @property
    def findings(self) -> list[dict[str, Any]]:
        return [a for a in self.anomalies if a.get("level") != "funnel"]

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        return [a for a in self.anomalies if a.get("level") == "funnel"]


class _HeldPositions:
    """The L3 cells' held input (:class:`~argus.streams.roles.l3.CellHolder`): positions of
    the summaries routed so far, per (scope, block), as a worker holds their offsets."""

    def __init__(self) -> None:
        self.pos = 0  # the summary being routed
        self._held: dict[tuple[str, int], set[int]] = {}

    def hold(self, scope: str, block: int) -> None:
        self._held.setdefault((scope, block), set()).add(self.pos)

    def release(self, scope: str, block: int) -> None:
        self._held.pop((scope, block), None)

    def lowest(self) -> int | None:
        """The first position a restart reads again (None: nothing held)."""
        return min((min(p) for p in self._held.values()), default=None)


class _Engine:
    def __init__(self, ctx: _MemoryCtx, *, funnel: bool) -> None:
        self.ctx = ctx
        self.routing = Routing.from_config(ctx.detectors.routing)
        self.job_tier = JobSteps(ctx)
        self.job_tier.levels.update({"l1", "l2"})
        self.blocks = StepBlocks(ctx, self.job_tier.levels)
        self.held = _HeldPositions()
        self.l3 = L3Windows(ctx, self.routing, self.held)
        # every summary routed so far, by position (an input topic: a restart reads the
        # held ones again)
        self.summaries: list[tuple[Mapping[str, Any], bool]] = []
        self.funnel = Funnel(ctx) if funnel else None
        self.windows: list[tuple[int, int, Any]] = []
        if self.funnel is not None:
            self.funnel.on_window = lambda a, b, out: self.windows.append((a, b, out))
        self.state: dict[tuple[str, str], Any] = {}
        self.validate = True  # False: the caller validated the step records already
        self.now = 0.0  # the funnel's processing clock: only its idle rule reads it

    async def restart(self) -> None:
        """A worker restart between two records: tables and per-key states come back as
        their changelogs hold them (JSON: tuples are lists, keys strings), and the roles'
        process memory (caches, idle clocks, kernel names not in a table) is lost."""
        for name, t in self.ctx.tables.items():
            self.ctx.tables[name] = {k: json.loads(json.dumps(v)) for k, v in t.items()}
        self.state = {k: json.loads(json.dumps(v)) for k, v in self.state.items()}
        fresh = _Engine(self.ctx, funnel=self.funnel is not None)
        self.job_tier, self.blocks, self.l3 = fresh.job_tier, fresh.blocks, fresh.l3
        self.funnel = fresh.funnel
        if self.funnel is not None:
            self.funnel.on_window = lambda a, b, out: self.windows.append((a, b, out))
        # the L3 cells were process memory: read the summaries again from the lowest held
        # position (what a restarted worker reads from the committed offset)
        lowest, self.held = self.held.lowest(), fresh.held
        self.l3.holder = self.held
        if lowest is not None:
            for pos in range(lowest, len(self.summaries)):
                await self._route_summary(pos)

    def _st(self, role: Any, name: str, key: str) -> Any:
        st = self.state.get((name, key))
        if st is None:
            st = self.state[(name, key)] = role.new(key)
        return st

    async def step(self, rec: Mapping[str, Any]) -> None:
        if self.validate:
            validate_step_record(rec)  # as the live router does
        for key, item in route_step(rec, self.ctx.pcfg.steps_block_ranks):
            await self.blocks.add(key, self._st(self.blocks, "blocks", key), item, self.now)
        await self.pump()

    async def summary(self, rec: Mapping[str, Any], *, own: bool = False) -> None:
        """Route one ``kernel_summary`` to its scope. ``own``: one this engine's compressor
        made (:func:`batches_summaries`), handed to the role as its record without the Avro
        encode a live compressor sends (the cell takes the record's columns either way).
        The encode is what validates a record given from outside against the schema; the
        compressor's own records are the ones the live compressor encodes, complete by
        construction."""
        self.summaries.append((rec, own))
        await self._route_summary(len(self.summaries) - 1)
        if self.ctx.queue:
            await self.pump()

    async def _route_summary(self, pos: int) -> None:
        rec, own = self.summaries[pos]
        value = b"" if own else self.ctx.codec.encode("kernel_summary", dict(rec))
        self.held.pos = pos
        for key, item in route_summary(rec, value, self.routing):
            await self.l3.add(key, self._st(self.l3, "l3", key), item, self.now, rec)

    async def pump(self) -> None:
        """Deliver what the roles sent to each other, in order."""
        while self.ctx.queue:
            topic, key, msg = self.ctx.queue.popleft()
            if topic == "steps-by-job":
                st = self._st(self.job_tier, "steps", key)
                for item in msg["items"]:
                    await self.job_tier.add(key, st, item, self.now)
            elif topic == "funnel-jobs" and self.funnel is not None:
                st = self._st(self.funnel, "funnel", key)
                for item in msg["items"]:
                    await self.funnel.add(key, st, item, self.now)
                await self.funnel.tick(key, st, self.now)
                self._deliver(st)

    def _deliver(self, st: dict[str, Any]) -> None:
        """The outbox, emptied at once (nothing to crash between state and send here)."""
        for e in st.get("outbox") or ():
            if e["topic"] == "alerts":
                self.ctx.alerts.append(e["value"])
            else:
                self.ctx.anomalies.append(e["value"])
        st["outbox"] = []

    async def finish(self) -> None:
        """End of input: what the live idle bounds do, in dependency order."""
        for (name, key), st in list(self.state.items()):
            if name == "blocks":
                await self.blocks.finish(key, st)
        await self.pump()
        for (name, key), st in list(self.state.items()):
            if name == "steps":
                await self.job_tier.finish(key, st)
            elif name == "l3":
                await self.l3.finish(key, st)
        await self.pump()
        if self.funnel is None:
            return
        idle = self.ctx.pcfg.funnel_idle_s
        for _ in range(_IDLE_ROUNDS):  # one window per idle period, as live
            self.now += 3 * idle
            changed = False
            for (name, key), st in list(self.state.items()):
                if name == "funnel" and await self.funnel.tick(key, st, self.now):
                    changed = True
                    self._deliver(st)
            if not changed:
                break


def _event_order(
    steps: Iterable[Mapping[str, Any]], summaries: Iterable[Mapping[str, Any]]
) -> list[tuple[tuple[str, int, int, int], str, Mapping[str, Any]]]:
    """Records in event order: a job's steps by step, a kernel window after the steps
    before its id (the collectors send it after its last step), ranks in order."""
    out: list[tuple[tuple[str, int, int, int], str, Mapping[str, Any]]] = []
    for r in steps:
        out.append(((str(r["job"]), int(r["step"]), 0, int(r["rank"])), "step", r))
    for r in summaries:
        out.append(((str(r["job"]), int(r["window_id"]), 1, int(r["rank"])), "summary", r))
    out.sort(key=lambda x: x[0])
    return out


def run_engine(
    steps: Iterable[Mapping[str, Any]],
    *,
    kernel_batches: Iterable[Mapping[str, Any]] = (),
    kernel_summaries: Iterable[Mapping[str, Any]] = (),
    detectors: DetectorsConfig | None = None,
    pcfg: PipelineConfig | None = None,
    funnel: bool = True,
    restart_every: int = 0,
    steps_validated: bool = False,
) -> EngineResult:
    """Run the engine's roles over recorded records; see the module doc.

    ``steps_validated``: the caller ran :func:`~argus.detectors.inputs.validate_step_record`
    on every step record already (``argus diagnose``'s ``job_series`` does), so the
    engine's router does not again.

    ``restart_every`` > 0 restarts the roles after every that many records
    (:meth:`_Engine.restart`: state through JSON, process memory lost), which must not change
    what they find (a test of the persisted state, as a crashed worker restores it).

    Kernel batches are compressed as the live compressor does (:func:`batches_summaries`:
    many windows per :func:`~argus.summaries.summary_record.summarize_batches` call, each
    summary equal to ``summarize_batch``'s; each rank's kernel names announced in its first
    window and again every ``REANNOUNCE_WINDOWS`` windows, as the live compressor announces them:
    the L3 role keeps a scope's names in its ``l3-names`` table, restarts included), the
    parts of a split window
    merged first (:func:`argus.schemas.kernel_parts.assemble`; a window missing parts is
    listed in ``rejected``, as the compressor sends it to the DLQ); summaries are used as
    they are.
    ``funnel=False`` stops at the L1-L3 findings.
    """
    from argus.malloc import no_numpy_hugepages

    no_numpy_hugepages()  # the L3 blocks' large arrays in 4 KB pages, as in a worker
    ctx = _MemoryCtx(detectors or DetectorsConfig(), pcfg or PipelineConfig())
    whole, incomplete = _whole_windows(kernel_batches)
    ctx.rejected.extend(str(w.error()) for w in incomplete)
    made = batches_summaries(whole, announce_every=REANNOUNCE_WINDOWS)
    summaries = made + [dict(s) for s in kernel_summaries]
    eng = _Engine(ctx, funnel=funnel)
    eng.validate = not steps_validated
    own = {id(s) for s in made}

    async def go() -> None:
        for i, (_, kind, rec) in enumerate(_event_order(steps, summaries), 1):
            await (eng.step(rec) if kind == "step" else eng.summary(rec, own=id(rec) in own))
            if restart_every and i % restart_every == 0:
                await eng.restart()
        await eng.finish()

    asyncio.run(go())
    return EngineResult(ctx.anomalies, ctx.alerts, eng.windows, ctx.rejected)


def _whole_windows(
    batches: Iterable[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[Any]]:
    """The kernel windows of ``batches``, split ones merged; and those missing parts."""
    from argus.errors import DetectorInputError
    from argus.schemas.kernel_parts import PartError, assemble

    try:
        return assemble(batches)
    except PartError as exc:
        raise DetectorInputError(str(exc)) from exc


def batch_summaries(rec: Mapping[str, Any], kde_config: Any = None) -> dict[str, Any]:
    """Compress one ``kernel_batch`` record into a ``kernel_summary`` record, like the
    compressor agent (:func:`argus.summaries.summary_record.summarize_batch`).

    Raises
    ------
    DetectorInputError
        Inconsistent columns (the message says which).
    """
    from argus.errors import DetectorInputError
    from argus.summaries.summary_record import BatchError

    try:
        return summarize_batch(rec, config=kde_config)  # None: the compressor's default
    except BatchError as exc:
        raise DetectorInputError(
            f"kernel_batch {rec.get('job')}/{rec.get('rank')} window {rec.get('window_id')}: {exc}"
        ) from exc


def batches_summaries(
    recs: Sequence[Mapping[str, Any]], kde_config: Any = None, *, announce_every: int = 0
) -> list[dict[str, Any]]:
    """:func:`batch_summaries` of every record, many per call
    (:func:`~argus.summaries.summary_record.summarize_batches`, about
    ``_CHUNK_EVENTS`` events a call): the same summaries, without the fixed cost of one
    ``summarize_many`` per record (80-event windows of a recorded job: most of the cost).

    ``announce_every`` > 0: the records are taken in event order (job, window id, rank;
    stable: the order :func:`run_engine` delivers them) and returned in it, and each
    ``kernel_names`` holds only what the live compressor
    (:mod:`argus.streams.agents.kernels`) would announce: a rank's names in its first
    window, its new ids in the window that first uses them, and all of them again every
    ``announce_every`` windows of the rank. 0: input order, every record names every id it
    uses (a summary read alone names its kernels).

    Raises
    ------
    DetectorInputError
        A record with inconsistent columns (the message names it, as :func:`batch_summaries`).
    """
    from argus.errors import DetectorInputError
    from argus.malloc import keep_freed_blocks
    from argus.summaries.summary_record import BatchError

    keep_freed_blocks()  # as the compressor agent: the chunks' temporaries reuse heap pages
    out: list[dict[str, Any]] = []
    chunk: list[Mapping[str, Any]] = []
    cols: list[Any] = []
    events = 0
    names = NameAnnouncements(announce_every)  # per (job, rank), as the compressor agent
    if announce_every > 0:
        recs = sorted(recs, key=lambda r: (str(r["job"]), int(r["window_id"]), int(r["rank"])))

    def flush() -> None:
        nonlocal events
        done = SummarizedBatches(chunk, config=kde_config, columns=cols)
        if announce_every <= 0:
            out.extend(done.record(i) for i in range(len(done)))
        else:
            for i, b in enumerate(chunk):
                known = names.known((str(b["job"]), int(b["rank"])))
                rec = done.record(i, announced=known)
                known.update(n["id"] for n in rec["kernel_names"])
                out.append(rec)
        chunk.clear()
        cols.clear()
        events = 0

    for rec in recs:
        try:
            c = batch_columns(rec)
        except BatchError as exc:
            raise DetectorInputError(
                f"kernel_batch {rec.get('job')}/{rec.get('rank')} window "
                f"{rec.get('window_id')}: {exc}"
            ) from exc
        chunk.append(rec)
        cols.append(c)
        events += c[1].size
        if events >= _CHUNK_EVENTS:
            flush()
    if chunk:
        flush()
    return out


def replay_stream(
    steps: Iterable[Mapping[str, Any]],
    *,
    kernel_batches: Iterable[Mapping[str, Any]] = (),
    kernel_summaries: Iterable[Mapping[str, Any]] = (),
    detectors: DetectorsConfig | None = None,
    pcfg: PipelineConfig | None = None,
) -> EngineResult:
    """The L1-L3 findings of :func:`run_engine` (no funnel)."""
    return run_engine(
        steps,
        kernel_batches=kernel_batches,
        kernel_summaries=kernel_summaries,
        detectors=detectors,
        pcfg=pcfg,
        funnel=False,
    )
