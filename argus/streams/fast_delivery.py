"""Hand a fetched record to its stream without four tasks a record, when nothing blocks.

faust-streaming 0.15's fetch loop (``Consumer._drain_messages``) delivers each record with::

    await self.wait_first(callback(message), self.suspend_flow.wait())

so that a delivery blocked on a full stream buffer is abandoned when the flow is suspended
(a rebalance) or the consumer stops. ``wait_first`` makes a task of the delivery, of the
flow event's wait and of the consumer's stopped and crashed events, waits for the first,
and cancels the rest: on the 2-core VM ~70 us of CPU a record, for records that almost
always go into a buffer with room at once. A faust agent that only iterates its events cost
148 us a 450-byte record (76 us with this module), against 1-3 us for aiokafka or
confluent-kafka alone (``bench/bench_kafka_clients.py --step-sized``, BENCHMARKS.md).

:func:`install` wraps the consumer's ``wait_first``: for exactly that call (a coroutine and
an ``Event.wait()``, no timeout; the flow not suspended, the consumer neither stopped nor
crashed) it first runs the delivery up to its first suspension. A delivery that completes
without suspending (the buffer had room) is done: no task, no wait. One that suspends (a
full buffer, a contended lock) goes on exactly as faust runs it: the rest of the same
coroutine (:class:`Resumed`, which passes the future it waits on through to the task, and
a cancellation into the coroutine) raced against the flow's suspension in ``wait_first``.
Every other call goes to faust's ``wait_first`` unchanged. What differs: the fetch loop no
longer yields to the event loop between records that did not block (it still does every
100 records, faust's ``yield_every``), so an agent takes a fetched batch in larger polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

import faust
from mode.services import WaitResults

__all__ = ["Resumed", "install"]


class Resumed:
    """The rest of a coroutine that already ran up to its first suspension, which yielded
    ``pending`` (the future it waits on): awaiting it resumes the coroutine where it was."""

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self.coro = coro
        self.pending = pending

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, step = self.coro, self.pending
        while True:
            try:
                sent = yield step  # the task waits on it, as it would have for coro
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation: into the coroutine
                try:
                    step = coro.throw(exc)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    step = coro.send(sent)
                except StopIteration as done:
                    return done.value


def _is_delivery(consumer: Any, coros: tuple[Any, ...], timeout: Any) -> bool:
    """The fetch loop's call: (delivery coroutine, ``Event.wait()``), no timeout, the flow
    running and the consumer alive."""
    return (
        timeout is None
        and len(coros) == 2
        and asyncio.iscoroutine(coros[0])
        and asyncio.iscoroutine(coros[1])
        and getattr(coros[1], "__qualname__", "") == "Event.wait"
        and not consumer.suspend_flow.is_set()
        and not consumer._stopped.is_set()
        and not consumer._crashed.is_set()
    )


def install(app: faust.App) -> None:
    """Wrap ``app.consumer.wait_first`` as the module says (once)."""
    consumer: Any = app.consumer
    if getattr(consumer, "_argus_fast_delivery", False):
        return
    slow = consumer.wait_first

    async def wait_first(*coros: Any, timeout: Any = None) -> WaitResults:
        if not _is_delivery(consumer, coros, timeout):
            return await slow(*coros, timeout=timeout)
        delivery, flow = coros
        try:
            pending = delivery.send(None)
        except StopIteration as done:  # delivered without blocking
            flow.close()
            return WaitResults([delivery], [done.value], False)
        except BaseException:
            flow.close()
            raise
        return await slow(Resumed(delivery, pending), flow)

    consumer.wait_first = wait_first
    consumer._argus_fast_delivery = True
