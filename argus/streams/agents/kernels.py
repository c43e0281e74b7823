"""Faust agents of the kernel roles: the compressor, and L3's router and window agent.

* **compressor**: ``argus.raw.kernels`` -> ``argus.summary.kernels``, one summary per window
  (what :func:`argus.summaries.summary_record.summarize_batch` gives), same key
  (``job/rank``). It works per poll: the records already delivered to it (up to
  ``_POLL_MAX``) are decoded and checked one by one, the complete windows of each run of up
  to ``CHUNK_EVENTS`` kernel events (~65 windows of 3,000) compressed in one call
  (:class:`~argus.summaries.summary_record.SummarizedBatches`) while the run's columns are
  still in cache, the summaries sent in input order, then the poll's records acknowledged.
  A window
  split into parts (``part``/``parts``, :mod:`argus.schemas.kernel_parts`) is merged first
  (:class:`~argus.schemas.kernel_parts.PartAssembler`); a window whose parts stop coming (the
  rank's next window arrives first, or none for ``_PART_MAX_AGE_S``) sends the parts it has to
  the DLQ, ``incomplete-batch``. No commit passes a held part's offset until its window is
  summarised or given up (:mod:`argus.streams.held`), so a restart mid-window re-reads the
  window from its first part.
  Kernel names travel as 32-bit ids; each rank's names are announced once, and again every
  ``REANNOUNCE_WINDOWS`` windows so a consumer that starts late learns them
  (:class:`~argus.summaries.summary_record.NameAnnouncements`). One window in
  ``fidelity_every`` is also kept raw for the live fidelity check
  (:func:`argus.streams.fidelity.check_batches`), whose Spearman figure is a metric.
  Each summary's L3 item goes to its scope on ``l3-scopes`` from here, one message per scope
  and poll, and the summary carries the header
  :data:`~argus.streams.roles.l3.ROUTED_HEADER` (docs/pipeline.md, "The compressor routes
  L3 itself").
* **l3**: the compressors' items, and (``streams.l3_route_summaries``) the summaries other
  producers wrote, validated and re-keyed by scope group
  (:func:`argus.streams.roles.l3.route_summary`; marked summaries skipped); the role
  :class:`~argus.streams.roles.l3.L3Windows` judges them. The open blocks' summaries are
  kept in memory (no changelog): each one's ``l3-scopes`` offset is held uncommitted
  (:mod:`argus.streams.held`) until its block was judged, so a restarted worker reads them
  again (:class:`HeldCells`). The router hands what it decoded to the window agent in the
  same process (:class:`~argus.streams.roles.l3.RecentRecords`), and the summary crosses
  ``l3-scopes`` as raw bytes after the message's JSON (``argus.streams.app.BLOB``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, cast

import faust

from argus.kafka.admin import partition_count
from argus.malloc import keep_freed_blocks
from argus.routing import Routing
from argus.schemas.kernel_parts import Incomplete, PartAssembler
from argus.streams import held as held_offsets
from argus.streams import metrics
from argus.streams.app import (
    Ctx,
    add_lag_gauge,
    current_event,
    guarded,
    item_bytes,
    note_consumed,
    route_batches,
    run_polls,
    send_rekeyed,
    window_agent,
)
from argus.streams.fidelity import check_batches
from argus.streams.roles.context import partition_of
from argus.streams.roles.l3 import (
    ROUTED_HEADER,
    L3Windows,
    RecentRecords,
    route_summary,
    route_window,
)
from argus.streams.validate import checker
from argus.summaries import summary_record
from argus.summaries.summary_record import BatchColumns, NameAnnouncements, SummarizedBatches

__all__ = ["register_compressor", "register_l3"]

log = logging.getLogger("argus.streams")

_POLL_MAX = 256  # raw records the compressor takes into one summarize call at most
_POLL_YIELDS = 4  # turns of the loop (no time) a poll gives the consumer to hand over more
_FIDELITY_MIN_RANKS = 8
_FIDELITY_WAIT_S = 10.0
# a split window's parts leave its producer together (librdkafka retries a part for at most
# message.timeout.ms, 30 s); one held longer than this will not complete
_PART_MAX_AGE_S = 120.0


Routed = dict[str, list[tuple[faust.EventT, tuple[bytes, bytes | None]]]]
"""A poll's L3 items by scope key, as :func:`argus.streams.app.send_rekeyed` takes them."""


