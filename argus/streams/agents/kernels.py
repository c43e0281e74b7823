"""Faust agents of the kernel roles: the compressor, and L3's router and window agent.

* **compressor** (with ``streams.compressor_runtime = "faust"``; by default the role runs on
  its own loop, :mod:`argus.streams.compressor_loop`, and this agent is not registered):
  ``argus.raw.kernels`` -> ``argus.summary.kernels``, one summary per window
  (what :func:`argus.summaries.summary_record.summarize_batch` gives), same key
  (``job/rank``), and each summary's L3 item to its scope on ``l3-scopes`` (one message per
  scope and poll; the summary carries :data:`~argus.streams.roles.l3.ROUTED_HEADER`:
  docs/pipeline.md, "The compressor routes L3 itself"). The role
  (:class:`~argus.streams.roles.compressor.Compressor`) decides; this agent drives it per
  poll: the records already delivered (up to ``_POLL_MAX``) are taken one by one (a bad one
  to the DLQ), the complete windows of each run of up to ``CHUNK_EVENTS`` kernel events
  (~65 windows of 3,000) compressed in one call while the run's columns are still in cache,
  the summaries sent in input order, then the poll's records acknowledged. A split window's
  parts are held uncommitted (:mod:`argus.streams.held`) until the window is summarised or
  given up (its parts to the DLQ, ``incomplete-batch``: the rank's next window came first,
  or none for ``_PART_MAX_AGE_S``), so a restart mid-window re-reads it from its first part.
* **l3**: the compressors' items, and (``streams.l3_route_summaries``) the summaries other
  producers wrote, validated and re-keyed by scope group
  (:func:`argus.streams.roles.l3.route_summary`; marked summaries skipped); the role
  :class:`~argus.streams.roles.l3.L3Windows` judges them. The open blocks' summaries are
  kept in memory (no changelog): each one's ``l3-scopes`` offset is held uncommitted
  (:mod:`argus.streams.held`) until its block was judged, so a restarted worker reads them
  again (:class:`HeldCells`). The router hands what it decoded to the window agent in the
  same process (:class:`~argus.streams.roles.l3.RecentRecords`), and the summary crosses
  ``l3-scopes`` as raw bytes after the message's JSON (``argus.streams.rekey.BLOB``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, cast

import faust

from argus.kafka.admin import partition_count
from argus.malloc import keep_freed_blocks
from argus.routing import Routing
from argus.schemas.kernel_parts import Incomplete
from argus.streams import held as held_offsets
from argus.streams import metrics
from argus.streams.app import (
    Ctx,
    add_lag_gauge,
    current_event,
    guarded,
    note_consumed,
    route_batches,
    run_polls,
    send_rekeyed,
    window_agent,
)
from argus.streams.fidelity import judge_samples
from argus.streams.rekey import item_bytes
from argus.streams.roles.compressor import Compressor, Made, Taken
from argus.streams.roles.context import partition_of
from argus.streams.roles.l3 import ROUTED_HEADER, L3Windows, RecentRecords, route_summary
from argus.streams.validate import checker
from argus.summaries import summary_record

__all__ = ["register_compressor", "register_l3"]

log = logging.getLogger("argus.streams")

_POLL_MAX = 256  # raw records the compressor takes into one summarize call at most
_POLL_YIELDS = 4  # turns of the loop (no time) a poll gives the consumer to hand over more
# a split window's parts leave its producer together (librdkafka retries a part for at most
# message.timeout.ms, 30 s); one held longer than this will not complete
_PART_MAX_AGE_S = 120.0


Routed = dict[str, list[tuple[faust.EventT, tuple[bytes, bytes | None]]]]
"""A poll's L3 items by scope key, as :func:`argus.streams.app.send_rekeyed` takes them."""


class _HeldParts:
    """The role's :class:`~argus.streams.roles.compressor.PartHolder` over the worker's
    held offsets (:mod:`argus.streams.held`): a token is the part's faust event."""

    def __init__(self, held: held_offsets.HeldOffsets) -> None:
        self.held = held

    def hold(self, token: Any) -> None:
        self.held.hold(token.message.tp, token.message.offset)

    def release(self, token: Any) -> None:
        self.held.release(token.message.tp, token.message.offset)


