"""L1 and L2 over ``argus.raw.steps``.

Routers decode each ``step_record`` (bad ones -> DLQ) and re-key it: L1 by job (one slim
message per record), L2 by comparison group (one message per group its phases route to,
``job/kind/group_id``, computed from the record's coords alone). Window agents close a step
when every expected rank reported or ``step_grace_s`` passed, then call the pure detectors:
L1 on the job's bounded iteration-time history, L2 on the group's last
``l2_window_steps`` closed steps. A timed-out step yields a ``missing_rank`` finding.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import faust

from argus.detectors import l1, l2
from argus.detectors.findings import Finding
from argus.detectors.inputs import group_windows, route_record, validate_step_record
from argus.detectors.routing import DIMS, Routing
from argus.streams import metrics, windows
from argus.streams.agents.common import emit_findings, group_members
from argus.streams.app import Ctx, add_lag_gauge, add_ticker, guarded, is_tick, partition_of

__all__ = ["register_l1", "register_l2"]

_HISTORY = 512


def _world(coords: dict[str, Any]) -> int:
    return math.prod(int(coords.get(f"{d}_size", 1)) for d in DIMS)


def _missing_finding(
    job: str,
    kind: str,
    gid: str,
    step: int,
    missing: list[int],
    expected: int,
    start_ns: int,
    end_ns: int,
    level: str,
) -> Finding:
    return Finding(
        job=job,
        level=level,
        kind="missing_rank",
        group_kind=kind,
        group_id=gid,
        ranks=tuple(missing),
        window_start_step=step,
        window_end_step=step,
        window_start_ns=start_ns,
        window_end_ns=end_ns,
        score=float(len(missing)),
        threshold=0.0,
        observed=float(expected - len(missing)),
        baseline=float(expected),
        unit="ranks",
        evidence={"missing": json.dumps(missing[:256]), "expected": str(expected)},
    )


def _collector_metrics(job: str, rec: dict[str, Any]) -> None:
    c = rec.get("collector") or {}
    dropped = metrics.COLLECTOR_DROPPED.labels(job)
    dropped.set(max(dropped._value.get(), float(c.get("dropped_records", 0))))
    errors = metrics.COLLECTOR_ERRORS.labels(job)
    errors.set(max(errors._value.get(), float(c.get("errors", 0))))
    it = rec["end_ns"] - rec["start_ns"]
    if it > 0:
        metrics.COLLECTOR_OVERHEAD.labels(job).set(float(c.get("overhead_ns", 0)) / it)


# -- L1 ------------------------------------------------------------------------------------
def register_l1(ctx: Ctx) -> None:
    cfg = ctx.detectors.l1
    src = ctx.external("raw.steps")
    jobs = ctx.internal_topic("l1-jobs")
    progress = ctx.internal_topic("funnel-jobs")
    state = ctx.table("l1-state")
    hist = ctx.table("l1-history")
    grace = ctx.pcfg.step_grace_s

    @ctx.app.agent(src, name="l1-router")
    async def l1_router(stream: faust.StreamT) -> None:
        async for event in stream.events():
            metrics.RECORDS_IN.labels("l1", "raw.steps").inc()

            async def handle(event: faust.EventT = event) -> None:
                try:
                    rec = ctx.codec.decode_as("step_record", event.message.value)
                    validate_step_record(rec)
                except Exception as exc:
                    await ctx.dlq(event, exc, "l1")
                    return
                _collector_metrics(rec["job"], rec)
                await ctx.send_keyed(
                    jobs,
                    rec["job"],
                    {
                        "r": rec["rank"],
                        "s": rec["step"],
                        "a": rec["start_ns"],
                        "b": rec["end_ns"],
                        "w": _world(rec["coords"]),
                    },
                )

            await guarded(ctx, event, "l1", handle)

    async def close(job: str, st: dict[str, Any], closed: list[windows.ClosedStep]) -> None:
        h = hist.get(job) or {"rows": [], "emitted": []}
        found: list[Finding] = []
        for c in closed:
            agg = st["agg"].pop(str(c.step), None)
            metrics.WINDOWS.labels("l1", "timeout" if c.timed_out else "complete").inc()
            if agg is None:
                continue
            h["rows"].append([c.step, agg[0], agg[1], agg[2]])
            if c.missing:
                missing = sorted(set(range(c.expected)) - set(c.ranks))
                metrics.MISSING.labels("l1").inc(len(missing))
                found.append(
                    _missing_finding(
                        job, "job", "all", c.step, missing, c.expected, agg[1], agg[2], "L1"
                    )
                )
            await ctx.send_keyed(progress, job, {"progress": c.step, "end_ns": agg[2]})
        rows = sorted({r[0]: r for r in h["rows"]}.values())[-_HISTORY:]
        h["rows"] = rows
        if rows:
            t0 = time.perf_counter()
            s, it, a, b = (list(x) for x in zip(*rows, strict=True))
            found += l1.detect(s, it, job=job, cfg=cfg, start_ns=a, end_ns=b)
            metrics.DETECT_S.labels("L1").observe(time.perf_counter() - t0)
        await emit_findings(ctx, found, h["emitted"], "l1")
        hist[job] = h

    @ctx.app.agent(jobs, name="l1-windows")
    async def l1_windows(stream: faust.StreamT) -> None:
        async for event in stream.events():

            async def handle(event: faust.EventT = event) -> None:
                now = time.time()
                if is_tick(event):
                    part = event.message.partition
                    for job in list(state.keys()):
                        if partition_of(job, ctx.pcfg.internal_partitions) != part:
                            continue
                        st = state[job]
                        closed = windows.expire(st["win"], now_s=now, grace_s=grace)
                        if closed:
                            await close(job, st, closed)
                            state[job] = st
                    return
                job = event.message.key.decode()
                m = json.loads(event.message.value)
                st = state.get(job) or {"win": windows.new_state(), "agg": {}}
                status, closed = windows.add(
                    st["win"], step=m["s"], rank=m["r"], expected=m["w"], now_s=now
                )
                if status == "new":
                    agg = st["agg"].get(str(m["s"]))
                    it = float(m["b"] - m["a"])
                    st["agg"][str(m["s"])] = (
                        [it, m["a"], m["b"]]
                        if agg is None
                        else [max(agg[0], it), min(agg[1], m["a"]), max(agg[2], m["b"])]
                    )
                elif status == "dup":
                    metrics.DUPLICATES.labels("l1").inc()
                else:
                    metrics.LATE.labels("l1").inc()
                if closed:
                    await close(job, st, closed)
                state[job] = st

            await guarded(ctx, event, "l1", handle)

    add_ticker(ctx, jobs)
    add_lag_gauge(ctx, "l1", [ctx.topic("raw.steps"), jobs.get_topic_name()])


# -- L2 ------------------------------------------------------------------------------------
def register_l2(ctx: Ctx) -> None:
    cfg = ctx.detectors.l2
    routing = Routing.from_config(ctx.detectors.routing)
    src = ctx.external("raw.steps")
    groups = ctx.internal_topic("l2-groups")
    state = ctx.table("l2-state")
    cells = ctx.table("l2-cells")
    grace = ctx.pcfg.step_grace_s
    width = ctx.pcfg.l2_window_steps

    @ctx.app.agent(src, name="l2-router")
    async def l2_router(stream: faust.StreamT) -> None:
        async for event in stream.events():
            metrics.RECORDS_IN.labels("l2", "raw.steps").inc()

            async def handle(event: faust.EventT = event) -> None:
                try:
                    rec = ctx.codec.decode_as("step_record", event.message.value)
                    validate_step_record(rec)
                    routed = route_record(rec, routing)
                except Exception as exc:
                    await ctx.dlq(event, exc, "l2")
                    return
                for kind, gid, phases in routed:
                    await ctx.send_keyed(
                        groups,
                        f"{rec['job']}/{kind}/{gid}",
                        {
                            "r": rec["rank"],
                            "s": rec["step"],
                            "a": rec["start_ns"],
                            "b": rec["end_ns"],
                            "c": rec["coords"],
                            "exp": routing.expected_size(rec["coords"], kind),
                            "ph": [
                                [p["name"], p.get("stream_kind", "compute"), p["duration_ns"]]
                                for p in phases
                            ],
                        },
                    )

            await guarded(ctx, event, "l2", handle)

    def _record(job: str, step: int, rank: int, cell: dict[str, Any]) -> dict[str, Any]:
        return {
            "job": job,
            "rank": rank,
            "step": step,
            "start_ns": cell["a"],
            "end_ns": cell["b"],
            "coords": cell["c"],
            "phases": [
                {"name": n, "stream_kind": k, "duration_ns": d, "start_ns": cell["a"]}
                for n, k, d in cell["ph"]
            ],
        }

    async def close(gk: str, st: dict[str, Any], closed: list[windows.ClosedStep]) -> None:
        job, kind, gid = gk.split("/", 2)
        found: list[Finding] = []
        recent: list[list[Any]] = st.setdefault("recent", [])
        for c in closed:
            metrics.WINDOWS.labels("l2", "timeout" if c.timed_out else "complete").inc()
            recent.append([c.step, list(c.ranks)])
            if c.missing and st.get("coords"):
                members = group_members(st["coords"], routing.varies(kind))
                missing = sorted(set(members) - set(c.ranks))
                metrics.MISSING.labels("l2").inc(len(missing))
                cell0 = cells.get(f"{gk}|{c.step}|{c.ranks[0]}") if c.ranks else None
                found.append(
                    _missing_finding(
                        job,
                        kind,
                        gid,
                        c.step,
                        missing,
                        c.expected,
                        cell0["a"] if cell0 else 0,
                        cell0["b"] if cell0 else 0,
                        "L2",
                    )
                )
        recent.sort()
        for step, ranks in recent[:-width]:
            for r in ranks:
                key = f"{gk}|{step}|{r}"
                if cells.get(key) is not None:
                    del cells[key]
        del recent[:-width]
        records = []
        for step, ranks in recent:
            for r in ranks:
                cell = cells.get(f"{gk}|{step}|{r}")
                if cell is not None:
                    records.append(_record(job, step, r, cell))
        t0 = time.perf_counter()
        for win in group_windows(records, routing, job=job, kinds=[kind]):
            if win.group_id == gid:
                found += l2.detect(win, cfg)
        metrics.DETECT_S.labels("L2").observe(time.perf_counter() - t0)
        await emit_findings(ctx, found, st.setdefault("emitted", []), "l2")

    @ctx.app.agent(groups, name="l2-windows")
    async def l2_windows(stream: faust.StreamT) -> None:
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
                            await close(gk, st, closed)
                            state[gk] = st
                    return
                gk = event.message.key.decode()
                m = json.loads(event.message.value)
                st = state.get(gk) or {"win": windows.new_state(), "recent": [], "emitted": []}
                st.setdefault("coords", m["c"])
                status, closed = windows.add(
                    st["win"], step=m["s"], rank=m["r"], expected=m["exp"], now_s=now
                )
                if status == "new":
                    cells[f"{gk}|{m['s']}|{m['r']}"] = {
                        "a": m["a"],
                        "b": m["b"],
                        "c": m["c"],
                        "ph": m["ph"],
                    }
                elif status == "dup":
                    metrics.DUPLICATES.labels("l2").inc()
                else:
                    metrics.LATE.labels("l2").inc()
                if closed:
                    await close(gk, st, closed)
                state[gk] = st

            await guarded(ctx, event, "l2", handle)

    add_ticker(ctx, groups)
    add_lag_gauge(ctx, "l2", [ctx.topic("raw.steps"), groups.get_topic_name()])
