"""The funnel agent's window close: early (L3 caught up) only once the step findings a
progress message announced have arrived; the grace period still bounds the wait."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from argus.detectors.config import DetectorsConfig
from argus.detectors.findings import Finding, to_anomaly
from argus.streams.agents.funnel import _Funnel
from argus.streams.pipeline_config import PipelineConfig

JOB = "job-a"


def _funnel() -> _Funnel:
    ctx = SimpleNamespace(detectors=DetectorsConfig(), pcfg=PipelineConfig(funnel_grace_s=15.0))
    return _Funnel(ctx)  # type: ignore[arg-type]


def _straggler(end_step: int) -> dict[str, Any]:
    f = Finding(
        job=JOB,
        level="L2",
        kind="straggler",
        group_kind="dp",
        group_id="pp0.tp0",
        ranks=(3,),
        phase="mlp",
        window_start_step=end_step - 9,
        window_end_step=end_step,
        window_start_ns=1,
        window_end_ns=2,
        score=9.0,
        threshold=3.0,
    )
    rec = to_anomaly(f, detected_ns=3)
    return {k: v for k, v in rec.items() if k != "detected_ns"}


def _run(fn: Any, *items: Any) -> None:
    async def go() -> None:
        for item in items:
            await fn(*item)

    asyncio.run(go())


def _closed_with(announce: bool) -> tuple[int | None, int]:
    """Window 1 (steps 10-19) after progress to 19 and L3 to 19, the finding still on its
    way: (last closed window, findings in window 1's bucket)."""
    fun = _funnel()
    st = fun.new(JOB)
    anomaly = _straggler(19)
    progress: dict[str, Any] = {"progress": 19}
    if announce:
        progress["ids"] = {anomaly["id"]: 19}
    _run(fun.add, (JOB, st, {"progress": 0}, 0.0), (JOB, st, progress, 1.0))
    _run(fun.add, (JOB, st, {"l3": "dp/pp0.tp0", "w": 19}, 1.0))
    _run(fun.tick, (JOB, st, 1.5))
    closed = st["closed"]
    _run(fun.add, (JOB, st, anomaly, 2.0))  # the finding arrives one hop later
    return closed, len(st["buckets"].get("1", []))


def test_an_announced_finding_holds_the_early_close() -> None:
    closed, waiting = _closed_with(announce=True)
    assert closed == 0  # window 0 closed early, window 1 waits for its finding
    assert waiting == 1  # which joins window 1


def test_without_the_announcement_the_window_closed_before_its_finding() -> None:
    closed, waiting = _closed_with(announce=False)
    assert closed == 1  # closed early (L3 caught up) ...
    assert waiting == 0  # ... and the finding went to the next window


def test_the_grace_period_bounds_the_wait() -> None:
    fun = _funnel()
    st = fun.new(JOB)
    _run(
        fun.add,
        (JOB, st, {"progress": 0}, 0.0),
        (JOB, st, {"progress": 19, "ids": {"lost-id": 19}}, 1.0),
        (JOB, st, {"l3": "dp/pp0.tp0", "w": 19}, 1.0),
    )
    _run(fun.tick, (JOB, st, 2.0))
    assert st["closed"] == 0
    _run(fun.tick, (JOB, st, 2.0 + 15.0))  # the announced finding never came
    assert st["closed"] == 1
    assert st["expect"] == {}
