"""The L3 role: kernel distributions per scope group, on event time.

Pure (no faust, no Kafka): a driver routes each ``kernel_summary`` with
:func:`route_summary` to its scope group and runs :class:`L3Windows` on it (the faust agent
of :mod:`argus.streams.agents.kernels`, or :mod:`argus.streams.memory`).

The summaries of a scope's open block (its *cells*) live in process memory only, decoded
as they arrive, not in a changelogged table: a driver that can lose its memory gives a
:class:`CellHolder`, and keeps the input of every cell held (uncommitted) until its block
was judged, so a restarted worker reads the open blocks' summaries again (docs/pipeline.md,
"Delivery guarantees"). A summary read again for a window the restored state already has
is kept again when its block is not judged yet, and ignored as a duplicate otherwise.
"""

from __future__ import annotations

import base64
import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from argus.detectors.l3_window import WireSummary, detect_window, table_from_wire, wire_summary
from argus.routing import Routing
from argus.streams import metrics, windows
from argus.streams.roles.context import RoleContext, emit_findings
from argus.streams.roles.state import KernelItem, L3Progress, L3State
from argus.summaries.summary_record import KernelNames

__all__ = [
    "ROUTED_HEADER",
    "CellHolder",
    "L3Windows",
    "RecentRecords",
    "route_summary",
    "route_window",
]

ROUTED_HEADER = "argus-l3-routed"
"""Kafka header of a ``summary.kernels`` record whose L3 item its compressor already sent to
the scope (``l3-scopes``) itself: L3's router skips it undecoded. Summaries without it (other
producers, an older compressor) are routed by L3 as before; one routed twice (an older L3
router during an upgrade) is a duplicate its scope ignores."""


class CellHolder(Protocol):
    """Where a driver keeps the input of the cells in memory from being committed."""

    def hold(self, scope: str, block: int) -> None:
        """The item being added is now a cell of ``block`` (window id // l3_windows) of
        scope ``scope``: its input must be read again after a restart until released."""

    def release(self, scope: str, block: int) -> None:
        """Block ``block`` of ``scope`` was judged (its findings and progress sent)."""


def route_summary(
    rec: Mapping[str, Any], value: bytes, routing: Routing, part: int = 0, offset: int = -1
) -> list[tuple[str, KernelItem]]:
    """The routed item of one ``kernel_summary`` (``value``: its encoded bytes; ``part``,
    ``offset``: where it came from): ``[(job/dp/<scope group>, item)]``. Of ``rec`` only
    ``job``, ``rank``, ``window_id``, ``coords`` and ``kernel_names`` are read."""
    sid, expected = routing.scope_of(rec["coords"], "dp")
    return [
        (
            f"{rec['job']}/dp/{sid}",
            KernelItem(
                rank=rec["rank"],
                window=rec["window_id"],
                expected=expected,
                blob=value,
                part=part,
                offset=offset,
                # names this summary announces, kept by the scope (a restart needs them)
                names={str(int(n["id"])): str(n["name"]) for n in rec.get("kernel_names") or ()},
            ),
        )
    ]


def route_window(
    batch: Mapping[str, Any], value: bytes, names: Mapping[int, str], routing: Routing, part: int
) -> list[tuple[str, KernelItem]]:
    """:func:`route_summary` of the summary made of raw window ``batch`` (a
    ``kernel_batch``: its job, rank, window id and coords) where it is made: ``value`` its
    encoded bytes, ``names`` the kernel names it announces (id -> name), ``part`` the raw
    record's partition (offset -1: no source offset on ``summary.kernels``)."""
    rec = {
        "job": batch["job"],
        "rank": batch["rank"],
        "window_id": batch["window_id"],
        "coords": batch.get("coords") or {},
        "kernel_names": [{"id": k, "name": n} for k, n in names.items()],
    }
    return route_summary(rec, value, routing, part)