def register_compressor(ctx: Ctx) -> None:
    keep_freed_blocks()  # a poll's numpy temporaries reuse heap pages (argus.malloc)
    src = ctx.external("raw.kernels")
    routing = Routing.from_config(ctx.detectors.routing)  # L3's: the same [detectors] config
    scopes = ctx.internal_topic("l3-scopes")
    announced = NameAnnouncements()  # per job/rank: the kernel ids its summaries named
    sample: dict[tuple[str, int], dict[str, Any]] = {}  # (job, window) -> batches/summaries
    checked: OrderedDict[tuple[str, int], None] = OrderedDict()  # windows already judged
    parts = PartAssembler()  # split windows' parts until the last one arrives

    async def fidelity(now: float, force: bool = False) -> None:
        for key in list(sample):
            s = sample[key]
            if len(s["batches"]) < _FIDELITY_MIN_RANKS and not (
                force or now - s["t0"] > _FIDELITY_WAIT_S
            ):
                continue
            del sample[key]
            checked[key] = None  # one check per sampled window, not one per 8 of its ranks
            while len(checked) > 4096:
                checked.popitem(last=False)
            if len(s["batches"]) < 4:
                continue
            t0 = time.perf_counter()
            rep = check_batches(s["batches"], summaries=s["summaries"])
            metrics.DETECT_S.labels("fidelity").observe(time.perf_counter() - t0)
            if rep.n_groups:
                metrics.FIDELITY.labels(key[0]).set(rep.spearman_median)
                metrics.FIDELITY_F1.labels(key[0]).set(rep.flag_agreement)

    counts: list[int | None] = []  # partitions of summary.kernels, read once

    async def same_partition(raw_partition: int) -> int | None:
        """The raw partition's number on summary.kernels, when it has that many."""
        if not counts:
            read = functools.partial(partition_count, ctx.settings, ctx.topic("summary.kernels"))
            try:
                counts.append(await asyncio.get_running_loop().run_in_executor(None, read))
            except Exception:  # metadata unreadable: hash the key, as before
                counts.append(None)
        n = counts[0]
        return raw_partition if n is not None and raw_partition < n else None

    records_in = metrics.RECORDS_IN.labels("compressor", "raw.kernels")  # children cached:
    records_out = metrics.RECORDS_OUT.labels("compressor", "summary.kernels")  # no lookups
    poll_size = metrics.ROUTER_POLL.labels("compressor")
    ratio_of: dict[str, Any] = {}  # job -> its compression-ratio gauge child

    async def take(
        event: faust.EventT,
    ) -> tuple[dict[str, Any], Mapping[str, Any], BatchColumns | None] | None:
        """Decode, check and merge one raw record: the whole window when it is complete, and
        its columns when it is this record (one part: unpacked once, by the check)."""
        records_in.inc()
        note_consumed(event)
        try:
            piece = ctx.codec.decode_as("kernel_batch", event.message.value or b"")
            cols = checker(ctx).kernel_batch_columns(piece, broker_s=event.message.timestamp)
            whole, given_up = hold_part(piece, event)
        except Exception as exc:
            await ctx.dlq(event, exc, "compressor")
            return None
        await release_parts(given_up)
        return None if whole is None else (piece, whole, cols if whole is piece else None)

    # A split window's parts are held in memory until its last part: each held part's offset
    # is held uncommitted (argus.streams.held) until the window is summarised or given up
    # (DLQ), so a restart mid-window re-reads the window from its first part.
    held = held_offsets.install(ctx.app)

    def hold_part(piece: Mapping[str, Any], event: faust.EventT) -> Any:
        msg = event.message
        split = isinstance(piece.get("parts"), int) and piece["parts"] > 1
        if split:
            held.hold(msg.tp, msg.offset)
        try:
            return parts.add(piece, event)
        except Exception:
            if split:
                held.release(msg.tp, msg.offset)
            raise

    async def release_parts(given_up: list[Incomplete], assigned: Any = None) -> None:
        """DLQ the parts of windows given up (those of partitions still ``assigned``, when
        given: a revoked partition's new owner re-reads them from the held offset), then
        release every part's offset."""
        for gone in given_up:
            err = gone.error()
            for ev in gone.tokens:
                if assigned is None or ev.message.tp in assigned:
                    await ctx.dlq(ev, err, "compressor")
                held.release(ev.message.tp, ev.message.offset)
        for ev in parts.take_released():
            held.release(ev.message.tp, ev.message.offset)

    async def emit(
        event: faust.EventT,
        piece: dict[str, Any],
        batch: Mapping[str, Any],
        done: SummarizedBatches,
        i: int,
        routed: Routed,
    ) -> None:
        """Announce, encode and send window i of ``done`` (a summarised poll), and add its
        L3 item to ``routed`` (sent to its scope after the poll's summaries)."""
        who = f"{batch['job']}/{batch['rank']}"
        known = announced.known(who)
        job, w = batch["job"], int(batch["window_id"])
        # the record itself only for a window the fidelity check may sample
        rec = done.record(i, announced=known) if w % ctx.pcfg.fidelity_every == 0 else None
        data, named = done.encoded(i, ctx.codec, announced=known)  # = encode(record(i))
        known.update(named)
        # on the raw record's partition number: the summaries of one raw partition
        # stay together, so L3's per-partition watermark sees the compressor's own
        # catch-up skew between raw partitions (keys would hash them elsewhere)
        part = await same_partition(event.message.partition)
        item = l3_item(event, batch, data, done.names_of(i, named))
        headers = [(ROUTED_HEADER, b"1")] if item else None
        await ctx.send(
            ctx.external("summary.kernels"), who.encode(), data, partition=part, headers=headers
        )
        records_out.inc()
        for key, it in item:
            routed.setdefault(key, []).append((event, item_bytes(it)))
        raw = event.message.value or b""
        raw_bytes = len(raw) * int(piece.get("parts", 1))  # ~: parts are near one size
        gauge = ratio_of.get(job)
        if gauge is None:
            gauge = ratio_of[job] = metrics.COMPRESSION.labels(job)
        gauge.set(raw_bytes / max(len(data), 1))
        if rec is not None and (job, w) not in checked:
            s = sample.setdefault((job, w), {"t0": time.time(), "batches": [], "summaries": []})
            s["batches"].append(batch)
            s["summaries"].append(rec)
            await fidelity(time.time())

    def l3_item(
        event: faust.EventT, batch: Mapping[str, Any], data: bytes, names: Mapping[int, str]
    ) -> list[tuple[str, Any]]:
        """The summary's item for its L3 scope (:func:`~argus.streams.roles.l3.route_window`
        of its raw window), its part the raw record's partition (where L3's
        per-partition watermark sees this compressor's catch-up skew). When its coords name
        no scope: [] while L3 routes other producers' summaries (L3's router then reads
        this one and sends it to the DLQ with the reason), else the error (the raw record
        goes to the DLQ here)."""
        try:
            return route_window(batch, data, names, routing, event.message.partition)
        except Exception:
            if not ctx.pcfg.l3_route_summaries:
                raise
            return []

    async def poll(events: list[faust.EventT]) -> None:
        """The events taken in one poll, in runs of up to ``CHUNK_EVENTS`` kernel events (a
        run's columns are still in cache when compressed): each run's complete windows
        compressed in one call
        (:class:`~argus.summaries.summary_record.SummarizedBatches`), then sent in order."""
        poll_size.observe(len(events))
        ready: list[tuple[faust.EventT, dict[str, Any], Mapping[str, Any], Any]] = []
        n_events = [0]  # in ready

        async def one(event: faust.EventT) -> None:
            got = await take(event)
            if got is not None:
                ready.append((event, *got))
                n_events[0] += len(got[1].get("duration_ns") or b"") // 8

        for event in events:
            await guarded(ctx, event, "compressor", functools.partial(one, event))
            if n_events[0] > summary_record.CHUNK_EVENTS and len(ready) > 1:
                last = ready.pop()  # the window that made the run too long starts the next
                await summarize(ready)
                ready[:] = [last]
                n_events[0] = len(last[2].get("duration_ns") or b"") // 8
        if ready:
            await summarize(ready)

    async def summarize(
        ready: list[tuple[faust.EventT, dict[str, Any], Mapping[str, Any], Any]],
    ) -> None:
        """Compress ``ready``'s windows in one call, then send their summaries in order,
        then their L3 items (one message per scope, :func:`~argus.streams.app.send_rekeyed`)."""
        routed: Routed = {}
        try:
            done: SummarizedBatches | None = SummarizedBatches(
                [w for _, _, w, _ in ready], columns=[c for _, _, _, c in ready]
            )
        except Exception:  # one bad window must not cost the others: one at a time
            log.exception("compressor: a poll of %d windows failed; one at a time", len(ready))
            done = None
        for i, (event, piece, whole, _) in enumerate(ready):
            src, j = done, i
            if src is None:
                try:
                    src, j = SummarizedBatches([whole]), 0
                except Exception as exc:
                    await ctx.dlq(event, exc, "compressor")
                    continue
            await guarded(
                ctx,
                event,
                "compressor",
                functools.partial(emit, event, piece, whole, src, j, routed),
            )
        await send_rekeyed(ctx, scopes, routed, "compressor")

    @ctx.app.agent(src, name="compressor")
    async def compressor(stream: faust.StreamT) -> None:
        # Per poll, not per record: the events already delivered to this agent (up to
        # _POLL_MAX) are compressed together, then acknowledged (faust's auto-ack would
        # acknowledge each as the next one is taken, before its summary was sent).
        # Nothing waits for more input (faust's take() stalled low-volume agents): a lone
        # record is compressed at once.
        await run_polls(stream, poll, max_events=_POLL_MAX, yields=_POLL_YIELDS)

    @ctx.app.timer(interval=2.0, name="compressor-fidelity")
    async def _fidelity_timer() -> None:
        await fidelity(time.time())
        # windows whose remaining parts never came (the rank sent nothing more)
        expired = parts.expire(_PART_MAX_AGE_S)
        if expired:
            await release_parts(expired, assigned=ctx.app.consumer.assignment())

    add_lag_gauge(ctx, "compressor", [ctx.topic("raw.kernels")])


