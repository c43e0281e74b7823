"""The steps roles: L1 and L2 over step records, in two tiers, per rank block then per job.

Pure roles (no faust, no Kafka): a driver (the faust agents of
:mod:`argus.streams.agents.steps`, or :mod:`argus.streams.memory`) routes each step record
with :func:`route_step` to its rank block, ``job|b<block>`` (:mod:`argus.streams.step_digest`:
``streams.steps_block_ranks`` consecutive layout positions), so one job's records spread over
partitions and workers, and hands what a role sends on to the next one.

* **Per block** (:class:`StepBlocks`): each rank's step goes to a ``cells`` table (one small
  write per record) and a small per-block index of pending steps; a block's step closes when
  all its ranks are accounted for, on event time (:mod:`argus.streams.windows`). The close builds
  the block's L2 group windows (:func:`argus.detectors.inputs.group_windows`, groups from
  each record's coords), judges the groups all of whose ranks the block holds over its last
  ``l2_window_steps`` steps, and sends one digest per block and step to the job's key: the
  ranks that reported, the iteration-time aggregate, the windows of the groups that span
  blocks and the ids of the findings made here.
* **Per job** (:class:`JobSteps`): a step closes when every block's digest arrived or the
  other blocks' watermark passed it. **L1** appends the step's iteration time (max over ranks) to the job's bounded history
  and runs :func:`argus.detectors.l1.detect`; the world's ranks no digest named give a
  ``missing_rank`` finding. **L2** joins the spanning groups' windows across blocks once per
  step and over the last ``l2_window_steps`` steps
  (:func:`argus.detectors.inputs.merge_group_windows`), and runs
  :func:`argus.detectors.l2.detect` on each group.

Each tier computes only the levels in its ``levels`` set (``l1``, ``l2``), so a worker that
runs one level keeps only that level's history. See docs/pipeline.md for the time model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from argus.detectors import l1
from argus.detectors.columnar import (
    Cell,
    GroupBatch,
    Topology,
    batch_from_json,
    batch_to_json,
    cell_batches,
    detect_batches,
    join_blocks,
    join_steps,
)
from argus.detectors.config import L2Config
from argus.detectors.findings import Finding
from argus.detectors.groupwide import cell_receive_rows
from argus.detectors.inputs import merge_group_windows
from argus.detectors.l2 import GroupWindow
from argus.detectors.l2_batch import detect_many
from argus.detectors.l2_small import is_small, small_config, split_small
from argus.routing import DIMS, Routing, rank_of
from argus.schemas.step_body_reader import PhaseRows
from argus.streams import metrics, windows
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.roles.context import RoleContext, emit_findings, partition_of
from argus.streams.roles.state import (
    BlockHistory,
    BlockState,
    Digest,
    JobHistory,
    JobState,
    JobStepAggregate,
    StepAggregate,
    StepCell,
    StepItem,
    StepProgress,
)
from argus.streams.roles.transfer import TransferWindows, batch_columns
from argus.streams.step_digest import (
    block_key,
    block_of,
    block_size,
    blocks_in,
    window_from_json,
)

__all__ = ["JobSteps", "StepBlocks", "collector_metrics", "missing_finding", "route_step"]

_HOSTS_EVERY = 64  # a block's digest carries its ranks' hosts every this many steps
_HISTORY = 512  # steps of iteration time kept per job for L1
_CACHED_KEYS = 256  # jobs or blocks whose per-step L2 group windows stay in memory


def _world(coords: Mapping[str, Any]) -> int:
    return math.prod(int(coords.get(f"{d}_size", 1)) for d in DIMS)


_PLACES: dict[tuple[Any, ...], tuple[int, int]] = {}  # coords' items -> (world, position)


def _place(coords: Mapping[str, Any]) -> tuple[int, int]:
    """``(world, layout position)`` of ``coords``: a lookup table filled once per rank."""
    try:
        key = tuple(coords.items())
        out = _PLACES.get(key)
    except TypeError:  # unhashable values: rank_of names the bad one
        return _world(coords), rank_of(coords)
    if out is None:
        if len(_PLACES) > 1 << 20:
            _PLACES.clear()
        out = _PLACES[key] = (_world(coords), rank_of(coords))
    return out


def missing_finding(
    job: str, step: int, missing: list[int], expected: int, start_ns: int, end_ns: int
) -> Finding:
    """A ``missing_rank`` finding: ``missing`` ranks never reported ``step``."""
    return Finding(
        job=job,
        level="L1",
        kind="missing_rank",
        group_kind="job",
        group_id="all",
        ranks=tuple(missing),
        window_start_step=step,
        window_end_step=step,
        window_start_ns=start_ns,
        window_end_ns=end_ns,
        score=float(len(missing)),
        threshold=0.0,
        observed=float(expected - len(missing)),
        baseline=float(expected),
        unit="ranks",
        evidence={"missing": json.dumps(missing[:256]), "expected": str(expected)},
    )


_GAUGES_KEPT = 4096  # jobs whose collector gauges' children are kept (cleared when full)
_COLLECTOR_GAUGES: dict[str, tuple[Any, Any, Any]] = {}  # job -> (dropped, errors, overhead)


def collector_metrics(job: str, rec: dict[str, Any]) -> None:
    """The collector's self-reported health of one step record into the job's gauges: dropped
    records and errors (the max seen; cumulative in the collector), overhead (the latest,
    of the step time). The gauges' children are looked up once per job, not per record."""
    gauges = _COLLECTOR_GAUGES.get(job)
    if gauges is None:
        if len(_COLLECTOR_GAUGES) >= _GAUGES_KEPT:
            _COLLECTOR_GAUGES.clear()
        gauges = _COLLECTOR_GAUGES[job] = (
            metrics.COLLECTOR_DROPPED.labels(job),
            metrics.COLLECTOR_ERRORS.labels(job),
            metrics.COLLECTOR_OVERHEAD.labels(job),
        )
    dropped, errors, overhead = gauges
    c = rec.get("collector") or {}
    for g, field in ((dropped, "dropped_records"), (errors, "errors")):
        v = float(c.get(field, 0))
        if v > g._value.get():
            g.set(v)
    it = rec["end_ns"] - rec["start_ns"]
    if it > 0:
        overhead.set(float(c.get("overhead_ns", 0)) / it)


