"""Faust agents of the kernel roles: the compressor, and L3's router and window agent.

* **compressor**: ``argus.raw.kernels`` -> ``argus.summary.kernels``, one summary per window
  (:func:`argus.summaries.summary_record.summarize_batch`), same key (``job/rank``). A window
  split into parts (``part``/``parts``, :mod:`argus.schemas.kernel_parts`) is merged first
  (:class:`~argus.schemas.kernel_parts.PartAssembler`); a window whose parts stop coming (the
  rank's next window arrives first) sends the parts it has to the DLQ, ``incomplete-batch``.
  Kernel names travel as 32-bit ids; each rank's names are announced once, and again every
  ``_REANNOUNCE`` windows so a consumer that starts late learns them. One window in
  ``fidelity_every`` is also kept raw for the live fidelity check
  (:func:`argus.streams.fidelity.check_batches`), whose Spearman figure is a metric.
* **l3**: summaries validated and re-keyed by scope group
  (:func:`argus.streams.roles.l3.route_summary`); the role
  :class:`~argus.streams.roles.l3.L3Windows` judges them.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import OrderedDict, defaultdict
from typing import Any

import faust

from argus.kafka.admin import partition_count
from argus.routing import Routing
from argus.schemas.kernel_parts import PartAssembler
from argus.streams import metrics
from argus.streams.app import (
    Ctx,
    add_lag_gauge,
    guarded,
    note_consumed,
    route_batches,
    window_agent,
)
from argus.streams.fidelity import check_batches
from argus.streams.roles.l3 import L3Windows, route_summary
from argus.streams.validate import checker
from argus.summaries.summary_record import summarize_batch, summary_columns

__all__ = ["register_compressor", "register_l3"]

_REANNOUNCE = 32  # windows between full name announcements per rank
_FIDELITY_MIN_RANKS = 8
_FIDELITY_WAIT_S = 10.0


def register_compressor(ctx: Ctx) -> None:
    src = ctx.external("raw.kernels")
    announced: dict[str, set[int]] = {}
    since: dict[str, int] = defaultdict(int)
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

    @ctx.app.agent(src, name="compressor")
    async def compressor(stream: faust.StreamT) -> None:
        async for event in stream.events():
            metrics.RECORDS_IN.labels("compressor", "raw.kernels").inc()
            note_consumed(event)

            async def handle(event: faust.EventT = event) -> None:
                raw = event.message.value or b""
                try:
                    piece = ctx.codec.decode_as("kernel_batch", raw)
                    checker(ctx).kernel_batch(piece, broker_s=event.message.timestamp)
                    whole, given_up = parts.add(piece, event)
                except Exception as exc:
                    await ctx.dlq(event, exc, "compressor")
                    return
                for gone in given_up:
                    for ev in gone.tokens:
                        await ctx.dlq(ev, gone.error(), "compressor")
                if whole is None:  # more parts of this window to come
                    return
                batch = whole
                try:
                    who = f"{batch['job']}/{batch['rank']}"
                    since[who] += 1
                    if since[who] >= _REANNOUNCE:
                        announced.pop(who, None)
                        since[who] = 0
                    known = announced.setdefault(who, set())
                    rec = summarize_batch(batch, announced=known)
                except Exception as exc:
                    await ctx.dlq(event, exc, "compressor")
                    return
                known.update(int(n["id"]) for n in rec["kernel_names"])
                data = ctx.codec.encode("kernel_summary", rec)
                # on the raw record's partition number: the summaries of one raw partition
                # stay together, so L3's per-partition watermark sees the compressor's own
                # catch-up skew between raw partitions (keys would hash them elsewhere)
                part = await same_partition(event.message.partition)
                await ctx.send(ctx.external("summary.kernels"), who.encode(), data, partition=part)
                metrics.RECORDS_OUT.labels("compressor", "summary.kernels").inc()
                raw_bytes = len(raw) * int(piece.get("parts", 1))  # ~: parts are near one size
                metrics.COMPRESSION.labels(batch["job"]).set(raw_bytes / max(len(data), 1))
                w = int(batch["window_id"])
                if w % ctx.pcfg.fidelity_every == 0 and (batch["job"], w) not in checked:
                    s = sample.setdefault(
                        (batch["job"], w), {"t0": time.time(), "batches": [], "summaries": []}
                    )
                    s["batches"].append(batch)
                    s["summaries"].append(rec)
                    await fidelity(time.time())

            await guarded(ctx, event, "compressor", handle)

    @ctx.app.timer(interval=2.0, name="compressor-fidelity")
    async def _fidelity_timer() -> None:
        await fidelity(time.time())

    add_lag_gauge(ctx, "compressor", [ctx.topic("raw.kernels")])


def register_l3(ctx: Ctx) -> None:
    routing = Routing.from_config(ctx.detectors.routing)
    src = ctx.external("summary.kernels")
    scopes = ctx.internal_topic("l3-scopes")
    cells = ctx.table("l3-cells")

    async def route(event: faust.EventT) -> list[tuple[str, Any]]:
        rec = ctx.codec.decode_as("kernel_summary", event.message.value)
        summary_columns(rec)  # validates the columns (cheap: no per-group objects)
        checker(ctx).kernel_summary(rec, event.message.value)
        return list(
            route_summary(rec, event.message.value or b"", routing, event.message.partition)
        )

    route_batches(ctx, src, scopes, name="l3-router", role="l3", route=route)
    window_agent(ctx, scopes, name="l3-windows", role="l3", impl=L3Windows(ctx, routing, cells))
    add_lag_gauge(ctx, "l3", [ctx.topic("summary.kernels"), scopes.get_topic_name()])
