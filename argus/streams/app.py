"""The faust app of the stream workers: one factory, one role per agent family.

``build_app(settings, roles)`` registers only the agents of the chosen roles, so each role
can run alone (``argus worker l2``) and scale by partitions and consumer groups, or all in
one process (``argus worker all``). The consumer group is the app id, ``<prefix>-<roles>``.

Shape of every role (DESIGN.md):

* a **router** agent on an external topic decodes each record (bad ones go to the DLQ with
  the reason), and re-keys it onto an internal topic by the key its state needs (group, job);
* a **window** agent on the internal topic keeps its state in faust tables (changelogs:
  a restarted worker resumes where it was) and calls the pure detectors.

Faust only lets an agent that is processing an event write a table, so grace periods are
driven by *tick* messages that a timer sends to every partition of each internal topic;
the window agent handles a tick like any event, in that partition's context.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import faust
from faust.types import TP

from argus.config import Settings
from argus.schemas import Codec
from argus.streams import fast_delivery, groups, metrics, recovery_seek
from argus.streams.dlq import dlq_record
from argus.streams.durable import CoalescingTable, DurableCommits, install
from argus.streams.groups import ROLES
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.rekey import item_bytes, read_message, rekey_messages
from argus.streams.roles.context import partition_of
from argus.topics import topic_name

__all__ = [
    "ROLES",
    "Ctx",
    "WindowRole",
    "Worker",
    "build_app",
    "partition_of",
    "route_batches",
    "run_polls",
    "window_agent",
]

log = logging.getLogger("argus.streams")

TICK_KEY = b"\x00tick"


@dataclass
class Ctx:
    """What every agent of one app shares: settings, codec, topics, config."""

    app: faust.App
    settings: Settings
    pcfg: PipelineConfig
    codec: Codec
    worker: str
    detectors: Any  # argus.detectors.config.DetectorsConfig
    durable: DurableCommits
    topics: dict[str, faust.TopicT] = field(default_factory=dict)
    internal: dict[str, faust.TopicT] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)  # agents shared by several roles
    sending: dict[int, tuple[str, float]] = field(default_factory=dict)  # task -> (topic, t0)

    def topic(self, suffix: str) -> str:
        return topic_name(suffix, self.settings.topic_prefix)

    def external(self, suffix: str) -> faust.TopicT:
        """A topic of the wire contract (raw bytes; created by ``argus topics create``)."""
        if suffix not in self.topics:
            self.topics[suffix] = self.app.topic(
                self.topic(suffix), key_serializer="raw", value_serializer="raw"
            )
        return self.topics[suffix]

    def internal_topic(self, name: str) -> faust.TopicT:
        """A re-key topic owned by the pipeline (``<prefix>.internal.<name>``), one per name."""
        if name in self.internal:
            return self.internal[name]
        t = self.app.topic(
            self.topic(f"internal.{name}"),
            key_serializer="raw",
            value_serializer="raw",
            partitions=self.pcfg.internal_partitions,
            replicas=self.pcfg.replication,
            retention=self.pcfg.internal_retention_s,  # if faust creates it (worker_topics)
            internal=True,
        )
        self.internal[name] = t
        return t

    def table(self, name: str) -> Any:
        """A table keyed by str with JSON values (app defaults), co-partitioned with the
        internal topics; its changelog is written at commit time (:mod:`.durable`)."""
        t = CoalescingTable(
            self.app,
            name=name,
            default=None,
            beacon=self.app.tables.beacon,
            partitions=self.pcfg.internal_partitions,
            key_type=str,
        )
        self.app.tables.add(t)
        self.durable.tables.append(t)
        return t

    async def send(self, topic: faust.TopicT, key: bytes | None, value: bytes, **kw: Any) -> None:
        """Send a record while processing an event; the event's offset is committed only
        once the record is acknowledged (:class:`.durable.DurableCommits`).

        While the producer has not taken it (its batch for the partition full), the send is
        listed in ``sending``, which :func:`watch_sends` reports when it takes too long."""
        task = id(asyncio.current_task())
        self.sending[task] = (topic.get_topic_name(), time.monotonic())
        try:
            self.durable.track(await topic.send(key=key, value=value, **kw))
        finally:
            del self.sending[task]

    async def send_keyed(self, topic: faust.TopicT, key: str, value: Any) -> None:
        """Send a JSON value to an internal topic on the key's stable partition."""
        await self.send(
            topic,
            key.encode(),
            json.dumps(value, separators=(",", ":")).encode(),
            partition=partition_of(key, self.pcfg.internal_partitions),
        )

    async def emit(
        self, suffix: str, key: str, record_name: str, value: dict[str, Any], role: str
    ) -> None:
        """Encode a wire record and send it to an external topic."""
        await self.send(self.external(suffix), key.encode(), self.codec.encode(record_name, value))
        metrics.RECORDS_OUT.labels(role, suffix).inc()

    async def late(self, role: str, reason: str) -> None:
        """A role's late item goes to the DLQ with the reason, as an internal message of
        its own (``{"items": [item], "t": ...}``; the source offset points at the message
        that carried it) (:class:`argus.streams.roles.context.RoleContext`)."""
        event = faust.current_event()
        if event is not None:
            await self.dlq(event, LateRecord(reason), role, reason="late", value=_item_value())

    async def dlq(
        self,
        event: faust.EventT,
        exc: BaseException,
        role: str,
        reason: str | None = None,
        value: bytes | None = None,
    ) -> None:
        """Send the event's original bytes (or ``value``: the one item of an internal
        message that failed, :func:`window_agent`) and the reason to ``argus.dlq``."""
        msg = event.message
        if value is None:
            value = msg.value if isinstance(msg.value, bytes) else b""
        why, rec = dlq_record(
            topic=msg.topic,
            partition=msg.partition,
            offset=msg.offset,
            key=msg.key,
            value=value,
            exc=exc,
            worker=self.worker,
            max_value_bytes=self.pcfg.dlq_max_value_bytes,
            reason=reason,
        )
        await self.send(self.external("dlq"), rec["key"], self.codec.encode("dlq_record", rec))
        metrics.DLQ.labels(role, why).inc()
        log.warning(
            "%s[%s]@%s -> dlq: %s", msg.topic, msg.partition, msg.offset, rec["reason"][:300]
        )


