"""``argus worker pagerduty``: deliver ``argus.alerts`` to PagerDuty Events API v2.

The thin shell around :mod:`argus.sinks.pagerduty.events`:

* consumes the alerts topic with a confluent-kafka consumer (auto-commit off);
* decodes each value as an ``alert`` record, builds the v2 body (trigger / resolve with the
  alert's dedup key), waits for the per-routing-key rate limit (~120 events/min), POSTs it;
* commits the offset only after PagerDuty accepted it (2xx) or after the record went to the
  DLQ (400/413/422, undecodable or invalid alerts), so a restart loses nothing: Kafka is the
  retry queue and nothing lives only in memory;
* retries 429, 5xx and network errors with exponential backoff, pausing its partitions while
  it waits so it stays in the consumer group;
* reads the routing key from ``ARGUS_PAGERDUTY_ROUTING_KEY`` or the file named by
  ``ARGUS_PAGERDUTY_ROUTING_KEY_FILE`` and never logs it.

Settings: ``[pagerduty]`` in argus.toml, or ``ARGUS_PAGERDUTY__<KEY>``, validated when the
settings load; each key, its meaning and default in :mod:`argus.sinks.pagerduty.config`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from argus.config import ConfigError, Settings, build_config
from argus.errors import DecodeError
from argus.kafka.security import Secret
from argus.schemas.codec import Codec
from argus.sinks.pagerduty.config import PagerDutySettings
from argus.sinks.pagerduty.events import (
    PAGERDUTY_SEVERITIES,
    Disposition,
    PagerDutyEventError,
    RateLimiter,
    RetryPolicy,
    build_event,
    encode_event,
    parse_retry_after,
    redact,
)
from argus.sinks.topology import TopologyReader
from argus.topics import topic_name

__all__ = [
    "HttpResult",
    "PagerDutyConfig",
    "PagerDutyStats",
    "RoutingKey",
    "post_json",
    "run_pagerduty_sink",
]

log = logging.getLogger("argus.sinks.pagerduty")

ROUTING_KEY_ENV = "ARGUS_PAGERDUTY_ROUTING_KEY"
ROUTING_KEY_FILE_ENV = "ARGUS_PAGERDUTY_ROUTING_KEY_FILE"
WORKER_NAME = "pagerduty"


class RoutingKey(Secret):
    """The PagerDuty integration key: a :class:`~argus.kafka.security.Secret`, so it prints
    masked and cannot reach a log by accident; :meth:`reveal` gives it, for the request body
    only."""

    __slots__ = ()


def _read_routing_key(sec: PagerDutySettings, env: Mapping[str, str]) -> RoutingKey:
    value = env.get(ROUTING_KEY_ENV, "").strip() or (
        sec.routing_key.reveal().strip() if sec.routing_key else ""
    )
    if value:
        return RoutingKey(value)
    path = env.get(ROUTING_KEY_FILE_ENV) or sec.routing_key_file
    if path:
        p = Path(str(path))
        try:
            value = p.read_text().strip()
        except OSError as exc:
            raise ConfigError(
                f"PagerDuty routing key file {p} cannot be read: {exc.strerror}"
            ) from None
        if not value:
            raise ConfigError(f"PagerDuty routing key file {p} is empty")
        return RoutingKey(value)
    raise ConfigError(
        f"no PagerDuty routing key: set {ROUTING_KEY_ENV} or {ROUTING_KEY_FILE_ENV} "
        "(or pagerduty.routing_key_file)"
    )


@dataclass(frozen=True, kw_only=True)
class PagerDutyConfig:
    """What the running sink needs: the validated ``[pagerduty]`` section and what the sink
    resolves from it; build with :meth:`from_settings`.

    Attributes
    ----------
    routing_key : RoutingKey
        Read from the environment or the key file (:data:`ROUTING_KEY_ENV`); never empty.
    section : PagerDutySettings
        The ``[pagerduty]`` table, checked when it was built (the one definition of its keys,
        defaults and ranges).
    group_id : str
        The consumer group: ``section.group_id``, else ``<topic prefix>.pagerduty``.
    """

    routing_key: RoutingKey
    section: PagerDutySettings = field(default_factory=PagerDutySettings)
    group_id: str = "argus.pagerduty"

    def __post_init__(self) -> None:
        if not self.routing_key.reveal():
            raise ConfigError("the PagerDuty routing key is empty")

    @classmethod
    def from_settings(
        cls, settings: Settings, env: Mapping[str, str] | None = None, **overrides: Any
    ) -> PagerDutyConfig:
        """Read ``[pagerduty]`` and the routing-key environment; ``overrides`` (keys of
        :class:`PagerDutySettings`, or ``routing_key``) win and are checked as the section is.

        Raises
        ------
        ConfigError
            No routing key, an unreadable key file, a non-numeric value, an unknown
            severity, or an events URL that is not http(s).
        """
        env = os.environ if env is None else env
        sec = build_config(
            PagerDutySettings,
            settings.section("pagerduty"),
            section="pagerduty",
            origins=settings.origins,
        )
        key = overrides.pop("routing_key", None)  # an empty RoutingKey is kept (and refused)
        if overrides:
            sec = dataclasses.replace(sec, **overrides)
        return cls(
            routing_key=key if key not in (None, "") else _read_routing_key(sec, env),
            section=sec,
            group_id=sec.group_id or f"{settings.topic_prefix}.pagerduty",
        )


@dataclass
class PagerDutyStats:
    """Counters of one sink run (also exported to Prometheus when a registry is given)."""

    consumed: int = 0
    accepted: int = 0
    triggers: int = 0
    resolves: int = 0
    filtered: int = 0
    dead_lettered: int = 0
    retries: int = 0
    rate_limited_429: int = 0
    server_errors: int = 0
    network_errors: int = 0
    rate_limit_wait_s: float = 0.0
    abandoned: int = 0  # in flight when stopped or revoked; not committed, redelivered later


@dataclass(frozen=True)
class HttpResult:
    """One POST's outcome. ``status`` is None when no response came (timeout, refused)."""

    status: int | None
    body: str
    retry_after_s: float | None = None
    error: str = ""


