"""Faust agents of the steps roles (``l1``, ``l2``): registration and transport only.

A router decodes and validates each ``step_record`` (bad ones go to the DLQ with the
reason) and re-keys it by rank block (:func:`argus.streams.roles.steps.route_step`): by
default a loop beside the worker does (:mod:`argus.streams.steps_router_loop`), with
``streams.steps_router_runtime = "faust"`` an agent of the app; two
window agents run the roles :class:`~argus.streams.roles.steps.StepBlocks` and
:class:`~argus.streams.roles.steps.JobSteps`. Both levels share the router and the agents
when they run in one worker (``argus worker l1 l2``); run alone, each has its own consumer
group and computes only its level.
"""

from __future__ import annotations

from typing import Any

import faust

from argus.detectors.inputs import validate_step_record
from argus.streams.app import Ctx, add_lag_gauge, route_batches, window_agent
from argus.streams.roles.steps import JobSteps, StepBlocks, collector_metrics, route_step
from argus.streams.validate import checker

__all__ = ["register_l1", "register_l2"]


def _register(ctx: Ctx, level: str) -> None:
    impl = ctx.shared.get("steps")
    if impl is None:
        impl = ctx.shared["steps"] = JobSteps(ctx)
        src = ctx.external("raw.steps")
        by_block = ctx.internal_topic("steps-by-block")
        blocks = StepBlocks(ctx, impl.levels)
        block_ranks = ctx.pcfg.steps_block_ranks

        async def route(event: faust.EventT) -> list[tuple[str, Any]]:
            rec = ctx.codec.decode_as("step_record", event.message.value)
            # reason-coded InputError first
            checker(ctx).step(rec, event.message.value, broker_s=event.message.timestamp)
            validate_step_record(rec)
            collector_metrics(rec["job"], rec)
            return route_step(rec, block_ranks, event.message.partition)

        tiers = [by_block.get_topic_name(), blocks.out.get_topic_name()]
        if ctx.pcfg.steps_router_runtime == "faust":  # else its own loop (steps_router_loop)
            route_batches(ctx, src, by_block, name="steps-router", role="steps", route=route)
            tiers.insert(0, src.get_topic_name())
        window_agent(ctx, by_block, name="steps-blocks", role="steps", impl=blocks)
        window_agent(ctx, blocks.out, name="steps-windows", role="steps", impl=impl)
        add_lag_gauge(ctx, "steps", tiers)
    impl.levels.add(level)


def register_l1(ctx: Ctx) -> None:
    _register(ctx, "l1")


def register_l2(ctx: Ctx) -> None:
    _register(ctx, "l2")