class LateRecord(Exception):
    """A record that came after its window closed (allowed lateness exceeded)."""

    reason = "late"


_ITEM: contextvars.ContextVar[tuple[Any, float] | None] = contextvars.ContextVar(
    "argus_window_item", default=None
)
"""The item a window agent is folding and its message's time (:func:`window_agent`)."""

_EVENT: contextvars.ContextVar[faust.EventT | None] = contextvars.ContextVar(
    "argus_window_event", default=None
)


def current_event() -> faust.EventT | None:
    """The input event a window agent is handling (its role's ``add`` runs inside it), or
    None outside one: a role that keeps an item in memory holds its offset."""
    return _EVENT.get()


def _item_value() -> bytes | None:
    """The DLQ value of the item being folded: an internal message holding it alone."""
    cur = _ITEM.get()
    if cur is None:
        return None
    item, now = cur
    return rekey_messages([(None, item_bytes(item))], now)[0][1]


def is_tick(event: faust.EventT) -> bool:
    return event.message.key == TICK_KEY


def add_ticker(ctx: Ctx, topic: faust.TopicT, interval_s: float = 1.0) -> None:
    """Every ``interval_s``, send a tick to each partition of ``topic`` assigned here."""
    name = topic.get_topic_name()

    @ctx.app.timer(interval=interval_s, name=f"tick-{name}")
    async def _tick() -> None:
        parts = {tp.partition for tp in ctx.app.assignor.assigned_actives() if tp.topic == name}
        now = json.dumps({"now": time.time()}).encode()
        log.debug("tick %s -> partitions %s", name, sorted(parts))
        for p in sorted(parts):
            await topic.send(key=TICK_KEY, value=now, partition=p)


def stall_warnings(
    sending: Iterable[tuple[str, float]],
    held: Iterable[tuple[str, int]],
    held_since: dict[tuple[str, int], float],
    now: float,
    warn_after_s: float,
) -> list[str]:
    """Warnings for what silently stops an agent (pure; times in s, monotonic clock).

    ``sending``: (topic, start) of each send the producer has not taken yet; ``held``:
    (topic, partition) the consumer is not fetching now; ``held_since`` (updated in place)
    remembers since when each was held. Either one at least ``warn_after_s`` old warns.
    """
    out = [
        f"send to {topic} blocked for {now - t0:.0f} s: the producer has not taken the record"
        for topic, t0 in sending
        if now - t0 >= warn_after_s
    ]
    now_held = set(held)
    for tp in [tp for tp in held_since if tp not in now_held]:
        del held_since[tp]
    for topic, part in sorted(now_held):
        t0 = held_since.setdefault((topic, part), now)
        if now - t0 >= warn_after_s:
            out.append(
                f"partition {topic}[{part}] not fetched for {now - t0:.0f} s (paused or buffer-full)"
            )
    return out