def _fold(agg: StepAggregate | None, more: StepAggregate) -> StepAggregate:
    """A step's aggregate with ``more`` folded in (``agg`` None: the first)."""
    if agg is None:
        return more
    return StepAggregate(
        iter_ns=max(agg["iter_ns"], more["iter_ns"]),
        start_ns=min(agg["start_ns"], more["start_ns"]),
        end_ns=max(agg["end_ns"], more["end_ns"]),
        world=max(agg["world"], more["world"]),
    )


class _Tier:
    """What both tiers' window agents share: the state, the idle bound, repeat counting.

    Windows close on event time (:mod:`argus.streams.windows`); the only processing-time
    rule is the idle bound: a key with pending steps and no input in this process for
    ``idle_close_s`` closes them incomplete. The clock of that rule lives in this process
    only (``seen``), so a restarted worker counts idleness from its own start.
    """

    ctx: RoleContext
    lateness: int
    silent: int = 0  # the silent-source rule (windows), per rank only: the block tier
    silent_ns: int = 0
    idle: float
    seen: dict[str, float]

    def _window_add(
        self,
        key: str,
        st: BlockState | JobState,
        *,
        step: int,
        rank: int,
        expected: int,
        now: float,
        part: str,
        t_ns: int = 0,
    ) -> tuple[windows.Status, list[windows.ClosedStep]]:
        self.seen[key] = now
        return windows.add(
            st["win"],
            step=step,
            rank=rank,
            expected=expected,
            lateness=self.lateness,
            part=part,
            silent=self.silent,
            silent_ns=self.silent_ns,
            t_ns=t_ns,
        )

    async def tick(self, key: str, st: Any, now: float) -> bool:
        last = self.seen.setdefault(key, now)
        if not st["win"]["pending"] or now - last < self.idle:
            return False
        await self.finish(key, st)
        return True

    async def finish(self, key: str, st: Any) -> None:
        """Close every pending step incomplete (idle in processing time, or end of input)."""
        closed = windows.flush(st["win"])
        if closed:
            await self.close(key, st, closed)

    async def close(
        self, key: str, st: Any, closed: list[windows.ClosedStep]
    ) -> None:  # pragma: no cover - each tier defines it
        raise NotImplementedError

    async def _settle(
        self,
        key: str,
        st: Any,
        status: windows.Status,
        closed: list[windows.ClosedStep],
        why: Callable[[], str],
    ) -> None:
        """The end of ``add``, after a new report was folded in: a report that was not new is
        counted, ``"dup"`` (a replay) or ``"late"`` (also sent to the DLQ with the reason
        ``why()``); then the steps it closed are closed."""
        if status == "dup":
            metrics.DUPLICATES.labels("steps").inc()
        elif status != "new":
            metrics.LATE.labels("steps").inc()
            await self.ctx.late("steps", why())
        if closed:
            await self.close(key, st, closed)

    @staticmethod
    def _outcome(c: windows.ClosedStep) -> str:
        return "incomplete" if c.incomplete else "timeout" if c.timed_out else "complete"


