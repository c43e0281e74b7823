"""A Kafka producer that never blocks or raises into the training thread.

The training thread calls :meth:`RecordProducer.submit`, which appends one item to a small
hand-over queue (bounded in records and in hinted bytes) and returns. A daemon thread drains
it: it builds the record (items may be thunks, so that packing and encoding happen off the
training thread; a thunk may return several records, e.g. the parts of a kernel window),
encodes it with :class:`argus.schemas.Codec` and hands the **encoded bytes** to
confluent-kafka, whose queue is the backlog: bounded in records and bytes
(``queue.buffering.max.messages``/``.kbytes``), held in C memory.

No Python object per queued record: one delivery callback is set for the whole producer
(a callback passed to each ``produce()``, as before issue 19, was a new bound-method object
per record, ~10,000 of them alive while the broker was away, and the full garbage collections
they triggered walked the whole heap on the training thread: 180-280 ms stalls). The hand-over
queue holds only what was submitted since the last drain (at most ``max_pending`` items,
about a second of steps), so no collection on the training thread grows with the backlog.

Wake-ups are what a background thread costs on a busy host (each one runs cold code: on the
2-core bench VM ~0.2-0.4 ms of CPU per wake-up of the delivery thread, against ~50 us per
step record), so the delivery thread sleeps ``drain_interval_s`` (default 1 s) between
drains and is woken early only when the hand-over queue passes half of either bound; a drain
hands all queued records to librdkafka at once and ``linger.ms`` (100 ms) packs them into one
request per topic partition. Records still go one per Kafka message; what they wait here is at
most ``drain_interval_s`` + ``linger.ms`` (the L2 detection budget is 5 s at p95).

Loss is counted, never hidden: a full hand-over queue evicts the oldest item; a full
librdkafka queue (``BufferError``), a record over ``max_message_bytes``, a record the broker
did not take within ``message_timeout_ms``, a record still queued at :meth:`close` and a
record that fails to encode all add to :attr:`dropped_records` / :attr:`dropped_bytes` (or
:attr:`errors`). Those cumulative counters ride in every step record.

Shutdown is bounded: :meth:`close` flushes for at most its timeout, and for at most
``unreachable_flush_s`` (0.1 s) while the broker is known to be unreachable (a connection
error since the last acknowledged record); what is left is purged and counted.

Delivery uses ``enable.idempotence=true`` and ``acks=all``. librdkafka's threads run at a
lower priority than the training threads; the delivery thread, which holds the GIL, does not
(:mod:`argus.collectors.priority`), and it paces itself: after each record it builds it sleeps
``pace`` times that work once it reaches ``pace_chunk_s`` (0.2 ms), so the training thread,
which gives the GIL up in every torch op, waits at most that much work (or one longer
record's) to take it back (a drain's burst of ~700 records held it for 25-35 ms before, all of
it landing on one 1.4 ms step). A sleep per record instead (issue 22: ~270 a second on an 8 ms
step) cost the delivery thread ~25 us of CPU per step in sleeps and GIL hand-overs. A build
that is long by itself (a kernel window's parse) calls :meth:`RecordProducer.pace_point`
between its steps to be paced the same way.

Step records come from their builder as an Avro body already (``bytes``,
:class:`argus.schemas.step_body.StepBodyEncoder`): the codec's header goes in front, nothing
else is done to them; the ``tap`` then sees the decoded record.

Fork safety: after ``fork()`` the child's copy is dead (no thread, no librdkafka handle, which
is not fork-safe); :meth:`submit` returns ``False`` there without touching any lock the parent
may have held. DataLoader workers therefore cost nothing and publish nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from argus.collectors.priority import made_at_low_priority
from argus.schemas import Codec
from argus.topics import MAX_MESSAGE_BYTES

__all__ = ["RecordProducer"]

log = logging.getLogger("argus.collectors.producer")

#: what a thunk or a ``builders`` entry returns: a record, several, an Avro body, or nothing
Built = Mapping[str, Any] | bytes | Sequence[Mapping[str, Any]] | None
Value = Mapping[str, Any] | Callable[[], Built] | tuple[Any, ...]

_LIVE: weakref.WeakSet[RecordProducer] = weakref.WeakSet()
_LOG_EVERY_S = 30.0  # at most one warning of each producer this often


def _after_fork_in_child() -> None:
    for p in list(_LIVE):
        p._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


class RecordProducer:
    """Bounded, non-blocking, drop-and-count publisher of argus records.

    Parameters
    ----------
    kafka_config : mapping
        librdkafka settings (at least ``bootstrap.servers``), e.g. ``Settings.kafka_config()``.
    max_records : int
        Backlog bound in records (librdkafka's queue of encoded records).
    max_bytes : int
        Backlog bound in encoded bytes (librdkafka's queue); also bounds the hand-over
        queue by each item's ``size_bytes`` hint.
    message_timeout_ms : int
        A record the broker has not acknowledged after this long is dropped and counted.
    codec : Codec, optional
        Encoder; a default single-object codec when omitted.
    drain_interval_s : float
        How often the delivery thread drains the hand-over queue, seconds (earlier when it is
        half full).
    linger_ms : int
        librdkafka ``linger.ms``: how long a drained burst may wait to share a request.
    max_message_bytes : int
        Largest record, key + value (bytes): librdkafka ``message.max.bytes``; a larger one
        is dropped and counted. Default :data:`argus.topics.MAX_MESSAGE_BYTES`.
    max_pending : int
        Hand-over queue bound in items (default ``min(max_records, 2048)``).
    unreachable_flush_s : float
        Longest flush at :meth:`close` while the broker is known unreachable (s).
    pace : float
        After each ``pace_chunk_s`` of work, the delivery thread sleeps ``pace`` times that
        work (GIL released), so a drain takes at most ``1 / (1 + pace)`` of the GIL (0: no
        pacing; default 8: at 3 a 1.4 ms step beside a drain was up to 2.1-2.5x the
        collectors-off p99 on a quiet host, at 8 1.6-1.9x, issue 19).
    pace_catch_up : float
        The pace while the hand-over queue is more than half full (a burst, or builds slower
        than the steps make records): the backlog is worked off at up to half the GIL
        instead of being dropped.
    pace_chunk_s : float
        Work (s, wall) the delivery thread does between two pacing sleeps; a record that
        takes longer is followed by its own sleep.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        *,
        max_records: int = 10_000,
        max_bytes: int = 32 * 1024 * 1024,
        message_timeout_ms: int = 30_000,
        codec: Codec | None = None,
        drain_interval_s: float = 1.0,
        linger_ms: int = 100,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_pending: int | None = None,
        unreachable_flush_s: float = 0.1,
        pace: float = 8.0,
        pace_catch_up: float = 1.0,
        pace_chunk_s: float = 0.0002,
    ) -> None:
        from confluent_kafka import Producer

        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_message_bytes = max_message_bytes
        self.max_pending = max(1, min(max_records, 2048) if max_pending is None else max_pending)
        self.unreachable_flush_s = unreachable_flush_s
        self.pace = pace
        self.pace_catch_up = min(pace, pace_catch_up)
        self._chunk_ns = int(pace_chunk_s * 1e9)
        self._hurry = False  # flushing: no pacing
        self._chunk_at = 0  # the pacing chunk's start while a record is built (perf_counter_ns)
        self.dropped_records = 0
        self.dropped_bytes = 0
        self.errors = 0
        self.delivered = 0
        #: optional ``tap(record_name, value)`` called on the delivery thread with every built
        #: record before encoding (debugging, checks); its exceptions count as errors
        self.tap: Callable[[str, Mapping[str, Any]], None] | None = None
        #: ``submit(..., value=(name, *args))`` builds ``builders[name](*args)`` on the delivery
        #: thread: a tuple of plain values that the garbage collector stops tracking at its
        #: first look, so an item waiting for a drain never ages into the old generation
        self.builders: dict[str, Callable[..., Built]] = {}
        # (topic, key, record, size, value) or, for a tuple value, (topic, key, record, size,
        # name, *args): one flat tuple, which the gc untracks at its first look when its
        # values are plain (no nested tuple it would need a second look for)
        self._queue: deque[tuple[Any, ...]] = deque()
        self._queued_bytes = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._codec = codec or Codec()
        self._drain_interval_s = drain_interval_s
        # submit() wakes the delivery thread early past these marks, so a burst is not dropped
        # for want of a drain
        self._wake_records = max(1, self.max_pending // 2)
        self._wake_bytes = max(1, max_bytes // 2)
        self._pid = os.getpid()
        self._dead = False
        self._last_error_log = 0.0
        #: the broker failed a connection since the last acknowledged record (close is short)
        self.unreachable = False
        conf = {
            **kafka_config,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,  # a drained burst shares one request
            "compression.type": "lz4",
            "queue.buffering.max.messages": max_records,
            "queue.buffering.max.kbytes": max(1, max_bytes // 1024),
            "message.max.bytes": max_message_bytes,
            "message.timeout.ms": message_timeout_ms,
            "socket.connection.setup.timeout.ms": min(10_000, message_timeout_ms),
            "error_cb": self._on_client_error,
            # one callback object for every record: no Python object per queued record
            "on_delivery": self._on_delivery,
            # librdkafka would print every failed reconnect to stderr; errors reach error_cb,
            # which logs them rate-limited instead
            "log_level": 2,
        }
        self._producer = made_at_low_priority(lambda: Producer(conf))
        self._thread = threading.Thread(target=self._run, name="argus-producer", daemon=True)
        self._thread.start()
        _LIVE.add(self)

    # -- training thread ------------------------------------------------------------------
    def submit(self, topic: str, key: bytes, record: str, value: Value, size_bytes: int) -> bool:
        """Queue one record; O(1), never blocks, never raises.

        ``value`` is the record as a mapping, a zero-argument callable that builds it on the
        delivery thread (returning ``None`` skips it; a list sends each record in it), or a
        tuple ``(name, *args)`` built by ``builders[name](*args)`` there (the training
        thread's per-step form: plain values only, not nested, no closure for the gc to
        age).
        ``size_bytes`` is a hint of its encoded size. Returns ``False`` when the record could
        not be queued (closed, forked child); when the hand-over queue is full the *oldest*
        items are evicted and counted so the newest survive.
        """
        if self._dead:  # closed, or a forked child (the at-fork hook)
            return False
        try:
            with self._lock:
                if isinstance(value, tuple):
                    self._queue.append((topic, key, record, size_bytes, *value))
                else:
                    self._queue.append((topic, key, record, size_bytes, value))
                self._queued_bytes += size_bytes
                while len(self._queue) > self.max_pending or (
                    self._queued_bytes > self.max_bytes and len(self._queue) > 1
                ):
                    old = self._queue.popleft()
                    self._queued_bytes -= old[3]
                    self.dropped_records += 1
                    self.dropped_bytes += old[3]
                wake = (
                    len(self._queue) >= self._wake_records or self._queued_bytes >= self._wake_bytes
                )
            if wake:
                self._wake.set()
            return True
        except Exception:
            self.errors += 1
            return False

    @property
    def queue_depth(self) -> int:
        """Records waiting: ours plus librdkafka's not-yet-acknowledged ones."""
        if self._dead:
            return 0
        try:
            return len(self._queue) + len(self._producer)
        except Exception:
            return len(self._queue)

    # -- delivery thread ------------------------------------------------------------------
    def _run(self) -> None:
        # not lowered: it holds the GIL (argus.collectors.priority); librdkafka's threads are
        while not self._stop.is_set():
            self._wake.wait(self._drain_interval_s)
            self._wake.clear()
            self._drain()
            try:
                self._producer.poll(0)
            except Exception:
                self.errors += 1
        self._drain()

    def _drain(self) -> None:
        chunk = time.perf_counter_ns()
        while True:
            with self._lock:
                if not self._queue:
                    return
                topic, key, record, size, value, *args = self._queue.popleft()
                self._queued_bytes -= size
            chunk = self._deliver(topic, key, record, size, value, args, chunk)

    def _pace(self, chunk_ns: int) -> int:
        """Hand the GIL to the training thread once the work since ``chunk_ns``
        (``perf_counter_ns``) reaches ``pace_chunk_s``: sleep ``pace`` times that work (at
        least the OS's shortest sleep, ~60 us); returns the start of the next chunk. A drain
        held the GIL for its whole burst before (~700 records, 25-35 ms at 1.4 ms steps), and
        a training thread that releases it in every torch op waited up to a switch interval
        (5 ms) at each re-acquisition: the burst landed on one step (27-31 ms against an off
        p99 of 2.3-3.9 ms). Now a step waits at most one chunk (or one longer record) per
        acquisition. Not while closing (:meth:`flush` wants the queue empty)."""
        if self.pace <= 0 or self._hurry:
            return chunk_ns
        work = time.perf_counter_ns() - chunk_ns
        if work < self._chunk_ns:
            return chunk_ns
        time.sleep(self.pace_now() * work / 1e9)
        return time.perf_counter_ns()

    def pace_now(self) -> float:
        """The pace of the next sleep: ``pace``, or ``pace_catch_up`` while the hand-over
        queue is more than half full."""
        return self.pace if len(self._queue) < self._wake_records else self.pace_catch_up

    def pace_point(self) -> None:
        """For a builder or thunk doing long work (a kernel window's parse): called between
        its steps on the delivery thread, hands the GIL over as after each record
        (:meth:`_pace`); a no-op on any other thread."""
        if threading.current_thread() is self._thread:
            self._chunk_at = self._pace(self._chunk_at)

    def _deliver(
        self,
        topic: str,
        key: bytes,
        record: str,
        size: int,
        value: Any,
        args: list[Any],
        chunk_ns: int,
    ) -> int:
        """Build, encode and hand one queued item to librdkafka (delivery thread), pacing
        after each record it makes; returns the pacing chunk's start (:meth:`_pace`)."""
        try:
            self._chunk_at = chunk_ns  # a long build paces itself (pace_point)
            if isinstance(value, str):
                built = self.builders[value](*args)
            else:
                built = value() if callable(value) else value
            chunk_ns = self._chunk_at
            if built is None:
                return self._pace(chunk_ns)
            many: Sequence[Mapping[str, Any] | bytes] = (
                built if isinstance(built, list | tuple) else (built,)
            )
        except Exception as exc:
            self._count_failed(record, size, exc)
            return chunk_ns
        for one in many:
            try:
                if isinstance(one, bytes):  # an Avro body (step records): frame it
                    data = self._codec.header(record) + one
                    if self.tap is not None:
                        self.tap(record, self._codec.decode_as(record, data))
                else:
                    if self.tap is not None:
                        self.tap(record, one)
                    data = self._codec.encode(record, one)
            except Exception as exc:
                self._count_failed(record, size // max(len(many), 1), exc)
                continue
            self._produce(topic, key, data)
            chunk_ns = self._pace(chunk_ns)
        return chunk_ns

    def _count_failed(self, record: str, size: int, exc: Exception) -> None:
        self.errors += 1
        self.dropped_records += 1
        self.dropped_bytes += size
        self._log_rate_limited(f"could not build/encode a {record} record: {exc!r}")

    def _produce(self, topic: str, key: bytes, data: bytes) -> None:
        if len(data) + len(key) > self.max_message_bytes:
            self.dropped_records += 1
            self.dropped_bytes += len(data)
            self._log_rate_limited(
                f"a {len(data)}-byte record for {topic} is over max_message_bytes "
                f"{self.max_message_bytes}; dropping"
            )
            return
        try:
            self._producer.produce(topic, data, key)
        except BufferError:
            self.dropped_records += 1
            self.dropped_bytes += len(data)
            self._log_rate_limited("producer buffer full (broker slow or away); dropping")
        except Exception as exc:
            self.errors += 1
            self.dropped_records += 1
            self.dropped_bytes += len(data)
            self._log_rate_limited(f"produce to {topic} failed: {exc!r}")

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            self.delivered += 1
            self.unreachable = False
            return
        # with the broker away, librdkafka times queued records out in batches (hundreds a
        # second, served by one poll): each callback stays O(1) and copies nothing (len(msg)
        # is the value's length; msg.value() would copy it), and the message is formatted
        # only when it is logged
        self.dropped_records += 1
        with contextlib.suppress(Exception):
            self.dropped_bytes += len(msg)
        if not self._dead and time.monotonic() - self._last_error_log >= _LOG_EVERY_S:
            self._log_rate_limited(f"record not delivered: {err}")

    def _on_client_error(self, err: Any) -> None:
        with contextlib.suppress(Exception):
            from confluent_kafka import KafkaError

            if err.code() in (
                KafkaError._ALL_BROKERS_DOWN,
                KafkaError._TRANSPORT,
                KafkaError._RESOLVE,
            ):
                self.unreachable = True
        self._log_rate_limited(f"kafka client: {err}")

    def _log_rate_limited(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_error_log >= _LOG_EVERY_S:
            self._last_error_log = now
            log.warning(
                "argus collectors: %s (dropped so far: %d records)", message, self.dropped_records
            )

    # -- lifecycle --------------------------------------------------------------------------
    def flush(self, timeout_s: float = 5.0) -> int:
        """Wait up to ``timeout_s`` for queued records to be delivered (at most
        ``unreachable_flush_s`` while the broker is known unreachable); returns how many
        remain."""
        if self._dead or self._pid != os.getpid():
            return 0
        t0 = time.monotonic()
        self._hurry = True

        def deadline() -> float:
            return t0 + (
                min(timeout_s, self.unreachable_flush_s) if self.unreachable else timeout_s
            )

        try:
            while self._queue and time.monotonic() < deadline():
                self._wake.set()
                time.sleep(0.01)
            while True:
                left = int(self._producer.flush(min(0.05, max(0.0, deadline() - time.monotonic()))))
                if not left or time.monotonic() >= deadline():
                    return left + len(self._queue)
        except Exception:
            return self.queue_depth
        finally:
            self._hurry = False

    def close(self, timeout_s: float = 5.0) -> None:
        """Flush for at most ``timeout_s`` (``unreachable_flush_s`` while the broker is known
        unreachable), stop the delivery thread; what is left is purged, dropped and
        counted. Safe to call twice."""
        if self._dead or self._pid != os.getpid():
            return
        left = self.flush(timeout_s)
        self._hurry = True  # the last drain is not paced
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=1.0)
        with self._lock:
            queued, self._queue = len(self._queue), deque()
            self.dropped_records += queued
            self._queued_bytes = 0
            self._dead = True
        try:  # what librdkafka still holds comes back through _on_delivery, counted
            self._producer.purge(in_queue=True, in_flight=True, blocking=False)
            self._producer.poll(0)
        except Exception:
            self.errors += 1
        if left:
            log.warning("argus collectors: %d records not delivered at close", left)

    def _forked(self) -> None:
        # In a forked child: forget the parent's state without touching its locks.
        self._dead = True
        self._lock = threading.Lock()
        self._queue = deque()
        self._queued_bytes = 0