def uncommitted_warnings(
    inputs: Iterable[tuple[tuple[str, int], int | None, int | None]],
    since: dict[tuple[str, int], tuple[int, float]],
    now: float,
    warn_after_s: float,
) -> list[str]:
    """Warnings for input partitions whose records were fetched but are not being processed
    (pure; times in s, monotonic clock).

    ``inputs``: ((topic, partition), fetch position, committed offset) of each assigned
    input partition; ``since`` (updated in place) remembers since when each partition's
    committed offset has stood still behind its position. One that stood still at least
    ``warn_after_s`` warns: the agent took none of those records (or is stuck on one), so
    nothing past them will be committed — the silent loss :mod:`.recovery_seek` prevents.
    """
    out: list[str] = []
    behind = set()
    for tp, pos, committed in inputs:
        if pos is None or committed is None or pos <= committed:
            continue
        behind.add(tp)
        c0, t0 = since.get(tp, (committed, now))
        if c0 != committed:  # committing: moving on
            c0, t0 = committed, now
        since[tp] = (c0, t0)
        if now - t0 >= warn_after_s:
            out.append(
                f"partition {tp[0]}[{tp[1]}] fetched to {pos} but committed at {committed} "
                f"for {now - t0:.0f} s: {pos - committed} records fetched and not processed"
            )
    for tp in [tp for tp in since if tp not in behind]:
        del since[tp]
    return out


def watch_sends(ctx: Ctx, *, warn_after_s: float = 10.0) -> None:
    """Log :func:`stall_warnings` each ``warn_after_s``: sends the producer has not taken,
    and assigned input partitions (table changelogs are paused by design) the consumer has
    not fetched from (paused, or held back by faust's buffer flow control); and
    :func:`uncommitted_warnings` for input partitions fetched but not committed for
    3 x ``warn_after_s`` (not those whose commit stands at an offset a role holds: the L3
    cells' open blocks, a compressor's split window)."""
    held_since: dict[tuple[str, int], float] = {}
    behind_since: dict[tuple[str, int], tuple[int, float]] = {}

    @ctx.app.timer(interval=warn_after_s, name="watch-sends")
    async def _watch() -> None:
        cons = ctx.app.consumer
        held_by_role = getattr(cons, "_argus_held", None)  # argus.streams.held.install
        held: set[tuple[str, int]] = set()
        inputs: list[tuple[tuple[str, int], int | None, int | None]] = []
        if not (ctx.app.rebalancing or getattr(ctx.app, "in_recovery", False)):
            for tp in set(getattr(cons, "_buffered_partitions", ())) | set(
                getattr(cons, "_paused_partitions", ())
            ):
                if tp.topic not in ctx.app.tables.changelog_topics:
                    held.add((tp.topic, tp.partition))
            for tp in assigned_partitions(ctx.app):  # a table-less app has no actives
                if tp.topic in ctx.app.tables.changelog_topics:
                    continue
                try:
                    pos = await cons.position(tp)
                except Exception:  # partition moving during a rebalance
                    continue
                committed = getattr(cons, "_committed_offset", {}).get(tp)  # faust's last commit
                low = held_by_role.lowest(tp) if held_by_role is not None else None
                if low is not None and committed is not None and committed >= low:
                    continue  # standing at an offset held on purpose (argus.streams.held)
                inputs.append(((tp.topic, tp.partition), pos, committed))
        now = time.monotonic()
        for msg in stall_warnings(
            list(ctx.sending.values()), held, held_since, now, warn_after_s
        ) + uncommitted_warnings(inputs, behind_since, now, 3 * warn_after_s):
            log.warning("%s", msg)


