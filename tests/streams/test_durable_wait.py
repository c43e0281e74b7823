"""A commit waiting on unacknowledged records says so, and a failed record does not hang it."""

from __future__ import annotations

import asyncio
import logging

import pytest

from argus.streams import durable


def test_waits_for_every_record_and_logs_while_some_are_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(durable, "WARN_AFTER_S", 0.05)

    async def run() -> list[bool]:
        loop = asyncio.get_running_loop()
        acked, late = loop.create_future(), loop.create_future()
        acked.set_result("ok")
        loop.call_later(0.18, late.set_result, "ok")
        await durable._acknowledged([acked, late], "commit of t[0]@7")
        return [acked.done(), late.done()]

    with caplog.at_level(logging.WARNING, logger="argus.streams"):
        assert asyncio.run(run()) == [True, True]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) >= 2  # once per WARN_AFTER_S while the late record was out
    assert all(m.startswith("commit of t[0]@7: 1 of 2 records not acknowledged") for m in warned)


def test_a_failed_record_ends_the_wait_without_raising(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        failed = loop.create_future()
        failed.set_exception(RuntimeError("broker said no"))
        await durable._acknowledged([failed], "commit")

    with caplog.at_level(logging.WARNING, logger="argus.streams"):
        asyncio.run(run())  # faust's own wait does not raise either: the producer fails
    assert caplog.records == []
