"""The funnel agent's window close: early (L3 caught up) only once the step findings a
progress message announced have arrived; the grace period still bounds the wait."""

from __future__ import annotations

import asyncio
from typing import Any

from argus.detectors.config import DetectorsConfig
from argus.detectors.findings import Finding, to_anomaly
from argus.streams.memory import _MemoryCtx
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.roles.funnel import _MAX_OPEN, Funnel

JOB = "job-a"


def _funnel() -> Funnel:
    return Funnel(_MemoryCtx(DetectorsConfig(), PipelineConfig(funnel_grace_s=15.0)))


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
    _run(fun.add, (JOB, st, {"scope": "dp/pp0.tp0", "upto": 19, "ids": {}}, 1.0))
    _run(fun.tick, (JOB, st, 1.5))
    closed = st["closed"]
    _run(fun.add, (JOB, st, anomaly, 2.0))  # the finding arrives one hop later
    return closed, int(st["buckets"].get("1", 0))


def test_an_announced_finding_holds_the_early_close() -> None:
    closed, waiting = _closed_with(announce=True)
    assert closed == 0  # window 0 closed early, window 1 waits for its finding
    assert waiting == 1  # which joins window 1


def test_without_the_announcement_the_window_closed_before_its_finding() -> None:
    closed, waiting = _closed_with(announce=False)
    assert closed == 1  # closed early (L3 caught up) ...
    assert waiting == 0  # ... and the finding went to the next window


def test_a_lost_announced_finding_holds_the_window_until_the_job_is_idle() -> None:
    fun = _funnel()
    st = fun.new(JOB)
    _run(
        fun.add,
        (JOB, st, {"progress": 0}, 0.0),
        (JOB, st, {"progress": 19, "ids": {"lost-id": 19}}, 1.0),
        (JOB, st, {"scope": "dp/pp0.tp0", "upto": 19, "ids": {}}, 1.0),
    )
    _run(fun.tick, (JOB, st, 2.0 + 15.0))  # no clock closes it while the job goes on
    assert st["closed"] == 0
    _run(fun.tick, (JOB, st, 1.0 + fun.idle))  # the job went quiet: the idle bound
    assert st["closed"] == 1
    assert st["expect"] == {}


def test_declared_l3_scopes_hold_the_window_whatever_the_lag() -> None:
    """Steps 0-9 carry kernels judged by 2 L3 scopes: window 0 closes only once both judged
    past step 9, however long (in processing time) the second takes while the job goes on."""
    fun = _funnel()
    st = fun.new(JOB)
    _run(fun.add, *[(JOB, st, {"progress": s, "l3n": 2}, float(s)) for s in range(10)])
    _run(fun.add, (JOB, st, {"scope": "dp/a", "upto": 9, "ids": {}}, 10.0))
    for t in range(10, 200, 5):  # progress keeps coming: the job is not idle
        _run(fun.add, (JOB, st, {"progress": t, "l3n": 2}, float(t)))
        _run(fun.tick, (JOB, st, float(t)))
    assert st["closed"] == -1
    _run(fun.add, (JOB, st, _straggler(9), 201.0))  # a late L3-time finding: its own window
    _run(fun.add, (JOB, st, {"scope": "dp/b", "upto": 9, "ids": {}}, 202.0))
    _run(fun.tick, (JOB, st, 202.0))
    assert st["closed"] == 0
    assert st["fs"]["culprits"], "the finding was judged in window 0"


def test_the_memory_bound_closes_a_window_left_far_behind() -> None:
    fun = _funnel()
    st = fun.new(JOB)
    end = 10 * (_MAX_OPEN + 1)
    _run(fun.add, *[(JOB, st, {"progress": s, "l3n": 1}, 1.0) for s in range(end)])
    _run(fun.tick, (JOB, st, 1.0))
    assert st["closed"] == 0  # window 0 given up; the others still wait for L3