def assigned_partitions(app: faust.App, names: set[str] | None = None) -> list[TP]:
    """The partitions (TPs) of the topics ``names`` (None: of every topic) the worker's
    consumer holds now, sorted.

    The consumer's own assignment, not ``app.assignor.assigned_actives()``: faust 0.15 gives
    an app without changelog tables or standby replicas (a compressor-only worker) aiokafka's
    round-robin assignor, so faust's assignor never hears of the partitions (no actives)."""
    try:
        held = app.consumer.assignment()
    except Exception:  # no consumer yet, or partitions moving during a rebalance
        return []
    return sorted(tp for tp in held if names is None or tp.topic in names)


def add_lag_gauge(ctx: Ctx, role: str, topics: Iterable[str], interval_s: float = 5.0) -> None:
    """Publish consumer lag per assigned partition: records not taken yet by the role
    (:func:`argus.streams.metrics.lag_records`: those faust fetched into its stream buffer
    count too) and seconds (:func:`argus.streams.metrics.lag_seconds`); ``topic`` labels
    unprefixed."""
    names = set(topics)
    prefix = ctx.settings.topic_prefix
    caught_up: dict[tuple[str, int], float] = {}  # last time seen with nothing waiting (s)

    async def _forget(_app: Any, *args: Any, **_kw: Any) -> None:
        revoked: Iterable[Any] = args[0] if args else ()  # the signal's set of TPs
        metrics.forget_offsets((tp.topic, tp.partition) for tp in revoked if tp.topic in names)

    ctx.app.on_partitions_revoked.connect(cast(Any, _forget))  # mode's handler type: any call

    @ctx.app.timer(interval=interval_s, name=f"lag-{role}")
    async def _lag() -> None:
        consumer = ctx.app.consumer
        mine = assigned_partitions(ctx.app, names)
        try:  # asked of the broker: the fetcher's own high watermark stands still while
            # faust's buffer for the partition is full (fetching paused), reading as no lag
            ends = await consumer.highwaters(*mine) if mine else {}
        except Exception:  # partitions moving during a rebalance
            return
        for tp in mine:
            try:
                hw = ends.get(tp)
                pos = await consumer.position(tp)
            except Exception:  # partition moving during a rebalance
                continue
            if hw is not None and pos is not None:
                metrics.note_lag(
                    role,
                    tp.topic,
                    tp.partition,
                    prefix,
                    high=hw,
                    position=pos,
                    caught_up=caught_up,
                    now_s=time.time(),
                )


def note_consumed(event: Any) -> None:
    """Note a consumed event's Kafka timestamp for the lag in seconds."""
    msg = getattr(event, "message", None)
    if msg is not None:
        ts, offset = getattr(msg, "timestamp", None), getattr(msg, "offset", None)
        metrics.consumed(msg.tp.topic, msg.tp.partition, ts, offset)


Registrar = Callable[[Ctx], None]


_REGISTRARS: dict[str, str] = {
    "compressor": "argus.streams.agents.kernels:register_compressor",
    "l1": "argus.streams.agents.steps:register_l1",
    "l2": "argus.streams.agents.steps:register_l2",
    "l3": "argus.streams.agents.kernels:register_l3",
    "funnel": "argus.streams.agents.funnel:register",
    "stacks": "argus.streams.agents.stacks:register",
}


def _registrar(role: str) -> Registrar:
    import importlib

    mod, _, attr = _REGISTRARS[role].partition(":")
    fn: Registrar = getattr(importlib.import_module(mod), attr)
    return fn