class RecentRecords:
    """The newest ``size`` decoded summaries by where they came from (partition, offset):
    the router puts what it decoded, the window agent of the same process takes it instead
    of decoding the item again (a miss, e.g. a scope owned by another process or a restart,
    decodes)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._recs: OrderedDict[tuple[int, int], Mapping[str, Any]] = OrderedDict()

    def put(self, part: int, offset: int, rec: Mapping[str, Any]) -> None:
        self._recs[(part, offset)] = rec
        if len(self._recs) > self.size:
            self._recs.popitem(last=False)

    def take(self, part: int, offset: int) -> Mapping[str, Any] | None:
        return self._recs.pop((part, offset), None)


class L3Windows:
    """L3 per scope group (key ``job/dp/<group id>``: ranks doing the same work).

    A kernel window closes on event time (:mod:`argus.streams.windows`: every rank of the
    scope accounted for, or the scope's watermark passed it by ``l3_lateness_windows``); the
    pure detector (:func:`argus.detectors.l3_window.detect_window`) runs on the merged
    summaries of each block of ``l3_windows`` window ids, blocks aligned on window ids
    (``window_id // l3_windows``) like the funnel's windows; then a progress message tells the
    funnel up to which window id the scope was judged, naming the findings just sent.
    """

    def __init__(
        self,
        ctx: RoleContext,
        routing: Routing,
        holder: CellHolder | None = None,
        recent: RecentRecords | None = None,
    ) -> None:
        self.ctx = ctx
        self.cfg = ctx.detectors.l3
        self.routing = routing
        self.holder = holder
        self.recent = recent  # what this process's router decoded
        # cell key ``scope|window|rank`` -> the columns of its summary (process memory)
        self.cells: dict[str, WireSummary] = {}
        self.names = KernelNames()
        self.name_table = ctx.table("l3-names")  # scope -> {kernel id: name} announced
        self.block = ctx.pcfg.l3_windows
        self.progress = ctx.internal_topic("funnel-jobs")
        self.lateness = ctx.pcfg.l3_lateness_windows
        self.idle = ctx.pcfg.idle_close_s
        self.seen: dict[str, float] = {}  # key -> last input in this process (idle bound only)

    def new(self, key: str) -> L3State:
        return L3State(win=windows.new_state(), block=[], emitted=[])

    async def add(
        self,
        gk: str,
        st: L3State,
        m: KernelItem,
        now: float,
        decoded: Mapping[str, Any] | None = None,
    ) -> None:
        """Take one routed summary; ``decoded``: the record ``m`` encodes, when the driver
        has it (not decoded again then).

        Raises
        ------
        DecodeError, BatchError
            The summary does not decode (after the windows took it into account: the
            block goes on without it).
        """
        self.seen[gk] = now
        status, closed = windows.add(
            st["win"],
            step=m["window"],
            rank=m["rank"],
            expected=m["expected"],
            lateness=self.lateness,
            part=str(m["part"]),
        )
        if m["names"]:
            self._keep_names(gk, m["names"])
        cell = f"{gk}|{m['window']}|{m['rank']}"
        failed: Exception | None = None
        if status == "new" or (
            status == "dup" and cell not in self.cells and _unjudged(st, m["window"], m["rank"])
        ):  # new, or read again after a restart (its cell was in the lost memory)
            try:
                self._keep(gk, cell, m, decoded)
            except Exception as exc:  # raised once its window is taken care of
                failed = exc
        elif status == "dup":
            metrics.DUPLICATES.labels("l3").inc()
        else:
            metrics.LATE.labels("l3").inc()
            await self.ctx.late(
                "l3",
                f"late: kernel window {m['window']} of {gk} rank {m['rank']} closed without it (the"
                f" scope's watermark passed it by {self.lateness} windows)",
            )
        if closed:
            await self.on_closed(gk, st, closed)
        if failed is not None:
            raise failed

    def _keep(self, gk: str, cell: str, m: KernelItem, decoded: Mapping[str, Any] | None) -> None:
        """Decode the summary into its cell and hold its input until its block is judged."""
        if decoded is None and self.recent is not None and m.get("offset", -1) >= 0:
            decoded = self.recent.take(int(m["part"]), int(m["offset"]))
        if decoded is None:
            blob = m.get("blob")
            if blob is None:  # an item routed before blobs
                blob = base64.b64decode(m.get("summary") or "")
            decoded = self.ctx.codec.decode_as("kernel_summary", blob)
        self.cells[cell] = wire_summary(decoded)
        if self.holder is not None:
            self.holder.hold(gk, int(m["window"]) // self.block)

    def forget(self, mine: Callable[[str], bool]) -> None:
        """Drop the cells of the scopes for which ``mine(scope)`` is false (their input
        partitions went to another worker, which reads them again)."""
        for cell in [c for c in self.cells if not mine(c.split("|", 1)[0])]:
            del self.cells[cell]

    def _keep_names(self, gk: str, names: dict[str, str]) -> None:
        """Kernel names announced to this scope, in a table: the compressor announces a
        rank's names once (again every 32 windows), so a restarted worker must not lose
        them with its memory."""
        kept = self.name_table.get(gk) or {}
        if not names.items() <= kept.items():  # a name not kept yet, or kept otherwise
            self.name_table[gk] = {**kept, **names}

    async def tick(self, gk: str, st: L3State, now: float) -> bool:
        """The idle bound, the only processing-time rule: a scope without input in this
        process for ``idle_close_s`` closes its pending windows incomplete and runs its last,
        partial block (a finished or stalled job)."""
        last = self.seen.setdefault(gk, now)
        if not (st["win"]["pending"] or st["block"]) or now - last < self.idle:
            return False
        await self.finish(gk, st)
        return True

    async def finish(self, gk: str, st: L3State) -> None:
        """Close every pending window incomplete and judge the partial block (idle, or the
        end of the offline driver's input)."""
        closed = windows.flush(st["win"])
        if closed:
            await self.on_closed(gk, st, closed)
        if st["block"]:
            await self.run_block(gk, st, (int(st["block_id"]) + 1) * self.block - 1)

    async def on_closed(self, gk: str, st: L3State, closed: list[windows.ClosedStep]) -> None:
        """Blocks of ``l3_windows`` window ids, aligned: a block runs when its last window
        closed or a window of a later block did (event time only); either way L3 then has
        judged every window below the next block, which its progress tells the funnel."""
        for c in closed:
            outcome = "incomplete" if c.incomplete else "timeout" if c.timed_out else "complete"
            metrics.WINDOWS.labels("l3", outcome).inc()
            b = c.step // self.block
            if st["block"] and b != st.get("block_id"):
                await self.run_block(gk, st, b * self.block - 1)
            if not st["block"]:
                st["block_id"] = b
            st["block"].append((c.step, list(c.ranks)))
            if c.incomplete:
                st["block_inc"] = c.step
            if c.step % self.block == self.block - 1:  # the block's last window
                await self.run_block(gk, st, c.step)

    async def run_block(self, gk: str, st: L3State, upto: int) -> None:
        """Judge the open block; then tell the funnel that L3 judged this scope's windows
        up to window id ``upto`` (steps: the collectors number windows by first step)."""
        job = gk.split("/", 1)[0]
        block_id = st.get("block_id")
        todo, st["block"] = st["block"], []
        incomplete = st.pop("block_inc", None)  # a window of it closed incomplete
        records: list[WireSummary] = []
        for w, ranks in todo:
            for r in ranks:
                ws = self.cells.pop(f"{gk}|{w}|{r}", None)
                if ws is not None:  # None: it did not decode (sent to the DLQ)
                    records.append(ws)
        if records:
            self.names.merge(self.name_table.get(gk) or {})  # after a restart too
        sent = await self._judge(job, records, incomplete, st["emitted"]) if records else []
        # naming the findings just sent: they reach the funnel one hop later (anomalies)
        ids = {a["id"]: a["window_end_step"] for a in sent}
        await self.ctx.send_keyed(
            self.progress,
            job,
            {"items": [L3Progress(scope=gk, upto=upto, ids=ids)], "t": time.time()},
        )
        if self.holder is not None and block_id is not None:
            self.holder.release(gk, int(block_id))

    async def _judge(
        self,
        job: str,
        items: list[WireSummary],
        incomplete: int | None,
        emitted: list[str],
    ) -> list[dict[str, Any]]:
        records = [w.record for w in items]
        window = (
            min(int(r["window_id"]) for r in records),
            max(int(r["window_id"]) for r in records),
            min(int(r["window_start_ns"]) for r in records),
            max(int(r["window_end_ns"]) for r in records),
        )
        metrics.BEHIND_S.labels("L3").observe(max(0.0, time.time() - window[3] / 1e9))
        t0 = time.perf_counter()
        self.names.update_many(records)
        found = detect_window(
            job,
            table_from_wire(items, self.names),
            window=window,
            cfg=self.cfg,
            routing=self.routing,
        )
        metrics.DETECT_S.labels("L3").observe(time.perf_counter() - t0)
        if incomplete is not None:
            found = [
                dataclasses.replace(f, evidence={**f.evidence, "incomplete_step": str(incomplete)})
                for f in found
            ]
        return await emit_findings(self.ctx, found, emitted, "l3")


def _unjudged(st: L3State, window: int, rank: int) -> bool:
    """Whether ``rank``'s summary of ``window`` is one the scope's state waits to judge: the
    window pending with it, or closed with it into the open block."""
    pend = st["win"]["pending"].get(str(window))
    if pend is not None:
        return rank in pend["got"]
    return any(w == window and rank in ranks for w, ranks in st["block"])