class _L2Steps:
    """L2 over a sliding window of closed steps whose group windows sit in a table, as
    columnar batches (:mod:`argus.detectors.columnar`).

    ``h["recent"]`` lists ``(step, [block, ...])`` of the closed steps; the windows of a
    step are under ``<job>|<step>|b<block>`` (lists of
    :func:`~argus.detectors.columnar.batch_to_json`; the per-group :func:`window_to_json` of a
    worker before batches are read too), joined across blocks once per step into a cache
    (rebuilt from the table after a restart), then over the last ``l2_window_steps`` steps by
    concatenation, and judged one vectorised screen per batch
    (:func:`~argus.detectors.columnar.detect_batches`). Where a group changed shape (a rank
    missing in a step, phases that differ) the window's groups are merged one by one
    (:func:`argus.detectors.inputs.merge_group_windows`): the same findings either way.
    """

    def __init__(self, ctx: RoleContext, table: str) -> None:
        self.ctx = ctx
        self.width = ctx.pcfg.l2_window_steps
        self.long = max(ctx.pcfg.l2_small_window_steps, self.width)
        self.table = ctx.table(table)
        # key -> step -> that step's joined batches, for the most recently active keys
        self.cache: OrderedDict[str, dict[int, list[GroupBatch]]] = OrderedDict()

    def store(
        self,
        job: str,
        step: int,
        blk: int,
        entries: list[dict[str, Any]],
        *,
        whole: tuple[str, list[GroupBatch]] | None = None,
    ) -> None:
        """Keep a block's windows of ``step`` (JSON); ``whole=(key, batches)`` when they are
        all the step has under ``key`` (one block): cached as they are, not decoded again."""
        if entries:
            self.table[f"{job}|{step}|b{blk}"] = entries
        if whole is not None:
            self.cache.setdefault(whole[0], {})[step] = whole[1]

    def joined(self, key: str, job: str, step: int, blocks: Sequence[int]) -> list[GroupBatch]:
        """The batches of ``step`` joined across ``blocks``: once per step, again only after
        a restart (or once the key left the cache)."""
        cache = self.cache.setdefault(key, {})
        cached = cache.get(step)
        if cached is None:
            parts = [
                batch_from_json(job, g)
                if isinstance(g.get("gs"), list)
                else _one_group(window_from_json(job, g))
                for blk in blocks
                for g in self.table.get(f"{job}|{step}|b{blk}") or ()
            ]
            joined = join_blocks(parts)
            if joined is None:  # not of one shape per group: the general join
                wins = merge_group_windows(w for b in parts for w in b.windows())
                joined = [_one_group(w) for w in wins]
            cached = cache[step] = joined
        return cached

    def run(self, key: str, job: str, h: BlockHistory) -> list[Finding]:
        _trim(self, key, job, h)
        t0 = time.perf_counter()
        per_step = [self.joined(key, job, step, blocks) for step, blocks in h["recent"]]
        cfg = self.ctx.detectors.l2
        short = per_step[-self.width :]
        small, rest = split_small(per_step)
        if any(small):  # small groups over the long window (argus.detectors.l2_small)
            short = rest[-self.width :]
            out = _detect(short, cfg) + _detect(small, small_config(cfg, len(small), self.width))
            out.sort(key=lambda f: (f.group_kind, f.group_id))  # as one call orders them
        else:
            out = _detect(short, cfg)
        metrics.DETECT_S.labels("L2").observe(time.perf_counter() - t0)
        return out