PostFn = Callable[[str, bytes, float], HttpResult]


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in s from now (seconds or an HTTP-date), None without one."""
    return parse_retry_after(value, time.time())


def post_json(url: str, body: bytes, timeout_s: float) -> HttpResult:
    """POST a JSON body with urllib; never raises for HTTP or network errors."""
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "argus-trace",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return HttpResult(resp.status, resp.read(65536).decode("utf-8", "replace"))
    except urllib.error.HTTPError as exc:
        text = exc.read(65536).decode("utf-8", "replace") if exc.fp is not None else ""
        return HttpResult(exc.code, text, _retry_after(exc.headers.get("Retry-After")))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return HttpResult(None, "", None, f"{type(exc).__name__}: {reason}")


class _Sink:
    """State of one running sink; see :func:`run_pagerduty_sink`."""

    def __init__(
        self,
        settings: Settings,
        cfg: PagerDutyConfig,
        *,
        stop: threading.Event,
        post: PostFn,
        stats: PagerDutyStats,
        metrics: _Metrics | None,
        clock: Callable[[], float],
    ) -> None:
        self.cfg = cfg
        self.sec = sec = cfg.section
        self.retry = sec.retry_policy()
        self.stop = stop
        self.post = post
        self.stats = stats
        self.metrics = metrics
        self.clock = clock
        self.codec = Codec(registry_url=settings.schema_registry_url or None)
        self.topic = topic_name("alerts", settings.topic_prefix)
        self.dlq_topic = topic_name("dlq", settings.topic_prefix)
        self.limiter = RateLimiter(sec.rate_limit_events, sec.rate_limit_window_s)
        self.revoked: set[tuple[str, int]] = set()
        self.key = cfg.routing_key.reveal()
        self.min_rank = PAGERDUTY_SEVERITIES.index(sec.min_severity)
        self.consumer = Consumer(
            settings.kafka_config(
                **{
                    "group.id": cfg.group_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest",
                    "client.id": f"argus-{WORKER_NAME}",
                }
            )
        )
        self.producer = Producer(
            settings.kafka_config(**{"acks": "all", "client.id": f"argus-{WORKER_NAME}-dlq"})
        )
        # the ranks' hosts, from the collectors' job topology (argus.jobs)
        self.topology = TopologyReader(settings, self.codec) if sec.hosts_from_topology else None

    # -- Kafka --------------------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        for p in parts:
            self.revoked.discard((p.topic, p.partition))
        log.info("assigned %s", ", ".join(f"{p.topic}[{p.partition}]" for p in parts))

    def _on_revoke(self, consumer: Consumer, parts: list[TopicPartition]) -> None:
        self.revoked.update((p.topic, p.partition) for p in parts)

    def run(self, max_messages: int | None) -> None:
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        log.info(
            "pagerduty sink: %s -> %s (group %s, %d events / %g s per key)",
            self.topic,
            self.sec.events_url,
            self.cfg.group_id,
            self.sec.rate_limit_events,
            self.sec.rate_limit_window_s,
        )
        done = 0
        try:
            while not self.stop.is_set():
                if max_messages is not None and done >= max_messages:
                    break
                msg = self.consumer.poll(self.sec.poll_timeout_s)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise RuntimeError(f"fatal consumer error: {err}")
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("consumer error: %s", err)
                    continue
                self.stats.consumed += 1
                if self.handle(msg):
                    self._commit(msg)
                    done += 1
                else:
                    self.stats.abandoned += 1
        finally:
            self.consumer.close()
            if self.topology is not None:
                self.topology.close()
            self.producer.flush(10.0)

    def _commit(self, msg: Message) -> None:
        try:
            self.consumer.commit(message=msg, asynchronous=False)
        except Exception as exc:  # a rebalance in between; PagerDuty dedups the redelivery
            log.warning(
                "commit of %s failed (will be redelivered; dedup_key makes it idempotent): %s",
                _where(msg),
                exc,
            )

    def wait(self, delay_s: float, msg: Message) -> bool:
        """Sleep ``delay_s`` with the assignment paused, serving the group; False: give up."""
        if delay_s <= 0:
            return not self.stop.is_set()
        where = (msg.topic(), msg.partition())
        assignment = self.consumer.assignment()
        if assignment:
            self.consumer.pause(assignment)
        deadline = self.clock() + delay_s
        try:
            while True:
                if self.stop.is_set() or where in self.revoked:
                    return False
                remaining = deadline - self.clock()
                if remaining <= 0:
                    return True
                got = self.consumer.poll(min(remaining, 0.25))
                if got is not None and got.error() is None:
                    # fetched before the pause took effect: put it back for later
                    t, part, off = got.topic(), got.partition(), got.offset()
                    if t is not None and part is not None and off is not None:
                        self.consumer.seek(TopicPartition(t, part, off))
        finally:
            assignment = self.consumer.assignment()
            if assignment:
                self.consumer.resume(assignment)

    # -- one record -----------------------------------------------------------------------------
    def handle(self, msg: Message) -> bool:
        """Deliver one record. True: finished (commit it); False: stopped or revoked."""
        try:
            alert = self.codec.decode_as("alert", msg.value())
        except DecodeError as exc:
            return self.dead_letter(msg, f"decode-{exc.reason}", str(exc))
        if alert["action"] == "trigger":
            try:
                sev = PAGERDUTY_SEVERITIES.index(alert["severity"])
            except ValueError:
                sev = 0
            if sev > self.min_rank:
                self.stats.filtered += 1
                return True
        hosts: dict[int, str] = {}
        if self.topology is not None and alert["action"] == "trigger":
            self.topology.refresh()
            hosts = self.topology.hosts.hosts(str(alert.get("job", "")))
        try:
            event = build_event(
                alert,
                routing_key=self.key,
                severity_map=self.sec.severity_map,
                source=self.sec.source,
                client_url=self.sec.client_url,
                hosts=hosts,
                report_url=self.sec.report_url,
            )
        except PagerDutyEventError as exc:
            return self.dead_letter(msg, f"invalid-{exc.reason}", redact(str(exc), self.key))
        body = encode_event(event)
        dedup = event["dedup_key"]
        action = event["event_action"]
        attempt = 0
        while True:
            while (delay := self.limiter.delay_s(self.key, self.clock())) > 0:
                self.stats.rate_limit_wait_s += delay
                log.info("rate limit: waiting %.1f s before %s %s", delay, action, dedup)
                if not self.wait(delay, msg):
                    return False
            if self.stop.is_set():
                return False
            self.limiter.record(self.key, self.clock())
            res = self.post(self.sec.events_url, body, self.sec.request_timeout_s)
            disposition = RetryPolicy.classify(res.status)
            self._count(action, res, disposition)
            if disposition is Disposition.ACCEPTED:
                self.stats.accepted += 1
                if action == "trigger":
                    self.stats.triggers += 1
                else:
                    self.stats.resolves += 1
                log.info("%s %s accepted (%s) from %s", action, dedup, res.status, _where(msg))
                return True
            text = redact(res.body or res.error, self.key)[:2000]
            if disposition is Disposition.REJECT:
                log.error("PagerDuty rejected %s %s with %s: %s", action, dedup, res.status, text)
                return self.dead_letter(msg, f"pagerduty-{res.status}", text)
            attempt += 1
            if self.retry.gives_up(attempt):
                return self.dead_letter(
                    msg, "pagerduty-gave-up", f"{attempt} failed sends, last {res.status}: {text}"
                )
            self.stats.retries += 1
            wait_s = self.retry.backoff_s(
                attempt, status=res.status, retry_after_s=res.retry_after_s, u=random.random()
            )
            log.warning(
                "%s %s: %s; retry %d in %.1f s",
                action,
                dedup,
                res.status if res.status is not None else text,
                attempt,
                wait_s,
            )
            if not self.wait(wait_s, msg):
                return False

    def _count(self, action: str, res: HttpResult, disposition: Disposition) -> None:
        if res.status == 429:
            self.stats.rate_limited_429 += 1
        elif res.status is None:
            self.stats.network_errors += 1
        elif res.status >= 500:
            self.stats.server_errors += 1
        if self.metrics is not None:
            self.metrics.requests.labels(action, str(res.status or "none")).inc()

    def dead_letter(self, msg: Message, error_type: str, reason: str) -> bool:
        """Write ``msg`` to the DLQ and wait for the broker; True once it is there."""
        value = self.codec.encode(
            "dlq_record",
            {
                "source_topic": msg.topic() or self.topic,
                "partition": msg.partition() if msg.partition() is not None else -1,
                "offset": msg.offset() if msg.offset() is not None else -1,
                "key": msg.key(),
                "value": msg.value() or b"",
                "error_type": error_type,
                "reason": reason,
                "worker": WORKER_NAME,
                "failed_ns": time.time_ns(),
            },
        )
        attempt = 0
        while True:
            errors: list[Any] = []

            def delivered(err: Any, _msg: Any, out: list[Any] = errors) -> None:
                out.append(err)

            self.producer.produce(self.dlq_topic, value=value, key=msg.key(), on_delivery=delivered)
            self.producer.flush(10.0)
            if errors and errors[0] is None:
                self.stats.dead_lettered += 1
                if self.metrics is not None:
                    self.metrics.dead_lettered.labels(error_type).inc()
                log.error("dead-lettered %s (%s): %s", _where(msg), error_type, reason[:300])
                return True
            attempt += 1
            log.error(
                "cannot write %s to %s (%s); retrying",
                _where(msg),
                self.dlq_topic,
                errors[0] if errors else "delivery timed out",
            )
            if not self.wait(min(30.0, 0.5 * 2**attempt), msg):
                return False


def _where(msg: Message) -> str:
    return f"{msg.topic()}[{msg.partition()}]@{msg.offset()}"


class _Metrics:
    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter

        self.requests = Counter(
            "argus_pagerduty_requests",
            "PagerDuty Events API calls by action and HTTP status",
            ["action", "status"],
            registry=registry,
        )
        self.dead_lettered = Counter(
            "argus_pagerduty_dead_lettered",
            "alerts sent to the DLQ by the PagerDuty sink",
            ["error_type"],
            registry=registry,
        )


_METRICS: dict[int, _Metrics] = {}


def _metrics_for(registry: Any) -> _Metrics:
    """One set of counters per registry (a registry rejects a second registration)."""
    m = _METRICS.get(id(registry))
    if m is None:
        m = _METRICS[id(registry)] = _Metrics(registry)
    return m


def run_pagerduty_sink(
    settings: Settings,
    *,
    stop_event: threading.Event | None = None,
    config: PagerDutyConfig | None = None,
    env: Mapping[str, str] | None = None,
    post: PostFn = post_json,
    stats: PagerDutyStats | None = None,
    metrics_registry: Any = None,
    max_messages: int | None = None,
) -> PagerDutyStats:
    """Consume ``<prefix>.alerts`` and deliver each alert to PagerDuty until stopped.

    Parameters
    ----------
    settings : Settings
        Cluster, topic prefix, schema registry and the ``[pagerduty]`` section.
    stop_event : threading.Event, optional
        Set it (e.g. from a SIGTERM handler) to stop; an alert in flight is not committed
        and is redelivered on restart.
    config : PagerDutyConfig, optional
        Ready-made config; default :meth:`PagerDutyConfig.from_settings` (settings + env).
    env : mapping, optional
        Environment for the routing key (default ``os.environ``).
    post : callable, optional
        ``post(url, body, timeout_s) -> HttpResult``; default urllib (:func:`post_json`).
    stats : PagerDutyStats, optional
        Counters to update in place (read them from another thread for metrics).
    metrics_registry : prometheus_client.CollectorRegistry, optional
        When given, ``argus_pagerduty_requests_total{action,status}`` and
        ``argus_pagerduty_dead_lettered_total{error_type}`` are registered on it.
    max_messages : int, optional
        Return after this many records were finished (accepted, filtered or dead-lettered).

    Returns
    -------
    PagerDutyStats
        The counters (the same object as ``stats`` when given).

    Raises
    ------
    ConfigError
        Missing routing key or bad ``[pagerduty]`` settings (before anything is consumed).
    RuntimeError
        A fatal Kafka client error.
    """
    cfg = config or PagerDutyConfig.from_settings(settings, env)
    stats = stats if stats is not None else PagerDutyStats()
    metrics = _metrics_for(metrics_registry) if metrics_registry is not None else None
    sink = _Sink(
        settings,
        cfg,
        stop=stop_event or threading.Event(),
        post=post,
        stats=stats,
        metrics=metrics,
        clock=time.monotonic,
    )
    sink.run(max_messages)
    return stats
