"""Commit an input offset only after what it caused is durable: state and outputs.

faust (faust-streaming 0.15) sends a table's changelog record on every write and commits
source offsets on a timer without waiting for those sends; with a lingering producer a
crash right after a commit can lose state changes the committed input already made.
This module closes that gap and, on the way, writes each table key's changelog once per
commit instead of once per write:

* :class:`CoalescingTable` records a written key as *dirty* (holding a reference to its
  value) instead of sending a changelog record; a key created and deleted between two
  commits sends nothing (the changelog never held it: the steps tier's cells, written per
  step record and taken out when their step closes, ~1 s later);
* :class:`DurableCommits` replaces the app's attachment manager, which faust's consumer
  calls at each commit, right after it chose the offsets to commit and before it commits
  them (``Consumer._commit_tps`` -> ``_handle_attached``). There, every dirty key is sent
  with its latest value, and the consumer waits for those changelog records *and* for the
  agents' output records sent so far (``track``) before it commits.

Every event at or below a committed offset was processed before the commit chose it, so
its writes are in the dirty set and its outputs in the tracked list at that instant:
nothing a committed input caused can be lost. State may run ahead of the committed offset
(as with plain faust), so a replayed input must be idempotent — the agents' windows are.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import Any

import faust
from faust.app._attached import Attachments
from faust.tables.table import Table
from faust.types import TP
from faust.types.tuples import FutureMessage

__all__ = ["CoalescingTable", "DurableCommits", "install"]

log = logging.getLogger("argus.streams")

_DELETED = object()
WARN_AFTER_S = 30.0
"""A commit or flush still waiting for acknowledgements after this long is logged (warning),
and again each time as long again passes: a stalled worker says what it waits for."""


class CoalescingTable(Table):
    """A faust table whose changelog is written by :class:`DurableCommits` at commit time.

    A write marks the key dirty (partition of the current event, latest value); no record
    leaves until :meth:`take_dirty`. A key that was absent when its first write since the
    last :meth:`take_dirty` came (the changelog holds no value for it) and is deleted before
    the next is clean again: neither its value nor a tombstone is sent. Sensors still see
    every write; key TTLs are not used.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._argus_dirty: dict[Any, tuple[int, Any]] = {}
        self._argus_born: set[Any] = set()  # dirty keys the changelog holds no value for

    def on_key_set(self, key: Any, value: Any) -> None:
        # called before the store is written: absent now and not dirty = not in the changelog
        if key not in self._argus_dirty and key not in self.data:
            self._argus_born.add(key)
        self._argus_dirty[key] = (self._event_partition(key), value)
        self._sensor_on_set(self, key, value)

    def on_key_del(self, key: Any) -> None:
        if key in self._argus_born:  # created since the last commit: nothing to undo
            self._argus_born.discard(key)
            del self._argus_dirty[key]
        else:
            self._argus_dirty[key] = (self._event_partition(key), _DELETED)
        self._sensor_on_del(self, key)

    def _event_partition(self, key: Any) -> int:
        p = self.partition_for_key(key)  # the current event's partition; raises outside one
        if p is None:  # only with use_partitioner, which these tables do not set
            raise RuntimeError(f"table {self.name}: writes need a fixed partition")
        return p

    def take_dirty(self) -> list[FutureMessage]:
        """The latest value (or a tombstone) of every dirty key as changelog messages,
        serialized now; the keys are clean afterwards."""
        dirty, self._argus_dirty = self._argus_dirty, {}
        self._argus_born = set()
        topic = self.changelog_topic
        return [
            topic.as_future_message(
                key=key,
                value=None if value is _DELETED else value,
                partition=part,
                key_serializer=self.key_serializer,
                value_serializer="raw" if value is _DELETED else self.value_serializer,
                callback=self._on_changelog_sent,
            )
            for key, (part, value) in dirty.items()
        ]

    @property
    def dirty_count(self) -> int:
        return len(self._argus_dirty)


class DurableCommits(Attachments):
    """The app's attachment manager, extended: before any offset commit, flush the dirty
    keys of every registered table and hand back their futures and the tracked outputs,
    which faust's consumer awaits before it commits."""

    def __init__(self, app: faust.App) -> None:
        super().__init__(app)
        self.tables: list[CoalescingTable] = []
        self._outputs: list[Awaitable[Any]] = []

    def track(self, fut: Awaitable[Any]) -> None:
        """An output sent while processing an event: the next commit waits for it."""
        self._outputs.append(fut)
        if len(self._outputs) > 65_536:  # commits stalled: drop the ones already delivered
            self._outputs = [
                f for f in self._outputs if not (isinstance(f, asyncio.Future) and f.done())
            ]

    def _snapshot(self) -> tuple[list[Awaitable[Any]], list[FutureMessage]]:
        outputs, self._outputs = self._outputs, []
        return outputs, [m for t in self.tables for m in t.take_dirty()]

    @staticmethod
    async def _publish(
        outputs: list[Awaitable[Any]], changelog: list[FutureMessage]
    ) -> list[Awaitable[Any]]:
        # straight to the producer, not through faust's send buffer, whose back-pressure
        # would pause every agent of the worker behind a commit's burst
        for m in changelog:
            await m.message.channel.publish_message(m, wait=False)
        return [*outputs, *changelog]

    async def flush(self) -> None:
        """Make everything written and sent so far durable now (used before alerts).

        Raises the first failed record's error (the caller must not act as if durable)."""
        pending = await self._publish(*self._snapshot())
        if pending:
            await _acknowledged(pending, "flush")
            for f in pending:
                exc = f.exception() if isinstance(f, asyncio.Future) and not f.cancelled() else None
                if exc is not None:
                    raise exc

    async def publish_for_tp_offset(self, tp: TP, offset: int) -> list[Awaitable[Any]]:
        # called by Consumer._handle_attached for each partition about to be committed,
        # right after the offsets were chosen; faust awaits what we return (and, like
        # faust's own wait, ours does not raise: a failed record fails its producer)
        snap = self._snapshot()  # before any await: it covers everything the offsets do
        attached = await super().publish_for_tp_offset(tp, offset)
        pending = [*attached, *await self._publish(*snap)]
        return [_acknowledged(pending, f"commit of {tp.topic}[{tp.partition}]@{offset}")]


async def _acknowledged(pending: Sequence[Awaitable[Any]], what: str) -> None:
    """Wait until every record of ``pending`` is acknowledged or failed; while it takes
    longer than :data:`WARN_AFTER_S`, log how many are still out, each time that passes."""
    futs = [asyncio.ensure_future(p) for p in pending]
    t0 = time.monotonic()
    left = futs
    while left:
        _, still = await asyncio.wait(left, timeout=WARN_AFTER_S)
        left = list(still)
        if left:
            log.warning(
                "%s: %d of %d records not acknowledged by the broker after %.0f s",
                what,
                len(left),
                len(futs),
                time.monotonic() - t0,
            )
    for f in futs:  # failures are the caller's (and faust's) to report: mark them seen
        if not f.cancelled():
            f.exception()


def install(app: faust.App) -> DurableCommits:
    """Give ``app`` a :class:`DurableCommits` (once); the tables register themselves."""
    cur = app._attachments
    if isinstance(cur, DurableCommits):
        return cur
    durable = DurableCommits(app)
    app._attachments = durable
    return durable