def _detect(per_step: Sequence[Sequence[GroupBatch]], cfg: L2Config) -> list[Finding]:
    """L2 of the sliding window whose steps' batches are ``per_step``."""
    batches = join_steps(per_step)
    if batches is not None:
        return detect_batches(batches, cfg)
    # a group changed shape inside the window: merge its windows in general
    wins = [w for bs in per_step for b in bs for w in b.windows()]
    return detect_many(merge_group_windows(wins), cfg)


def _trim(l2s: _L2Steps, key: str, job: str, h: BlockHistory) -> None:
    """Keep the last ``width`` steps of ``h["recent"]`` (one entry per step, in step order),
    ``long`` when the key's newest step holds a small group
    (:mod:`argus.detectors.l2_small`), and drop the older steps' windows from the table and
    the cache."""
    # one entry per step, in step order: a restart may close a step again (the history
    # table's changelog can be ahead of the window state's), and rows are tuples when
    # made, lists once restored (JSON)
    h["recent"] = sorted({r[0]: r for r in h["recent"]}.values(), key=_first)
    cache = l2s.cache.setdefault(key, {})
    l2s.cache.move_to_end(key)
    while len(l2s.cache) > _CACHED_KEYS:
        l2s.cache.popitem(last=False)
    keep = l2s.width
    if l2s.long > keep and h["recent"]:  # (a block's part of a spanning group is smaller:
        step, blocks = h["recent"][-1]  # the joined groups tell)
        if any(is_small(b) for b in l2s.joined(key, job, step, blocks)):
            keep = l2s.long
    for step, blocks in h["recent"][:-keep]:
        cache.pop(step, None)
        for blk in blocks:
            k = f"{job}|{step}|b{blk}"
            if l2s.table.get(k) is not None:
                del l2s.table[k]
    h["recent"] = h["recent"][-keep:]


def _one_group(w: GroupWindow) -> GroupBatch:
    """A single window as a batch of one group."""
    it = w.iter_ns if w.iter_ns is not None else np.full(w.durations_ns.shape[:2], np.nan)
    return GroupBatch(
        job=w.job,
        group_kind=w.group_kind,
        group_ids=(w.group_id,),
        ranks=w.ranks[None],
        steps=w.steps,
        phases=w.phases,
        stream_kinds=w.stream_kinds,
        durations_ns=w.durations_ns[None],
        iter_ns=it[None],
        start_ns=np.array([w.start_ns], dtype=np.int64),
        end_ns=np.array([w.end_ns], dtype=np.int64),
    )