class HeldCells:
    """The L3 cells' input offsets, held uncommitted per (scope, block) until the block was
    judged (:class:`~argus.streams.roles.l3.CellHolder` over :mod:`argus.streams.held`)."""

    def __init__(self, held: held_offsets.HeldOffsets) -> None:
        self.held = held
        self.blocks: dict[tuple[str, int], set[tuple[Any, int]]] = {}

    def hold(self, scope: str, block: int) -> None:
        ev = current_event()
        if ev is None:
            return
        where = (ev.message.tp, ev.message.offset)
        mine = self.blocks.setdefault((scope, block), set())
        if where not in mine:  # once per message and block: a message holds many items
            mine.add(where)
            self.held.hold(*where)

    def release(self, scope: str, block: int) -> None:
        for tp, offset in self.blocks.pop((scope, block), ()):
            self.held.release(tp, offset)

    def forget(self, tps: Iterable[Any]) -> None:
        """Release every offset held on these partitions (revoked: their new owner reads
        from the committed offset)."""
        gone = set(tps)
        for key, mine in list(self.blocks.items()):
            for where in [w for w in mine if w[0] in gone]:
                mine.discard(where)
                self.held.release(*where)
            if not mine:
                del self.blocks[key]


def register_l3(ctx: Ctx) -> None:
    routing = Routing.from_config(ctx.detectors.routing)
    src = ctx.external("summary.kernels")
    scopes = ctx.internal_topic("l3-scopes")
    holder = HeldCells(held_offsets.install(ctx.app))
    recent = RecentRecords()
    l3 = L3Windows(ctx, routing, holder, recent)
    name = scopes.get_topic_name()

    async def route(event: faust.EventT) -> list[tuple[str, Any]]:
        msg = event.message
        if _routed_by_compressor(msg.headers):
            return []  # its compressor sent its item to the scope
        rec = ctx.codec.decode_as("kernel_summary", msg.value)
        checker(ctx).kernel_summary(rec, msg.value)  # its columns too
        recent.put(msg.partition, msg.offset, rec)  # not decoded again by the windows here
        return list(route_summary(rec, msg.value or b"", routing, msg.partition, msg.offset))

    async def _revoked(_app: Any, *args: Any, **_kw: Any) -> None:
        """Scopes whose partition left: their cells are read again by the new owner."""
        tps = [tp for tp in (args[0] if args else ()) if tp.topic == name]
        if tps:
            gone = {tp.partition for tp in tps}
            holder.forget(tps)
            parts = ctx.pcfg.internal_partitions
            l3.forget(lambda scope: partition_of(scope, parts) not in gone)

    ctx.app.on_partitions_revoked.connect(cast(Any, _revoked))  # mode's handler type: any call
    inputs = [name]
    if ctx.pcfg.l3_route_summaries:
        route_batches(ctx, src, scopes, name="l3-router", role="l3", route=route)
        inputs.insert(0, ctx.topic("summary.kernels"))
    window_agent(ctx, scopes, name="l3-windows", role="l3", impl=l3)
    add_lag_gauge(ctx, "l3", inputs)


def _routed_by_compressor(headers: Any) -> bool:
    """Whether a ``summary.kernels`` record carries :data:`ROUTED_HEADER` (faust gives the
    headers as a list of ``(key, value)`` pairs or a mapping)."""
    if not headers:
        return False
    keys = headers.keys() if isinstance(headers, Mapping) else (h[0] for h in headers)
    return ROUTED_HEADER in keys
