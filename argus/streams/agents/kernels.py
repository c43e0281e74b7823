"""Compressor and L3 over kernel activity.

* **compressor**: ``argus.raw.kernels`` -> ``argus.summary.kernels``, one summary per batch
  (:func:`argus.streams.summary_record.summarize_batch`), same key (``job/rank``). Kernel names
  travel as 32-bit ids; each rank's names are announced once, and again every
  ``_REANNOUNCE`` windows so a consumer that starts late learns them. One window in
  ``fidelity_every`` is also kept raw for the live fidelity check
  (:func:`argus.streams.fidelity.check_batches`), whose Spearman figure is a metric.
* **l3**: summaries re-keyed by scope group (``job/dp/<group id>``: ranks doing the same
  work). A kernel window closes when every rank of the scope reported or ``l3_grace_s``
  passed; every ``l3_windows`` closed windows the pure detector
  (:func:`argus.detectors.l3_window.detect_window`) runs on their merged summaries.
"""

from __future__ import annotations

import base64
import json
import time
from collections import defaultdict
from typing import Any

import faust

from argus.detectors.l3_window import RankKernels, detect_window, merge_summaries
from argus.detectors.routing import Routing
from argus.streams import metrics, windows
from argus.streams.agents.common import emit_findings
from argus.streams.app import Ctx, add_lag_gauge, add_ticker, guarded, is_tick, partition_of
from argus.streams.fidelity import check_batches
from argus.streams.summary_record import KernelNames, groups_from_summary, summarize_batch

__all__ = ["register_compressor", "register_l3"]

_REANNOUNCE = 32  # windows between full name announcements per rank
_FIDELITY_MIN_RANKS = 8
_FIDELITY_WAIT_S = 10.0


