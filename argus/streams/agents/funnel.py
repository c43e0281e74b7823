"""Faust agents of the funnel role: router, window agent, and the outbox's delivery.

The router validates each ``anomaly`` and re-keys it by job (the funnel's own verdicts,
level ``funnel``, are not judged again); the window agent runs
:class:`~argus.streams.roles.funnel.Funnel` and, once the state holding its outbox was
written, sends the outbox exactly once (:class:`argus.streams.outbox.Outbox`).
"""

from __future__ import annotations

from typing import Any

import faust

from argus.streams.app import Ctx, add_lag_gauge, route_batches, window_agent
from argus.streams.outbox import Outbox
from argus.streams.roles.funnel import Funnel, finding_from_anomaly
from argus.streams.validate import checker

__all__ = ["register"]


class _FunnelAgent(Funnel):
    """The role, plus the delivery of its outbox through Kafka."""

    def __init__(self, ctx: Ctx) -> None:
        super().__init__(ctx)
        self.outbox = Outbox(ctx)
        self.incarnation = self.outbox.incarnation

    async def after_write(self, job: str, st: dict[str, Any]) -> bool:
        """Send the outbox once the state holding it is durable; True when ``st`` changed.

        :meth:`Outbox.deliver` makes the state with the outbox durable, sends what is not on
        its topic yet and waits for the broker; then the outbox is emptied (window_agent
        writes that and makes it durable at once). A crash before the records left loses
        nothing (the restored state still holds them, sent at the next event or tick); a
        crash after some or all left repeats none (the restarted process finds them on
        their topics and skips them).
        """
        if not st.get("outbox"):
            return False
        await self.outbox.deliver(st["outbox"])
        st["outbox"] = []
        return True


def register(ctx: Ctx) -> None:
    src = ctx.external("anomalies")
    jobs = ctx.internal_topic("funnel-jobs")

    async def route(event: faust.EventT) -> list[tuple[str, Any]]:
        rec = ctx.codec.decode_as("anomaly", event.message.value)
        checker(ctx).anomaly(rec, event.message.value)
        finding_from_anomaly(rec)  # validates level and kind
        if rec["level"] == "funnel":
            return []
        return [(rec["job"], {k: v for k, v in rec.items() if k != "detected_ns"})]

    route_batches(ctx, src, jobs, name="funnel-router", role="funnel", route=route)
    window_agent(ctx, jobs, name="funnel-windows", role="funnel", impl=_FunnelAgent(ctx))
    add_lag_gauge(ctx, "funnel", [ctx.topic("anomalies"), jobs.get_topic_name()])