def build_app(
    settings: Settings,
    roles: Iterable[str],
    *,
    pcfg: PipelineConfig | None = None,
    app_id: str | None = None,
    instance_id: str | None = None,
) -> tuple[faust.App, Ctx]:
    """A faust app running the agents of ``roles`` (see :data:`ROLES`).

    ``instance_id``: the consumer's ``group.instance.id`` (static membership, so a restarted
    worker gets its partitions back at once): ``"auto"``, an explicit id, or None/``"off"``
    for dynamic membership (:func:`argus.streams.static_membership.resolve`).
    """
    from argus.detectors.config import DetectorsConfig
    from argus.malloc import no_numpy_hugepages
    from argus.streams import static_membership

    no_numpy_hugepages()  # a worker's large arrays in 4 KB pages (argus.malloc)
    roles = sorted(set(roles))
    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        raise ValueError(f"unknown role(s) {bad}; choose from {', '.join(ROLES)}")
    pcfg = pcfg or PipelineConfig.from_mapping(settings.section("streams"))
    detectors = DetectorsConfig.from_settings(settings.section("detectors"))
    app_id = app_id or groups.app_id(settings.topic_prefix, roles)
    brokers = ";".join(f"kafka://{h.strip()}" for h in settings.bootstrap_servers.split(","))
    member = static_membership.resolve(instance_id, app_id, settings.state_dir)
    log.info("consumer group %s: group.instance.id %s", app_id, member or "(dynamic)")
    app = faust.App(
        app_id,
        broker=brokers,
        store="memory://",
        datadir=str(settings.state_dir / "workers" / app_id),  # not ./<app id>-data
        web_enabled=False,
        topic_replication_factor=pcfg.replication,
        topic_partitions=pcfg.internal_partitions,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        broker_commit_interval=1.0,
        producer_linger=pcfg.producer_linger_s,
        producer_max_batch_size=pcfg.producer_batch_bytes,
        consumer_max_fetch_size=pcfg.fetch_bytes,
        table_standby_replicas=0,
        stream_wait_empty=False,
        autodiscover=False,
        key_serializer="json",  # tables: str keys and JSON values survive changelog recovery
        value_serializer="json",
        consumer_group_instance_id=member,  # None: dynamic membership
        **settings.security.faust_app_kwargs(),  # TLS/SASL from argus.kafka.security
    )
    ctx = Ctx(
        app=app,
        settings=settings,
        pcfg=pcfg,
        codec=Codec(registry_url=settings.schema_registry_url or None),
        worker=app_id,
        detectors=detectors,
        durable=install(app),
    )
    _idempotent_producer(app)
    recovery_seek.install(app)  # a faust 0.15 race that drops input after recovery
    fast_delivery.install(app)  # no four tasks a record in faust's fetch loop
    static_membership.install(app)  # a static member still leaves its group on a clean stop
    watch_sends(ctx)
    for role in roles:
        _registrar(role)(ctx)
    return app, ctx


class Worker(faust.Worker):
    """faust's worker, the heap frozen once it has started (tables recovered).

    CPython's cyclic collector walks every tracked object of a generation when it collects
    it, and the oldest generation holds everything alive since start-up (modules, faust,
    the recovered tables): a full collection every few hundred thousand allocations was
    ~25-30 µs a step record in the steps bench (BENCHMARKS.md, issue 21). ``gc.freeze()``
    moves what is alive then out of the collector's reach (reference counting still frees
    it); what the worker allocates afterwards is collected as before.
    """

    async def on_startup_finished(self) -> None:
        await super().on_startup_finished()
        freeze_heap()

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        """No terminal spinner. faust's sets the root logger to DEBUG and adds a handler that
        turns the spinner on every record: every ``log.debug`` of faust and aiokafka then built
        a ``LogRecord`` (three or four a step record, ~5 % of a steps worker's CPU at 2,048
        ranks, py-spy). A worker is a service; the root keeps ``--loglevel``."""
        self.spinner = None


GC_THRESHOLDS = (700, 10, 100)
"""The cyclic collector's thresholds once the heap is frozen (:func:`freeze_heap`):
CPython's, but a full collection after 100 collections of the middle generation, not 10.
A full collection walks all the worker holds (at 10,240 ranks a steps worker's open cells,
~50 ms each); the young generations are collected as often as before (issue 21: the steps
job tier at 10,240 ranks 74 -> 62 ms/step, BENCHMARKS.md)."""


