"""The fetch loop's delivery without four tasks a record (``argus.streams.fast_delivery``),
on a real faust consumer object (no broker needed to call its ``wait_first``).

* a delivery with room completes in the call: no task, the flow's wait closed;
* a delivery that blocks goes on as faust runs it: it completes once unblocked, or it is
  cancelled (and sees the cancellation) when the flow is suspended first;
* other calls (a timeout, other awaitables) are faust's own, unchanged;
* :class:`Resumed` passes results and exceptions through.
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest

from argus.streams import fast_delivery
from argus.streams.fast_delivery import Resumed


def _consumer() -> Any:
    """A faust consumer with the wrapper installed (twice: it installs once), flow running."""
    app = faust.App(f"t-fast-{id(object())}", broker="kafka://127.0.0.1:1", autodiscover=False)
    fast_delivery.install(app)
    fast_delivery.install(app)
    consumer = app.consumer
    consumer.suspend_flow.clear()
    return consumer


def _full_queue() -> asyncio.Queue[int]:
    """A queue a put blocks on (maxsize 1, holding 0)."""
    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
    queue.put_nowait(0)
    return queue


def test_a_delivery_with_room_completes_in_the_call() -> None:
    async def main() -> None:
        consumer = _consumer()
        queue: asyncio.Queue[int] = asyncio.Queue(maxsize=4)

        async def deliver(x: int) -> str:
            await queue.put(x)  # room: does not suspend
            return f"put {x}"

        before = len(asyncio.all_tasks())
        flow = consumer.suspend_flow.wait()
        res = await consumer.wait_first(deliver(1), flow)
        assert len(asyncio.all_tasks()) == before  # no task was made
        assert flow.cr_frame is None  # closed, not left "never awaited"
        assert res.results == ["put 1"] and not res.stopped
        assert queue.get_nowait() == 1

    asyncio.run(main())


def test_a_blocked_delivery_completes_once_unblocked() -> None:
    async def main() -> None:
        consumer = _consumer()
        queue = _full_queue()

        async def deliver(x: int) -> str:
            await queue.put(x)
            return f"put {x}"

        async def drain() -> None:
            await asyncio.sleep(0.05)
            assert queue.get_nowait() == 0

        task = asyncio.create_task(drain())
        res = await consumer.wait_first(deliver(7), consumer.suspend_flow.wait())
        await task
        assert res.results == ["put 7"]
        assert queue.get_nowait() == 7

    asyncio.run(main())


def test_a_blocked_delivery_is_cancelled_when_the_flow_stops() -> None:
    async def main() -> None:
        consumer = _consumer()
        queue = _full_queue()
        seen: list[str] = []

        async def deliver(x: int) -> None:
            try:
                await queue.put(x)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        async def suspend() -> None:
            await asyncio.sleep(0.05)
            consumer.suspend_flow.set()

        task = asyncio.create_task(suspend())
        await consumer.wait_first(deliver(1), consumer.suspend_flow.wait())
        await task
        await asyncio.sleep(0)  # the loser's cancellation runs
        assert seen == ["cancelled"]
        assert queue.qsize() == 1  # not delivered

    asyncio.run(main())


def test_other_calls_are_fausts() -> None:
    async def main() -> None:
        consumer = _consumer()
        ev = asyncio.Event()

        async def never() -> None:
            await asyncio.Event().wait()

        res = await consumer.wait_first(never(), ev.wait(), timeout=0.01)
        assert res.results == []  # timed out: faust's answer

    asyncio.run(main())


def test_resumed_passes_results_and_errors() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        futs = [loop.create_future(), loop.create_future()]

        async def two_waits() -> int:
            a = await futs[0]
            b = await futs[1]
            return int(a + b)

        coro = two_waits()
        pending = coro.send(None)
        assert pending is futs[0]
        task = asyncio.ensure_future(Resumed(coro, pending))
        await asyncio.sleep(0)
        futs[0].set_result(2)
        await asyncio.sleep(0)
        futs[1].set_result(3)
        assert await task == 5

        fut = loop.create_future()

        async def fails() -> None:
            await fut

        coro2 = fails()
        t2 = asyncio.ensure_future(Resumed(coro2, coro2.send(None)))
        await asyncio.sleep(0)
        fut.set_exception(ValueError("bad"))
        with pytest.raises(ValueError, match="bad"):
            await t2

    asyncio.run(main())
