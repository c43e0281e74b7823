"""Stack aggregator: ``argus.raw.stacks`` -> ``argus.summary.stacks`` (L5 drill-down input).

Collapsed stacks of each rank are summed over windows of ``stack_window_s`` (event time).
A window is published when a later window of the same rank starts, or on a tick once its
end is a full window in the past (processing time).
"""

from __future__ import annotations

import time
from typing import Any

import faust

from argus.streams.app import Ctx, add_lag_gauge, route_batches, window_agent
from argus.streams.validate import checker

__all__ = ["register"]

_TOP = 500  # stacks kept per window (by count)


class _Stacks:
    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.w_ns = int(ctx.pcfg.stack_window_s * 1e9)

    def new(self, key: str) -> dict[str, Any]:
        return {}

    async def publish(self, key: str, widx: str, win: dict[str, Any]) -> None:
        job, _, rank = key.rpartition("/")
        top = sorted(win["stacks"].items(), key=lambda kv: (-kv[1], kv[0]))[:_TOP]
        await self.ctx.emit(
            "summary.stacks",
            key,
            "stack_summary",
            {
                "job": job,
                "rank": int(rank),
                "window_start_ns": int(widx) * self.w_ns,
                "window_end_ns": (int(widx) + 1) * self.w_ns,
                "samples": int(win["n"]),
                "stacks": [{"stack": s, "count": int(c)} for s, c in top],
            },
            "stacks",
        )

    async def add(self, key: str, st: dict[str, Any], m: dict[str, Any], now: float) -> None:
        widx = str(m["a"] // self.w_ns)
        win = st.setdefault(widx, {"n": 0, "stacks": {}})
        win["n"] += m["n"]
        for s, c in m["st"]:
            win["stacks"][s] = win["stacks"].get(s, 0) + c
        for w in sorted((w for w in st if int(w) < int(widx)), key=int):
            await self.publish(key, w, st.pop(w))

    async def tick(self, key: str, st: dict[str, Any], now: float) -> bool:
        now_ns = time.time_ns()
        due = sorted((w for w in st if (int(w) + 2) * self.w_ns <= now_ns), key=int)
        for w in due:
            await self.publish(key, w, st.pop(w))
        return bool(due)


def register(ctx: Ctx) -> None:
    src = ctx.external("raw.stacks")
    ranks = ctx.internal_topic("stacks")

    async def route(event: faust.EventT) -> list[tuple[str, Any]]:
        rec = ctx.codec.decode_as("stack_batch", event.message.value)
        checker(ctx).stack_batch(rec, event.message.value, broker_s=event.message.timestamp)
        return [
            (
                f"{rec['job']}/{rec['rank']}",
                {
                    "a": rec["window_start_ns"],
                    "n": rec["samples"],
                    "st": [[s["stack"], s["count"]] for s in rec["stacks"]],
                },
            )
        ]

    route_batches(ctx, src, ranks, name="stacks-router", role="stacks", route=route)
    window_agent(ctx, ranks, name="stacks-windows", role="stacks", impl=_Stacks(ctx))
    add_lag_gauge(ctx, "stacks", [ctx.topic("raw.stacks"), ranks.get_topic_name()])
