"""Compressor and L3 over kernel activity.

* **compressor**: ``argus.raw.kernels`` -> ``argus.summary.kernels``, one summary per batch
  (:func:`argus.streams.summary_record.summarize_batch`), same key (``job/rank``). Kernel names
  travel as 32-bit ids; each rank's names are announced once, and again every
  ``_REANNOUNCE`` windows so a consumer that starts late learns them. One window in
  ``fidelity_every`` is also kept raw for the live fidelity check
  (:func:`argus.streams.fidelity.check_batches`), whose Spearman figure is a metric.
* **l3**: summaries re-keyed by scope group (``job/dp/<group id>``: ranks doing the same
  work). A kernel window closes on event time (:mod:`argus.streams.windows`: every rank of
  the scope accounted for, or the scope's watermark passed it by ``l3_lateness_windows``);
  the pure detector (:func:`argus.detectors.l3_window.detect_window`) runs on the
  merged summaries of each block of ``l3_windows`` windows, blocks aligned on window ids
  (``window_id // l3_windows``) like the funnel's and ``argus diagnose``'s windows.
"""

from __future__ import annotations

import base64
import dataclasses
import time
from collections import OrderedDict, defaultdict
from typing import Any

import faust

from argus.detectors.l3_window import detect_window, table_from_summaries
from argus.detectors.routing import Routing
from argus.streams import metrics, windows
from argus.streams.agents.common import emit_findings
from argus.streams.app import Ctx, add_lag_gauge, guarded, route_batches, window_agent
from argus.streams.fidelity import check_batches
from argus.streams.summary_record import KernelNames, _summary_columns, summarize_batch
from argus.streams.validate import checker

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

    @ctx.app.agent(src, name="compressor")
    async def compressor(stream: faust.StreamT) -> None:
        async for event in stream.events():
            metrics.RECORDS_IN.labels("compressor", "raw.kernels").inc()

            async def handle(event: faust.EventT = event) -> None:
                raw = event.message.value or b""
                try:
                    batch = ctx.codec.decode_as("kernel_batch", raw)
                    checker(ctx).kernel_batch(batch, broker_s=event.message.timestamp)
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
                await ctx.send(ctx.external("summary.kernels"), who.encode(), data)
                metrics.RECORDS_OUT.labels("compressor", "summary.kernels").inc()
                metrics.COMPRESSION.labels(batch["job"]).set(len(raw) / max(len(data), 1))
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