def register_compressor(ctx: Ctx) -> None:
    src = ctx.external("raw.kernels")
    announced: dict[str, set[int]] = {}
    since: dict[str, int] = defaultdict(int)
    sample: dict[tuple[str, int], dict[str, Any]] = {}  # (job, window) -> batches/summaries

    async def fidelity(now: float, force: bool = False) -> None:
        for key in list(sample):
            s = sample[key]
            if len(s["batches"]) < _FIDELITY_MIN_RANKS and not (
                force or now - s["t0"] > _FIDELITY_WAIT_S
            ):
                continue
            del sample[key]
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
                raw = event.message.value
                try:
                    batch = ctx.codec.decode_as("kernel_batch", raw)
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
                rec["streams"] = list(batch.get("streams") or [])
                known.update(int(n["id"]) for n in rec["kernel_names"])
                data = ctx.codec.encode("kernel_summary", rec)
                await ctx.external("summary.kernels").send(key=who.encode(), value=data)
                metrics.RECORDS_OUT.labels("compressor", "summary.kernels").inc()
                metrics.COMPRESSION.labels(batch["job"]).set(len(raw) / max(len(data), 1))
                w = int(batch["window_id"])
                if w % ctx.pcfg.fidelity_every == 0:
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
    cfg = ctx.detectors.l3
    routing = Routing.from_config(ctx.detectors.routing)
    src = ctx.external("summary.kernels")
    scopes = ctx.internal_topic("l3-scopes")
    state = ctx.table("l3-state")
    cells = ctx.table("l3-cells")
    names = KernelNames()
    block = ctx.pcfg.l3_windows
    grace = ctx.pcfg.l3_grace_s

    @ctx.app.agent(src, name="l3-router")
    async def l3_router(stream: faust.StreamT) -> None:
        async for event in stream.events():
            metrics.RECORDS_IN.labels("l3", "summary.kernels").inc()

            async def handle(event: faust.EventT = event) -> None:
                try:
                    rec = ctx.codec.decode_as("kernel_summary", event.message.value)
                    groups_from_summary(rec)  # validates the columns
                    sid = routing.group_for_kind(rec["coords"], "dp")
                    exp = routing.expected_size(rec["coords"], "dp")
                except Exception as exc:
                    await ctx.dlq(event, exc, "l3")
                    return
                await ctx.send_keyed(
                    scopes,
                    f"{rec['job']}/dp/{sid}",
                    {
                        "r": rec["rank"],
                        "w": rec["window_id"],
                        "exp": exp,
                        "v": base64.b64encode(event.message.value).decode(),
                    },
                )

            await guarded(ctx, event, "l3", handle)

    def _rank_kernels(records: list[dict[str, Any]]) -> list[RankKernels]:
        for rec in records:
            names.update(rec)
        per_rank: dict[int, dict[str, Any]] = {}
        for rec in records:
            r = per_rank.setdefault(
                rec["rank"], {"coords": rec["coords"], "parts": defaultdict(list), "sk": {}}
            )
            for (kid, st), summ in groups_from_summary(rec).items():
                r["parts"][(names.name(kid), st)].append(summ)
            for s in rec.get("streams") or []:
                r["sk"][int(s["id"])] = s["kind"]
        return [
            RankKernels(
                rank=rk,
                coords=v["coords"],
                summaries={k: merge_summaries(p) for k, p in v["parts"].items()},
                stream_kinds=v["sk"],
            )
            for rk, v in sorted(per_rank.items())
        ]

    async def run_block(gk: str, st: dict[str, Any]) -> None:
        job = gk.split("/", 1)[0]
        todo = st["block"]
        st["block"] = []
        records = []
        for w, ranks in todo:
            for r in ranks:
                key = f"{gk}|{w}|{r}"
                v = cells.get(key)
                if v is not None:
                    records.append(ctx.codec.decode_as("kernel_summary", base64.b64decode(v)))
                    del cells[key]
        if not records:
            return
        ws = min(int(r["window_id"]) for r in records)
        we = max(int(r["window_id"]) for r in records)
        wsn = min(int(r["window_start_ns"]) for r in records)
        wen = max(int(r["window_end_ns"]) for r in records)
        t0 = time.perf_counter()
        found = detect_window(
            job, _rank_kernels(records), window=(ws, we, wsn, wen), cfg=cfg, routing=routing
        )
        metrics.DETECT_S.labels("L3").observe(time.perf_counter() - t0)
        await emit_findings(ctx, found, st.setdefault("emitted", []), "l3")

    async def on_closed(
        gk: str, st: dict[str, Any], closed: list[windows.ClosedStep], now: float
    ) -> None:
        for c in closed:
            metrics.WINDOWS.labels("l3", "timeout" if c.timed_out else "complete").inc()
            if not st["block"]:
                st["t_block"] = now
            st["block"].append([c.step, list(c.ranks)])
        if len(st["block"]) >= block:
            await run_block(gk, st)

    @ctx.app.agent(scopes, name="l3-windows")
    async def l3_windows(stream: faust.StreamT) -> None:
        async for event in stream.events():

            async def handle(event: faust.EventT = event) -> None:
                now = time.time()
                if is_tick(event):
                    part = event.message.partition
                    for gk in list(state.keys()):
                        if partition_of(gk, ctx.pcfg.internal_partitions) != part:
                            continue
                        st = state[gk]
                        closed = windows.expire(st["win"], now_s=now, grace_s=grace)
                        if closed:
                            await on_closed(gk, st, closed, now)
                        if st["block"] and now - st.get("t_block", now) >= grace * block:
                            await run_block(gk, st)  # a stalled or finished job's last block
                        if closed or not st["block"]:
                            state[gk] = st
                    return
                gk = event.message.key.decode()
                m = json.loads(event.message.value)
                st = state.get(gk) or {"win": windows.new_state(), "block": [], "emitted": []}
                status, closed = windows.add(
                    st["win"], step=m["w"], rank=m["r"], expected=m["exp"], now_s=now
                )
                if status == "new":
                    cells[f"{gk}|{m['w']}|{m['r']}"] = m["v"]
                elif status == "dup":
                    metrics.DUPLICATES.labels("l3").inc()
                else:
                    metrics.LATE.labels("l3").inc()
                if closed:
                    await on_closed(gk, st, closed, now)
                state[gk] = st

            await guarded(ctx, event, "l3", handle)

    add_ticker(ctx, scopes)
    add_lag_gauge(ctx, "l3", [ctx.topic("summary.kernels"), scopes.get_topic_name()])