def register_compressor(ctx: Ctx) -> None:
    keep_freed_blocks()  # a poll's numpy temporaries reuse heap pages (argus.malloc)
    src = ctx.external("raw.kernels")
    scopes = ctx.internal_topic("l3-scopes")
    # A split window's parts are held in memory until its last part: each held part's offset
    # is held uncommitted (argus.streams.held) until the window is summarised or given up
    # (DLQ), so a restart mid-window re-reads the window from its first part.
    holder = _HeldParts(held_offsets.install(ctx.app))
    role = Compressor(
        ctx.codec,
        checker(ctx),
        Routing.from_config(ctx.detectors.routing),  # L3's: the same [detectors] config
        holder,
        fidelity_every=ctx.pcfg.fidelity_every,
        route_required=not ctx.pcfg.l3_route_summaries,
    )
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

    async def take(event: faust.EventT) -> Taken | None:
        """The role's :meth:`~Compressor.take` of one raw record; a bad one to the DLQ."""
        records_in.inc()
        note_consumed(event)
        msg = event.message
        try:
            taken, given_up = role.take(msg.value or b"", event, msg.partition, msg.timestamp)
        except Exception as exc:
            await ctx.dlq(event, exc, "compressor")
            return None
        await release_parts(given_up)
        return taken

    async def release_parts(given_up: list[Incomplete], assigned: Any = None) -> None:
        """DLQ the parts of windows given up (those of partitions still ``assigned``, when
        given: a revoked partition's new owner re-reads them from the held offset), then
        release every part's offset."""
        for gone in given_up:
            err = gone.error()
            for ev in gone.tokens:
                if assigned is None or ev.message.tp in assigned:
                    await ctx.dlq(ev, err, "compressor")
                holder.release(ev)
        for ev in role.parts.take_released():
            holder.release(ev)

    async def send(made: Made, routed: Routed) -> None:
        """Send one window's summary, and add its L3 items to ``routed`` (sent to their
        scopes after the poll's summaries)."""
        event, batch = made.taken.token, made.taken.whole
        # on the raw record's partition number: the summaries of one raw partition
        # stay together, so L3's per-partition watermark sees the compressor's own
        # catch-up skew between raw partitions (keys would hash them elsewhere)
        part = await same_partition(made.taken.part)
        headers = [(ROUTED_HEADER, b"1")] if made.items else None
        await ctx.send(
            ctx.external("summary.kernels"), made.key, made.value, partition=part, headers=headers
        )
        records_out.inc()
        for key, it in made.items:
            routed.setdefault(key, []).append((event, item_bytes(it)))
        raw_bytes = len(event.message.value or b"") * int(made.taken.piece.get("parts", 1))
        gauge = ratio_of.get(job := str(batch["job"]))  # ~: a window's parts are near one size
        if gauge is None:
            gauge = ratio_of[job] = metrics.COMPRESSION.labels(job)
        gauge.set(raw_bytes / max(len(made.value), 1))

    async def poll(events: list[faust.EventT]) -> None:
        """The events taken in one poll, in runs of up to ``CHUNK_EVENTS`` kernel events (a
        run's columns are still in cache when compressed): each run's complete windows
        compressed in one call, then sent in order."""
        poll_size.observe(len(events))
        ready: list[Taken] = []
        got: list[Taken | None] = [None]

        async def one(event: faust.EventT) -> None:
            got[0] = await take(event)

        n_events = 0  # in ready
        for event in events:
            got[0] = None
            await guarded(ctx, event, "compressor", functools.partial(one, event))
            if got[0] is None:
                continue
            ready.append(got[0])
            n_events += got[0].events
            if n_events > summary_record.CHUNK_EVENTS and len(ready) > 1:
                last = ready.pop()  # the window that made the run too long starts the next
                await summarize(ready)
                ready, n_events = [last], last.events
        if ready:
            await summarize(ready)
        judge_samples(role.due_samples(time.time()))

    async def summarize(ready: list[Taken]) -> None:
        """Compress ``ready``'s windows in one call, then send their summaries in order,
        then their L3 items (one message per scope, :func:`~argus.streams.app.send_rekeyed`)."""
        routed: Routed = {}
        for made in role.summarize(ready):
            event = made.taken.token
            if made.error is not None:  # its summary or its L3 route failed: the reason
                log.warning("compressor: a window failed: %s", made.error)
                await ctx.dlq(event, made.error, "compressor")
                continue
            await guarded(ctx, event, "compressor", functools.partial(send, made, routed))
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
        judge_samples(role.due_samples(time.time()))
        # windows whose remaining parts never came (the rank sent nothing more)
        expired = role.parts.expire(_PART_MAX_AGE_S)
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