class _L3:
    def __init__(self, ctx: Ctx, routing: Routing, cells: Any) -> None:
        self.ctx = ctx
        self.cfg = ctx.detectors.l3
        self.routing = routing
        self.cells = cells
        self.names = KernelNames()
        self.block = ctx.pcfg.l3_windows
        self.progress = ctx.internal_topic("funnel-jobs")
        self.lateness = ctx.pcfg.l3_lateness_windows
        self.idle = ctx.pcfg.idle_close_s
        self.seen: dict[str, float] = {}  # key -> last input in this process (idle bound only)

    def new(self, key: str) -> dict[str, Any]:
        return {"win": windows.new_state(), "block": [], "emitted": []}

    async def add(self, gk: str, st: dict[str, Any], m: dict[str, Any], now: float) -> None:
        self.seen[gk] = now
        status, closed = windows.add(
            st["win"], step=m["w"], rank=m["r"], expected=m["exp"], lateness=self.lateness
        )
        if status == "new":
            self.cells[f"{gk}|{m['w']}|{m['r']}"] = m["v"]
        elif status == "dup":
            metrics.DUPLICATES.labels("l3").inc()
        else:
            metrics.LATE.labels("l3").inc()
        if closed:
            await self.on_closed(gk, st, closed)

    async def tick(self, gk: str, st: dict[str, Any], now: float) -> bool:
        """The idle bound, the only processing-time rule: a scope without input in this
        process for ``idle_close_s`` closes its pending windows incomplete and runs its last,
        partial block (a finished or stalled job)."""
        last = self.seen.setdefault(gk, now)
        if not (st["win"]["pending"] or st["block"]) or now - last < self.idle:
            return False
        await self.finish(gk, st)
        return True

    async def finish(self, gk: str, st: dict[str, Any]) -> None:
        """Close every pending window incomplete and judge the partial block (idle, or the
        end of the offline driver's input)."""
        closed = windows.flush(st["win"])
        if closed:
            await self.on_closed(gk, st, closed)
        if st["block"]:
            await self.run_block(gk, st, (int(st["block_id"]) + 1) * self.block - 1)

    async def on_closed(
        self, gk: str, st: dict[str, Any], closed: list[windows.ClosedStep]
    ) -> None:
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
            st["block"].append([c.step, list(c.ranks)])
            if c.incomplete:
                st["block_inc"] = c.step
            if c.step % self.block == self.block - 1:  # the block's last window
                await self.run_block(gk, st, c.step)

    async def run_block(self, gk: str, st: dict[str, Any], upto: int) -> None:
        """Judge the open block; then tell the funnel that L3 judged this scope's windows
        up to window id ``upto`` (steps: the collectors number windows by first step)."""
        job = gk.split("/", 1)[0]
        todo, st["block"] = st["block"], []
        incomplete = st.pop("block_inc", None)  # a window of it closed incomplete
        records = []
        for w, ranks in todo:
            for r in ranks:
                key = f"{gk}|{w}|{r}"
                v = self.cells.get(key)
                if v is not None:
                    records.append(self.ctx.codec.decode_as("kernel_summary", base64.b64decode(v)))
                    del self.cells[key]
        sent = await self._judge(job, records, incomplete, st["emitted"]) if records else []
        # naming the findings just sent: they reach the funnel one hop later (anomalies)
        ids = {a["id"]: a["window_end_step"] for a in sent}
        await self.ctx.send_keyed(
            self.progress, job, {"items": [{"l3": gk, "w": upto, "ids": ids}], "t": time.time()}
        )

    async def _judge(
        self,
        job: str,
        records: list[dict[str, Any]],
        incomplete: int | None,
        emitted: list[str],
    ) -> list[dict[str, Any]]:
        window = (
            min(int(r["window_id"]) for r in records),
            max(int(r["window_id"]) for r in records),
            min(int(r["window_start_ns"]) for r in records),
            max(int(r["window_end_ns"]) for r in records),
        )
        t0 = time.perf_counter()
        self.names.update_many(records)
        found = detect_window(
            job,
            table_from_summaries(records, self.names),
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


def register_l3(ctx: Ctx) -> None:
    routing = Routing.from_config(ctx.detectors.routing)
    src = ctx.external("summary.kernels")
    scopes = ctx.internal_topic("l3-scopes")
    cells = ctx.table("l3-cells")

    async def route(event: faust.EventT) -> list[tuple[str, Any]]:
        rec = ctx.codec.decode_as("kernel_summary", event.message.value)
        _summary_columns(rec)  # validates the columns (cheap: no per-group objects)
        checker(ctx).kernel_summary(rec, event.message.value)
        sid = routing.group_for_kind(rec["coords"], "dp")
        return [
            (
                f"{rec['job']}/dp/{sid}",
                {
                    "r": rec["rank"],
                    "w": rec["window_id"],
                    "exp": routing.expected_size(rec["coords"], "dp"),
                    "v": base64.b64encode(event.message.value or b"").decode(),
                },
            )
        ]

    route_batches(ctx, src, scopes, name="l3-router", role="l3", route=route)
    window_agent(ctx, scopes, name="l3-windows", role="l3", impl=_L3(ctx, routing, cells))
    add_lag_gauge(ctx, "l3", [ctx.topic("summary.kernels"), scopes.get_topic_name()])
