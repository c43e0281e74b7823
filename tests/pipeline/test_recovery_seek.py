"""The recovery seek guard (argus.streams.recovery_seek): the consumer's flow is stopped
while faust seeks the input partitions back to their commits, and faust resumes it after.

The race itself is exercised end to end by ``test_restart.py`` (it stalled in about half its
runs with the workers' 10 ms producer linger before the guard); these tests pin the guard's
mechanics and the faust behaviour it relies on, so a faust upgrade that changes either
fails here rather than as an occasional stall."""

from __future__ import annotations

import asyncio
import inspect
import re

from faust.tables.recovery import Recovery

from argus.config import load_settings
from argus.streams import recovery_seek
from argus.streams.app import build_app


def test_perform_seek_stops_the_flow_before_it_seeks() -> None:
    app, _ = build_app(load_settings(env={}), ["l1"])
    consumer = app.consumer
    seen: list[bool] = []

    async def seek_to_committed() -> dict[object, int]:
        seen.append(consumer.flow_active)
        return {}

    consumer.seek_to_committed = seek_to_committed  # the broker round trip, recorded

    async def recover() -> None:
        consumer.resume_flow()
        await consumer.perform_seek()  # recovery's seek with the flow active
        await consumer.perform_seek()  # getmany's seek with the flow already stopped

    asyncio.run(recover())
    assert seen == [False, False]
    guarded = consumer.perform_seek
    recovery_seek.install(app)  # once: not wrapped twice
    assert consumer.perform_seek is guarded


def test_faust_resumes_the_flow_after_each_recovery_seek() -> None:
    """Every recovery path that seeks the inputs resumes the consumer's flow afterwards
    (otherwise the guard's stop would stall the worker)."""
    src = inspect.getsource(Recovery)
    seeks = [m.start() for m in re.finditer(r"consumer\.perform_seek\(\)", src)]
    assert seeks, "faust's recovery no longer seeks to committed offsets: revisit the guard"
    for at in seeks:
        rest = src[at:]
        nxt = rest.find("\n    async def ")  # the end of the method holding this seek
        body = rest if nxt < 0 else rest[:nxt]
        assert "consumer.resume_flow()" in body, src[at - 400 : at + 400]
