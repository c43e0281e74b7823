"""Funnel/alerter: ``argus.anomalies`` -> ``argus.alerts``.

The router re-keys anomalies by job (a culprit's L1, L2 and L3 findings come from different
groups). The funnel agent gathers a job's findings for ``funnel_window_s`` of processing
time and advances the pure funnel (:func:`argus.detectors.funnel.step`) once per window in
which the job made progress (L1 reports closed steps on the same internal topic), so a
quiet window counts towards resolving an alert while a stopped job freezes its alerts.
Alerts are keyed by their dedup key; the funnel state lives in a table, so a restarted
worker neither loses an open alert nor triggers it twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import faust

from argus.detectors import funnel
from argus.detectors.findings import Finding
from argus.streams import metrics
from argus.streams.agents.common import remember
from argus.streams.app import Ctx, add_lag_gauge, add_ticker, guarded, is_tick, partition_of

__all__ = ["finding_from_anomaly", "register"]

_FIELDS = (
    "job",
    "level",
    "kind",
    "group_kind",
    "group_id",
    "phase",
    "kernel",
    "stream",
    "window_start_step",
    "window_end_step",
    "window_start_ns",
    "window_end_ns",
    "score",
    "threshold",
    "baseline",
    "observed",
    "unit",
)


def finding_from_anomaly(rec: Mapping[str, Any]) -> Finding:
    """The :class:`Finding` an ``anomaly`` record was made from (inverse of ``to_anomaly``)."""
    return Finding(
        ranks=tuple(rec.get("ranks", ())),
        evidence=dict(rec.get("evidence") or {}),
        **{k: rec[k] for k in _FIELDS if k in rec},
    )


def register(ctx: Ctx) -> None:
    cfg = ctx.detectors.funnel
    src = ctx.external("anomalies")
    jobs = ctx.internal_topic("funnel-jobs")
    state = ctx.table("funnel-state")
    window_s = ctx.pcfg.funnel_window_s

    @ctx.app.agent(src, name="funnel-router")
    async def funnel_router(stream: faust.StreamT) -> None:
        async for event in stream.events():
            metrics.RECORDS_IN.labels("funnel", "anomalies").inc()

            async def handle(event: faust.EventT = event) -> None:
                try:
                    rec = ctx.codec.decode_as("anomaly", event.message.value)
                    finding_from_anomaly(rec)  # validates level and kind
                except Exception as exc:
                    await ctx.dlq(event, exc, "funnel")
                    return
                if rec["level"] == "funnel":
                    return
                rec = {k: v for k, v in rec.items() if k != "detected_ns"}
                await ctx.send_keyed(jobs, rec["job"], {"f": rec})

            await guarded(ctx, event, "funnel", handle)

    async def advance(job: str, st: dict[str, Any], now: float) -> None:
        findings = [finding_from_anomaly(f) for f in st["pending"]]
        fs, out = funnel.step(funnel.FunnelState.from_dict(st["fs"]), findings, cfg)
        for alert in out.alerts:
            await ctx.emit("alerts", alert["dedup_key"], "alert", alert, "funnel")
            metrics.ALERTS.labels(alert["action"]).inc()
        st.update(fs=fs.to_dict(), pending=[], active=False, t0=now)

    @ctx.app.agent(jobs, name="funnel-windows")
    async def funnel_windows(stream: faust.StreamT) -> None:
        async for event in stream.events():

            async def handle(event: faust.EventT = event) -> None:
                now = time.time()
                if is_tick(event):
                    part = event.message.partition
                    for job in list(state.keys()):
                        if partition_of(job, ctx.pcfg.internal_partitions) != part:
                            continue
                        st = state[job]
                        if now - st["t0"] >= window_s and (st["pending"] or st["active"]):
                            await advance(job, st, now)
                            state[job] = st
                    return
                job = event.message.key.decode()
                m = json.loads(event.message.value)
                st = state.get(job) or {
                    "pending": [],
                    "fs": funnel.FunnelState().to_dict(),
                    "active": False,
                    "t0": now,
                    "seen": [],
                }
                if "progress" in m:
                    st["active"] = True
                elif remember(st["seen"], m["f"]["id"]):
                    st["pending"].append(m["f"])
                else:
                    metrics.DUPLICATES.labels("funnel").inc()
                state[job] = st

            await guarded(ctx, event, "funnel", handle)

    add_ticker(ctx, jobs)
    add_lag_gauge(ctx, "funnel", [ctx.topic("anomalies"), jobs.get_topic_name()])