class StepBlocks(_Tier):
    """Tier 1: the step windows of one rank block (key ``job|b<block>``).

    Every record of the block's ranks is folded here; a step closes when all of the block's
    ranks reported or it timed out (:mod:`argus.streams.windows`). Its L2 group windows are
    built from the block's records; groups whose ranks all fall in the block (TP, EP, ... of
    a layout's rank order, :func:`argus.routing.group_span`) are judged here over
    the block's sliding window, the others travel on in the step's digest
    (:mod:`argus.streams.step_digest`) with the ids of the findings made here.
    """

    def __init__(self, ctx: RoleContext, levels: set[str]) -> None:
        self.ctx = ctx
        self.levels = levels  # shared with the job tier: filled by the role registrations
        self.routing = Routing.from_config(ctx.detectors.routing)
        self.lateness = ctx.pcfg.lateness_steps
        self.silent = min(ctx.pcfg.silent_steps, self.lateness)
        self.silent_ns = int(ctx.pcfg.silent_s * 1e9)
        self.idle = ctx.pcfg.idle_close_s
        self.seen = {}
        self.block_ranks = ctx.pcfg.steps_block_ranks
        self.cells = ctx.table("steps-cells")
        self.hist = ctx.table("steps-block-history")
        self.topo = Topology(self.routing)  # coords -> group ids and spans, once per rank
        self.l2 = _L2Steps(ctx, "steps-block-windows")
        self.out = ctx.internal_topic("steps-by-job")

    def new(self, key: str) -> BlockState:
        return BlockState(win=windows.new_state(), agg={}, l3={})

    async def add(self, key: str, st: BlockState, m: StepItem, now: float) -> None:
        job, blk = _split(key)
        status, closed = self._window_add(
            key,
            st,
            step=m["step"],
            rank=m["rank"],
            expected=block_size(m["world"], blk, self.block_ranks),
            now=now,
            part=str(m["part"]),
            t_ns=int(m["end_ns"]),
        )
        if status == "new":
            if "l2" in self.levels:
                cell = StepCell(
                    start_ns=m["start_ns"],
                    end_ns=m["end_ns"],
                    coords=m["coords"],
                    phases=m["phases"],
                )
                if "host" in m:
                    cell["host"] = m["host"]
                self.cells[f"{job}|{m['step']}|{m['rank']}"] = cell
            s = str(m["step"])
            st["agg"][s] = _fold(
                st["agg"].get(s),
                StepAggregate(
                    iter_ns=float(m["end_ns"] - m["start_ns"]),
                    start_ns=m["start_ns"],
                    end_ns=m["end_ns"],
                    world=m["world"],
                ),
            )
            if m["kernels"]:  # a kernel batch covers it: L3 scopes the funnel will wait for
                scopes = m["world"] // self.routing.expected_size(m["coords"], "dp")
                st["l3"][s] = max(scopes, st["l3"].get(s, 0))
        if status == "new" and not closed:
            return  # the usual report: nothing to count, nothing closed (no coroutine)
        await self._settle(
            key,
            st,
            status,
            closed,
            lambda: (
                f"late: step {m['step']} of {job} rank {m['rank']} closed without it (its"
                f" block's watermark passed it by {self.lateness} steps)"
            ),
        )

    async def close(self, key: str, st: BlockState, closed: list[windows.ClosedStep]) -> None:
        """One digest per closed step, L2 of the block's own groups judged after each step
        (so the findings do not depend on how many steps one event closed)."""
        job, blk = _split(key)
        h: BlockHistory = self.hist.get(key) or BlockHistory(recent=[], emitted=[])
        digests: list[Digest] = []
        for c in closed:
            metrics.WINDOWS.labels("steps-block", self._outcome(c)).inc()
            agg = st["agg"].pop(str(c.step), None)
            if agg is None:
                continue
            digest = Digest(
                step=c.step,
                block=blk,
                agg=agg,
                ranks=list(c.ranks),
                part=partition_of(key, self.ctx.pcfg.internal_partitions),  # of this block
            )
            if c.incomplete:
                digest["incomplete"] = True
            scopes = st["l3"].pop(str(c.step), 0)
            if scopes:
                digest["l3_scopes"] = scopes
            if "l2" in self.levels:
                cells, hosts = self._cells(job, c.step, c.ranks)
                own_b: list[GroupBatch] = []
                up: list[dict[str, Any]] = []  # the spanning groups, for the job tier
                for b in cell_batches(cells, self.topo, job=job):
                    mine = [
                        i
                        for i, co in enumerate(b.coords)
                        if self._inside(self.topo.span(co, b.group_kind))
                    ]
                    if len(mine) == len(b.group_ids):
                        own_b.append(b)
                        continue
                    if mine:
                        own_b.append(b.take(mine))
                    rest = sorted(set(range(len(b.group_ids))) - set(mine))
                    up.append(batch_to_json(b.take(rest)))
                self.l2.store(
                    job, c.step, blk, [batch_to_json(b) for b in own_b], whole=(key, own_b)
                )
                digest["transfer"] = batch_columns(  # the job tier compares all groups
                    own_b,
                    members=not st.get("hosts_sent") or c.step % _HOSTS_EVERY == 0,
                    receives=cell_receive_rows(cells, self.topo.kind_of, self._gid),
                )
                h["recent"].append((c.step, [blk]))
                sent = await emit_findings(
                    self.ctx, self.l2.run(key, job, h), h["emitted"], "steps"
                )
                digest["group_windows"] = up
                # the job tier announces them to the funnel with its progress
                digest["ids"] = {a["id"]: a["window_end_step"] for a in sent}
                if hosts and (not st.get("hosts_sent") or c.step % _HOSTS_EVERY == 0):
                    digest["hosts"] = hosts  # for the alerts (the funnel), now and then
                    st["hosts_sent"] = True
            digests.append(digest)
        if "l2" in self.levels and digests:
            self.hist[key] = h
        if digests:
            await self.ctx.send_keyed(self.out, job, {"items": digests, "t": time.time()})

    def _gid(self, coords: Mapping[str, Any], kind: str) -> str:
        """The id of the group of ``kind`` holding ``coords`` (the topology's table)."""
        return self.topo.gids(coords)[kind]

    def _inside(self, span: tuple[int, int]) -> bool:
        """Whether layout positions ``span`` (a group's lowest and highest) are one block's."""
        return block_of(span[0], self.block_ranks) == block_of(span[1], self.block_ranks)

    def _cells(
        self, job: str, step: int, ranks: tuple[int, ...]
    ) -> tuple[list[Cell], dict[str, str]]:
        """The cells of one closed step, taken out of the ``cells`` table as they are stored
        (:data:`argus.detectors.columnar.Cell`), and their ranks' hosts (``{rank: host}``)."""
        cells: list[Cell] = []
        hosts: dict[str, str] = {}
        table = self.cells
        for r in ranks:
            key = f"{job}|{step}|{r}"
            cell = table.get(key)
            if cell is None:
                continue
            del table[key]
            cells.append(
                (r, step, cell["start_ns"], cell["end_ns"], cell["coords"], cell["phases"])
            )
            if cell.get("host"):
                hosts[str(r)] = cell["host"]
        return cells, hosts


