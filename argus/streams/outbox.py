"""An outbox whose records leave exactly once, after the state that decided them.

The funnel decides alerts and verdicts when it closes a window and keeps them in its state
(one ``outbox`` list per job) until they are sent. :meth:`Outbox.deliver`:

1. makes the state holding the outbox durable (:meth:`DurableCommits.flush`), so a crash
   from here on restores the entries;
2. sends the entries that may not have left yet and waits until the broker has them;
3. the caller then empties the outbox (and ``window_agent`` makes that durable at once).

A crash between 1 and the durable empty outbox restores entries some of which may already be
on their topics. Each entry records the process (``by``, a random id per process) that put it
in the outbox and when (``t``, wall clock). Entries put there by another process (a crashed
one, or the previous owner of the partition) are checked against what their topics already
hold since ``t`` (:func:`argus.streams.topic_tail.identities_since`, in an executor) and only
those not there are sent; entries of this process are sent without a look (this process
knows what it sent: ``sent``, and a failed send marks the entries unknown again). So every
entry is on its topic exactly once, whatever the moment of a crash.

Assumed: nothing sends a record with an entry's identity but the outbox (alerts: the funnel's
deterministic ``id``; anomalies: their ``id``), and a killed process's produce requests are
appended by the broker before the restarted process reads the tail (the restart takes
seconds; a request in flight takes milliseconds).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
import uuid
from collections import OrderedDict
from typing import Any

from argus.streams import metrics
from argus.streams.roles.outbox import OutboxEntry, entry, identity, normalize
from argus.streams.topic_tail import identities_since

__all__ = ["PAUSE_ENV", "Outbox"]

log = logging.getLogger("argus.streams")

SKEW_S = 300.0
"""The tail is read from this long before an entry's ``t`` (s): clock steps of the sending
host, or a topic stamped with the broker's append time."""
LEGACY_LOOKBACK_S = 3600.0
"""How far back the tail is read for an entry of an older version (no ``t``) (s)."""
PAUSE_ENV = "ARGUS_FAILPOINT_OUTBOX_PAUSE_S"
"""Failpoint for crash tests: seconds to wait once the outbox state is durable and again
once the entries are acknowledged, widening the windows in which a SIGKILL used to lose or
repeat an alert. Unset (0) in production."""
_MAX_SENT = 65_536


class Outbox:
    """Sends outbox entries exactly once (see the module doc).

    ``ctx`` is the worker's :class:`argus.streams.app.Ctx` (``emit``, ``durable``,
    ``settings``, ``codec``, ``topic``); ``tail`` reads what a topic holds (blocking).
    """

    def __init__(self, ctx: Any, *, tail: Any = identities_since, role: str = "funnel") -> None:
        self.ctx = ctx
        self.role = role
        self.tail = tail
        self.incarnation = uuid.uuid4().hex
        self.sent: OrderedDict[str, None] = OrderedDict()  # ids this process delivered
        self.pause_s = float(os.environ.get(PAUSE_ENV) or 0.0)

    def entry(self, topic: str, key: str, record: str, value: dict[str, Any]) -> OutboxEntry:
        return entry(topic, key, record, value, by=self.incarnation)

    async def deliver(self, entries: list[Any]) -> int:
        """Send ``entries`` (the state's outbox list, normalized in place) exactly once;
        returns how many were sent now. The state holding them must have been written to
        its table: it is made durable first.

        Raises
        ------
        argus.streams.topic_tail.TailError
            The tail of a topic could not be read: nothing was sent, retry later.
        Exception
            A send failed; the entries count as of unknown origin, so the retry checks.
        """
        await self.ctx.durable.flush()  # the state that holds the outbox, first
        await self._pause()
        entries[:] = [normalize(e) for e in entries]
        todo: list[OutboxEntry] = [e for e in entries if e["id"] not in self.sent]
        foreign = [e for e in todo if e["by"] != self.incarnation]
        if foreign:
            there = await self._on_topics(foreign) & {e["id"] for e in foreign}
            if there:
                log.warning(
                    "outbox: %d of %d records were sent before a restart; not sent again",
                    len(there),
                    len(foreign),
                )
                metrics.DUPLICATES.labels(f"{self.role}-outbox").inc(len(there))
            todo = [e for e in todo if e["id"] not in there]
        try:
            for e in todo:
                await self.ctx.emit(e["topic"], e["key"], e["record"], e["value"], self.role)
            await self.ctx.durable.flush()  # acknowledged
        except BaseException:
            for e in entries:  # some may have left: let the retry look
                e["by"] = ""
            raise
        for e in todo:
            v = e["value"]
            if e["record"] == "alert":
                metrics.ALERTS.labels(v["action"]).inc()
            else:
                metrics.ANOMALIES.labels(v["level"], v["kind"]).inc()
            self.sent[e["id"]] = None
        while len(self.sent) > _MAX_SENT:
            self.sent.popitem(last=False)
        await self._pause()
        return len(todo)

    async def _on_topics(self, entries: list[OutboxEntry]) -> set[str]:
        """Identities of ``entries`` their topics already hold (read in an executor)."""
        loop = asyncio.get_running_loop()
        now = time.time()
        found: set[str] = set()
        by_topic: dict[tuple[str, str], list[OutboxEntry]] = {}
        for e in entries:
            by_topic.setdefault((e["topic"], e["record"]), []).append(e)
        for (suffix, record), es in by_topic.items():
            t0 = min((e["t"] if e["t"] is not None else now - LEGACY_LOOKBACK_S) for e in es)
            read = functools.partial(
                self.tail,
                self.ctx.settings,
                self.ctx.codec,
                self.ctx.topic(suffix),
                {e["key"] for e in es},
                int((t0 - SKEW_S) * 1000),
                functools.partial(identity, record),
            )
            found |= await loop.run_in_executor(None, read)
        return found

    async def _pause(self) -> None:
        if self.pause_s > 0:
            await asyncio.sleep(self.pause_s)