def freeze_heap() -> int:
    """Collect the garbage there is, then freeze what is alive (:class:`Worker`) and set
    :data:`GC_THRESHOLDS`; returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    n = gc.get_freeze_count()
    log.info("heap frozen after start-up: %d objects out of the cyclic collector's walks", n)
    return n


def _idempotent_producer(app: faust.App) -> None:
    """The worker's producer is idempotent (``acks=all``, ``enable_idempotence``), as the
    collectors' is: a retried send after a broker failover or a lost acknowledgement is not
    written twice. faust turns idempotence on only inside transactions
    (``Producer._settings_extra``), so this instance adds it; the threaded producer takes
    its settings from the same instance."""
    prod: Any = app.producer  # the aiokafka driver's Producer
    base = prod._settings_extra

    def extra() -> Mapping[str, Any]:
        return {**base(), "acks": "all", "enable_idempotence": True}

    prod._settings_extra = extra


async def guarded(
    ctx: Ctx, event: faust.EventT, role: str, fn: Callable[[], Awaitable[None]]
) -> None:
    """Run one event's handler; any exception sends the event to the DLQ instead of
    killing the agent (faust would ack the event and lose it)."""
    try:
        await fn()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("%s: handler failed", role)
        await ctx.dlq(event, exc, role, reason="handler-error")


# -- routers and window agents ---------------------------------------------------------------
# faust's ``take()``/``take_events()`` batching stalled low-volume agents when many agents
# share one worker (faust-streaming 0.15.3; see robinhood/faust#262, faust-streaming#175), so
# the routers below never wait for more input: a poll is what is already queued.

Route = Callable[[faust.EventT], Awaitable[list[tuple[str, Any]] | None]]

ROUTE_POLL_MAX = 512
"""Events a router takes into one poll at most (those already queued for it)."""
_ROUTE_YIELDS = 4
"""Turns of the event loop (no time) a poll gives the consumer to hand over more events."""


async def send_rekeyed(
    ctx: Ctx,
    dst: faust.TopicT,
    by_key: Mapping[str, list[tuple[faust.EventT, tuple[bytes, bytes | None]]]],
    role: str,
) -> None:
    """Send a poll's routed items to the internal topic ``dst``, each key's as few messages
    as :func:`rekey_messages` cuts, on the key's stable partition. ``by_key``: key ->
    ``[(event, item_bytes(item))]`` in the order consumed. A message the producer refuses
    (too large) sends its events to the DLQ, each once."""
    sent = time.time()
    failed: set[int] = set()
    for key, items in by_key.items():
        for owners, value in rekey_messages(items, sent):
            try:
                await ctx.send(
                    dst,
                    key.encode(),
                    value,
                    partition=partition_of(key, ctx.pcfg.internal_partitions),
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # too large to re-key: its events to the DLQ
                for ev in owners:
                    if id(ev) not in failed:
                        failed.add(id(ev))
                        await ctx.dlq(ev, exc, role)


def route_batches(
    ctx: Ctx, src: faust.TopicT, dst: faust.TopicT, *, name: str, role: str, route: Route
) -> None:
    """A stateless router: decode and re-key each event onto ``dst``, a poll at a time.

    ``route(event)`` returns ``[(key, item), ...]``; a decoding or validation error sends
    the event to the DLQ. A poll is the events already queued (up to
    :data:`ROUTE_POLL_MAX`); its items with the same key travel as one message
    ``{"items": [item, ...], "t": send time}`` (:func:`rekey_messages`), in the order
    consumed, so the re-key hop and the window agent pay per key and poll, not per record
    (at 1,024 ranks a poll of 256 step records becomes 4 messages). The poll's events are
    acknowledged once its messages are sent (their offsets commit once those are durable).
    """
    suffix = src.get_topic_name().removeprefix(ctx.settings.topic_prefix + ".")
    records_in = metrics.RECORDS_IN.labels(role, suffix)  # the child, not a lookup per event
    poll_size = metrics.ROUTER_POLL.labels(role)

    async def poll(events: list[faust.EventT]) -> None:
        poll_size.observe(len(events))
        by_key: dict[str, list[tuple[Any, tuple[bytes, bytes | None]]]] = {}
        for event in events:
            records_in.inc()
            note_consumed(event)
            try:
                routed = await route(event)
                mine = [(k, item_bytes(item)) for k, item in routed or ()]
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # undecodable or invalid
                await ctx.dlq(event, exc, role)
                continue
            for key, data in mine:
                by_key.setdefault(key, []).append((event, data))
        await send_rekeyed(ctx, dst, by_key, role)

    @ctx.app.agent(src, name=name)
    async def _router(stream: faust.StreamT) -> None:
        # a few turns of the loop, no time: faust's consumer hands a fetched batch over one
        # message at a time (a task pair each, wait_first), so a poll that took only what
        # was queued was ~1.4 events at 2,048 ranks
        await run_polls(stream, poll, max_events=ROUTE_POLL_MAX, yields=_ROUTE_YIELDS)


async def run_polls(
    stream: faust.StreamT,
    handle: Callable[[list[faust.EventT]], Awaitable[None]],
    *,
    max_events: int,
    yields: int = 0,
) -> None:
    """Feed ``stream``'s events to ``handle`` a poll at a time, then acknowledge them.

    A poll is the events already queued for the agent (up to ``max_events``), after at most
    ``yields`` turns of the event loop (no time) while the queue is empty: nothing waits for
    input that has not arrived (faust's ``take()`` stalled low-volume agents). faust's
    auto-ack is off: a poll's events are acknowledged once ``handle`` returned, so an offset
    never commits before its event was handled."""
    stream.enable_acks = False
    queue = getattr(stream.channel, "queue", None)
    pending: list[faust.EventT] = []
    async for event in stream.events():
        pending.append(event)
        if len(pending) < max_events and queue is not None:
            for _ in range(yields):
                if not queue.empty():
                    break
                await asyncio.sleep(0)
            if not queue.empty():
                continue
        taken, pending = pending, []
        try:
            await handle(taken)
        finally:
            for ev in taken:
                await stream.ack(ev)


class WindowRole(Protocol):
    """What a window agent does with its state (one JSON-able dict per key: the role's
    ``TypedDict``, :mod:`argus.streams.roles.state`)."""

    def new(self, key: str) -> Any: ...

    async def add(self, key: str, st: Any, item: Any, now: float) -> None:
        """Fold one routed item into the key's state."""

    async def tick(self, key: str, st: Any, now: float) -> bool:
        """Periodic work (grace periods); True when ``st`` changed."""


def window_agent(
    ctx: Ctx, topic: faust.TopicT, *, name: str, role: str, impl: WindowRole, tick_s: float = 1.0
) -> Any:
    """A stateful agent over a re-key topic: one table entry per key (changelogged).

    Returns the faust table. An exception in ``impl.add`` sends that item alone to the DLQ
    (a message ``{"items": [item], "t": ...}``) and the message's other items are folded as
    usual (the state keeps what the failed item had changed before it raised: one item's
    worth, where it was one message's before routers sent polls); an exception in
    ``impl.tick`` sends the message's bytes and leaves the key's state unwritten.

    Time: ``now`` is the *send* time of the message (routers stamp ``"t"``; ticks carry
    theirs), not the time it is processed. A tick is processed after everything sent to its
    partition before it, so grace periods measured this way do not expire just because
    this agent is behind (a lagging consumer would otherwise see every key go quiet).
    """
    state = ctx.table(f"{name}-state")
    parts = ctx.pcfg.internal_partitions

    async def _handle(ev: faust.EventT) -> None:
        msg = read_message(ev.message.value or b"{}")
        now = float(msg.get("t") or msg.get("now") or time.time())
        if is_tick(ev):
            part = ev.message.partition
            for key in list(state.keys()):
                if partition_of(key, parts) == part:
                    st = state[key]
                    if await impl.tick(key, st, now):
                        state[key] = st
                    await _after_write(key, st)
            return
        key = (ev.message.key or b"").decode()
        st = state.get(key) or impl.new(key)
        for item in msg["items"]:
            # one item that fails (or comes late) goes to the DLQ alone: a message carries
            # items of many records (route_batches)
            token = _ITEM.set((item, now))
            try:
                await impl.add(key, st, item, now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("%s: window agent failed on an item", role)
                await ctx.dlq(ev, exc, role, reason="handler-error", value=_item_value())
            finally:
                _ITEM.reset(token)
        # a window this input made closable closes now, not at the next tick (as the
        # in-memory driver does; the roles' processing-time bounds see the message's time)
        await impl.tick(key, st, now)
        state[key] = st
        await _after_write(key, st)

    async def _after_write(key: str, st: dict[str, Any]) -> None:
        # output that must follow the state durably (the funnel's alert outbox): the impl
        # sends it once the state holding it was written; True when it changed ``st`` again
        hook = getattr(impl, "after_write", None)
        if hook is not None and await hook(key, st):
            state[key] = st
            await ctx.durable.flush()  # at once: a crash now would send the outbox again

    @ctx.app.agent(topic, name=name)
    async def _windows(stream: faust.StreamT) -> None:
        async for ev in stream.events():
            note_consumed(ev)
            token = _EVENT.set(ev)
            try:
                await _handle(ev)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("%s: window agent failed on an event", role)
                await ctx.dlq(ev, exc, role, reason="handler-error")
            finally:
                _EVENT.reset(token)

    add_ticker(ctx, topic, tick_s)
    return state