def _split(key: str) -> tuple[str, int]:
    """``job|b<block>`` -> (job, block)."""
    job, _, blk = key.rpartition("|b")
    return job, int(blk)


class JobSteps(_Tier):
    """Tier 2: the job's steps (key ``job``), from one digest per rank block and step.

    The blocks are this tier's sources (:mod:`argus.streams.windows`): a step closes when
    every block's digest arrived, or a block passed it without one, or the other blocks'
    watermark passed it by ``2 * lateness_steps + 1`` (a block with a stopped rank closes its
    step only after its own lateness). Ranks that never reported are those of the world no
    digest named, unless a block's step or the job's closed incomplete (who would have come
    is unknown: no ``missing_rank``, the findings carry ``incomplete_step``).
    """

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.levels: set[str] = set()
        self.lateness = 2 * ctx.pcfg.lateness_steps + 1
        self.idle = ctx.pcfg.idle_close_s
        self.seen = {}
        self.block_ranks = ctx.pcfg.steps_block_ranks
        self.hist = ctx.table("steps-history")
        self.l2 = _L2Steps(ctx, "steps-digests")
        self.transfer = TransferWindows(ctx)
        self.progress = ctx.internal_topic("funnel-jobs")

    def new(self, key: str) -> JobState:
        return JobState(win=windows.new_state(), agg={})

    async def add(self, job: str, st: JobState, m: Digest, now: float) -> None:
        status, closed = self._window_add(
            job,
            st,
            step=m["step"],
            rank=m["block"],
            expected=blocks_in(m["agg"]["world"], self.block_ranks),
            now=now,
            part=str(m["part"]),
        )
        if status == "new":
            self.l2.store(job, m["step"], m["block"], m.get("group_windows") or [])
            self.transfer.keep(job, m["step"], f"b{m['block']}", m.get("transfer") or [])
            s = str(m["step"])
            prev = st["agg"].get(s)
            ranks = prev["ranks"] if prev else []
            ranks += m["ranks"]  # the step's own list (made here), grown in place
            st["agg"][s] = JobStepAggregate(
                **_fold(_aggregate(prev) if prev else None, m["agg"]),
                ranks=ranks,
                ids={**(prev["ids"] if prev else {}), **m.get("ids", {})},
                incomplete=bool(prev and prev["incomplete"]) or m.get("incomplete", False),
                l3_scopes=max(prev["l3_scopes"] if prev else 0, m.get("l3_scopes", 0)),
            )
            if m.get("hosts"):  # the funnel learns them with the next progress
                st["hosts"] = {**st.get("hosts", {}), **m["hosts"]}
                self.transfer.keep_hosts(job, m["hosts"])
        await self._settle(
            job,
            st,
            status,
            closed,
            lambda: (
                f"late: step {m['step']} of {job} block {m['block']} closed without its"
                f" digest (the job's watermark passed it by {self.lateness} steps)"
            ),
        )

    async def close(self, job: str, st: JobState, closed: list[windows.ClosedStep]) -> None:
        """L1 and L2 after each closed step, in step order, then one progress message."""
        h: JobHistory = self.hist.get(job) or JobHistory(rows=[], recent=[], emitted=[])
        announced: dict[str, int] = {}  # findings of the blocks' tier, for the funnel
        done: list[tuple[int, int]] = []  # (step, L3 scopes that will judge it)
        for c in closed:
            agg = st["agg"].pop(str(c.step), None)
            if agg is None:
                continue
            a, b, world = agg["start_ns"], agg["end_ns"], agg["world"]
            incomplete = c.incomplete or agg["incomplete"]
            announced.update(agg["ids"])
            done.append((c.step, agg["l3_scopes"]))
            missing = [] if incomplete else _missing(world, agg["ranks"])
            metrics.WINDOWS.labels(
                "steps", "incomplete" if incomplete else "timeout" if missing else "complete"
            ).inc()
            found: list[Finding] = []
            if "l1" in self.levels:  # L1 trims it to its history
                h["rows"].append((c.step, agg["iter_ns"], a, b))
            if "l2" in self.levels:  # L2 trims it to its window
                h["recent"].append((c.step, list(c.ranks)))  # the blocks that reported
            if missing:
                metrics.MISSING.labels("steps").inc(len(missing))
                found.append(missing_finding(job, c.step, missing, world, a, b))
            if "l1" in self.levels:
                found += self._l1(job, h)
            if "l2" in self.levels:
                found += self.l2.run(job, job, h)
                joined = self.l2.joined(job, job, c.step, list(c.ranks))
                self.transfer.keep(job, c.step, "job", batch_columns(joined))
                found += self.transfer.closed(
                    job, c.step, agg["iter_ns"], (a, b), blocks_in(world, self.block_ranks)
                )
            if incomplete:
                found = [_incomplete(f, c.step) for f in found]
            sent = await emit_findings(self.ctx, found, h["emitted"], "steps")
            announced.update({a["id"]: a["window_end_step"] for a in sent})
        if done:  # after the findings, naming them: the funnel waits for them to arrive
            items = [
                StepProgress(progress=s, l3n=n) if n else StepProgress(progress=s) for s, n in done
            ]
            items[-1]["ids"] = announced
            hosts = st.pop("hosts", None)
            if hosts:
                items[-1]["hosts"] = hosts
            await self.ctx.send_keyed(self.progress, job, {"items": items, "t": time.time()})
        self.hist[job] = h

    def _l1(self, job: str, h: JobHistory) -> list[Finding]:
        h["rows"] = sorted({r[0]: r for r in h["rows"]}.values(), key=_first)[-_HISTORY:]
        t0 = time.perf_counter()
        s, it, a, b = (list(x) for x in zip(*h["rows"], strict=True))
        out = l1.detect(s, it, job=job, cfg=self.ctx.detectors.l1, start_ns=a, end_ns=b)
        metrics.DETECT_S.labels("L1").observe(time.perf_counter() - t0)
        return out


