"""Stack aggregator: ``argus.raw.stacks`` -> ``argus.summary.stacks`` (L5 drill-down input).

Collapsed stacks of each rank are summed over windows of ``stack_window_s`` (event time).
A window is published when a later window of the same rank starts, or on a tick once its
end is ``stack_window_s`` in the past.
"""

from __future__ import annotations

import json
import time
from typing import Any

import faust

from argus.streams import metrics
from argus.streams.app import Ctx, add_lag_gauge, add_ticker, guarded, is_tick, partition_of

__all__ = ["register"]

_TOP = 500  # stacks kept per window (by count)


def register(ctx: Ctx) -> None:
    src = ctx.external("raw.stacks")
    ranks = ctx.internal_topic("stacks")
    state = ctx.table("stacks-state")
    w_ns = int(ctx.pcfg.stack_window_s * 1e9)

    @ctx.app.agent(src, name="stacks-router")
    async def stacks_router(stream: faust.StreamT) -> None:
        async for event in stream.events():
            metrics.RECORDS_IN.labels("stacks", "raw.stacks").inc()

            async def handle(event: faust.EventT = event) -> None:
                try:
                    rec = ctx.codec.decode_as("stack_batch", event.message.value)
                except Exception as exc:
                    await ctx.dlq(event, exc, "stacks")
                    return
                await ctx.send_keyed(
                    ranks,
                    f"{rec['job']}/{rec['rank']}",
                    {
                        "a": rec["window_start_ns"],
                        "n": rec["samples"],
                        "st": [[s["stack"], s["count"]] for s in rec["stacks"]],
                    },
                )

            await guarded(ctx, event, "stacks", handle)

    async def publish(key: str, widx: str, win: dict[str, Any]) -> None:
        job, _, rank = key.rpartition("/")
        top = sorted(win["stacks"].items(), key=lambda kv: -kv[1])[:_TOP]
        await ctx.emit(
            "summary.stacks",
            key,
            "stack_summary",
            {
                "job": job,
                "rank": int(rank),
                "window_start_ns": int(widx) * w_ns,
                "window_end_ns": (int(widx) + 1) * w_ns,
                "samples": int(win["n"]),
                "stacks": [{"stack": s, "count": int(c)} for s, c in top],
            },
            "stacks",
        )

    @ctx.app.agent(ranks, name="stacks-windows")
    async def stacks_windows(stream: faust.StreamT) -> None:
        async for event in stream.events():

            async def handle(event: faust.EventT = event) -> None:
                if is_tick(event):
                    part, now_ns = event.message.partition, time.time_ns()
                    for key in list(state.keys()):
                        if partition_of(key, ctx.pcfg.internal_partitions) != part:
                            continue
                        st = state[key]
                        due = [w for w in st if (int(w) + 2) * w_ns <= now_ns]
                        for w in sorted(due, key=int):
                            await publish(key, w, st.pop(w))
                        if due:
                            state[key] = st
                    return
                key = event.message.key.decode()
                m = json.loads(event.message.value)
                st = state.get(key) or {}
                widx = str(m["a"] // w_ns)
                win = st.setdefault(widx, {"n": 0, "stacks": {}})
                win["n"] += m["n"]
                for s, c in m["st"]:
                    win["stacks"][s] = win["stacks"].get(s, 0) + c
                for w in sorted((w for w in st if int(w) < int(widx)), key=int):
                    await publish(key, w, st.pop(w))
                state[key] = st

            await guarded(ctx, event, "stacks", handle)

    add_ticker(ctx, ranks)
    add_lag_gauge(ctx, "stacks", [ctx.topic("raw.stacks"), ranks.get_topic_name()])
