"""Stop faust's fetch loop while recovery seeks the input partitions back to their commits.

faust-streaming 0.15 ends a recovery (``Recovery._resume_streams`` and the end of its
restart loop) with::

    consumer.resume_partitions(input partitions)   # flow is already active (changelogs)
    await consumer.perform_seek()                  # seek to committed, read offset := committed
    app.flow_control.resume()                      # clears every stream's queue
    consumer.resume_flow()

While ``perform_seek`` waits on the broker (~0.2 s), the fetch loop
(``Consumer._drain_messages``) is already delivering input records from the batch it
fetched after ``resume_partitions``; it goes on doing so *after* the seek has reset the read
offset, moving it back past the committed offset. ``flow_control.resume()`` then clears
the queued records, and the re-fetched ones from the committed offset on are all dropped as
"below the read offset" (faust's ``DROPPED MESSAGE`` dev log). Those records never reach an
agent, no offset past them is committed, and the worker silently stops taking that
partition until its next restart. A producer linger only changes the timing (the SIGKILL
restart test stalled in about half its runs with a 10 ms linger).

:func:`install` wraps the consumer's ``perform_seek`` so that it first stops the flow: the
fetch loop leaves its batch at the next record, the seek's read offsets stand, the cleared
queue loses nothing that is not fetched again, and faust resumes the flow itself right after
the seek (every caller of ``perform_seek`` does, or calls it with the flow already stopped).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import faust

__all__ = ["install"]


def install(app: faust.App) -> None:
    """Make ``app.consumer.perform_seek`` stop the consumer's flow before it seeks (once)."""
    consumer: Any = app.consumer
    if getattr(consumer, "_argus_seek_guard", False):
        return
    seek: Callable[[], Awaitable[None]] = consumer.perform_seek

    async def perform_seek() -> None:
        if consumer.flow_active:
            consumer.stop_flow()  # the fetch loop leaves its in-flight batch
            await asyncio.sleep(0)  # and gets to see it before the seek resets read offsets
        await seek()

    consumer.perform_seek = perform_seek
    consumer._argus_seek_guard = True