def _missing(world: int, ranks: Sequence[int]) -> list[int]:
    """The ranks of ``range(world)`` not in ``ranks``, ascending (a full step: none, found
    without building the world's set)."""
    seen = set(ranks)
    if seen and len(seen) == world and min(seen) == 0 and max(seen) == world - 1:
        return []
    return sorted(set(range(world)) - seen)


def _aggregate(a: JobStepAggregate) -> StepAggregate:
    return StepAggregate(
        iter_ns=a["iter_ns"], start_ns=a["start_ns"], end_ns=a["end_ns"], world=a["world"]
    )


def _first(row: Sequence[Any]) -> Any:
    """Sort key of state rows: their step (rows are tuples when made, lists once restored
    from a table, and the two do not compare)."""
    return row[0]


def _incomplete(f: Finding, step: int) -> Finding:
    """``f`` judged right after ``step`` closed incomplete: its evidence says so."""
    return dataclasses.replace(f, evidence={**f.evidence, "incomplete_step": str(step)})


def route_step(
    rec: Mapping[str, Any], block_ranks: int = PipelineConfig.steps_block_ranks, part: int = 0
) -> list[tuple[str, StepItem]]:
    """The router's re-keyed item of one step record: ``[(job|b<block>, slim record)]``.

    The block is that of the rank's layout position (:func:`argus.routing.rank_of`
    of its coords), so a block holds whole groups whatever the job's rank numbering.
    ``rec["phases"]`` may be a :class:`~argus.schemas.step_body_reader.PhaseRows` (the
    recorded steps ``argus diagnose`` reads): its rows are taken as they are."""
    world, pos = _place(rec["coords"])
    start = rec["start_ns"]
    item = StepItem(
        rank=rec["rank"],
        step=rec["step"],
        start_ns=rec["start_ns"],
        end_ns=rec["end_ns"],
        world=world,
        coords=rec["coords"],
        phases=_phase_rows(rec["phases"], start),
        kernels=bool((rec.get("collector") or {}).get("kernels", False)),
        part=part,
    )
    if rec.get("host"):
        item["host"] = str(rec["host"])
    return [(block_key(rec["job"], block_of(pos, block_ranks)), item)]


def _phase_rows(phases: Sequence[Any], start: int) -> list[tuple[str, str, int, int]]:
    """A step record's phases as :class:`~argus.streams.roles.state.StepItem` rows
    ``(name, stream kind, duration ns, start ns)``; ``start``: the step's start (ns), a
    phase's without its own."""
    if type(phases) is PhaseRows:  # rows already (a copy: the item owns its list)
        return list(phases)
    return [
        (
            p["name"],
            p.get("stream_kind", "compute"),
            p["duration_ns"],
            p.get("start_ns", start),
        )
        for p in phases
    ]
