"""Prometheus metrics of the stream workers.

Labels: ``role`` (the agent that counts), ``topic`` without the deployment's topic prefix
(``raw.steps``, ``internal.steps-by-job``: the same name on every deployment, see
:func:`topic_label`), and ``argus_job`` for a training job (not ``job``, which Prometheus
sets to the scrape target's job and would overwrite or rename to ``exported_job``).
Serve with :func:`serve` on ``HOST:PORT`` (:func:`parse_addr`; default 127.0.0.1).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from argus.errors import ConfigError

__all__ = [
    "REGISTRY",
    "consumed",
    "forget_offsets",
    "lag_records",
    "lag_seconds",
    "last_consumed",
    "last_offset",
    "parse_addr",
    "serve",
    "topic_label",
]

REGISTRY = CollectorRegistry()

RECORDS_IN = Counter("argus_records_in", "Records consumed", ["role", "topic"], registry=REGISTRY)
RECORDS_OUT = Counter("argus_records_out", "Records produced", ["role", "topic"], registry=REGISTRY)
DLQ = Counter("argus_dlq_records", "Records sent to the DLQ", ["role", "reason"], registry=REGISTRY)
LATE = Counter(
    "argus_late_records",
    "Records for windows already closed (counted, not used)",
    ["role"],
    registry=REGISTRY,
)
DUPLICATES = Counter(
    "argus_duplicate_records",
    "Replayed records ignored (same rank, same window)",
    ["role"],
    registry=REGISTRY,
)
WINDOWS = Counter("argus_windows_closed", "Windows closed", ["role", "how"], registry=REGISTRY)
ROUTER_POLL = Histogram(
    "argus_router_poll_events",
    "Events a router took into one poll (route_batches; their items leave as one message per"
    " key), and records the compressor took into one summarize call (role compressor)",
    ["role"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    registry=REGISTRY,
)
MISSING = Counter(
    "argus_missing_ranks", "Ranks missing when a window timed out", ["role"], registry=REGISTRY
)
DETECT_S = Histogram(
    "argus_detector_seconds",
    "Detector run time per window (s)",
    ["level"],
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.02, 0.1, 0.5, 1, 2, 5, 10, 30),
)
BEHIND_S = Histogram(
    "argus_judged_behind_seconds",
    "Wall-clock time when a window or block is judged minus its event-time end (s): how far"
    " behind the producers' clocks a detector runs",
    ["level"],
    registry=REGISTRY,
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 300),
)
ANOMALIES = Counter(
    "argus_anomalies", "Anomaly records emitted", ["level", "kind"], registry=REGISTRY
)
ALERTS = Counter("argus_alerts", "Alert records emitted", ["action"], registry=REGISTRY)
FIDELITY = Gauge(
    "argus_compression_fidelity_spearman",
    "Spearman of raw vs reconstructed pairwise W1 on the latest sampled window",
    ["argus_job"],
    registry=REGISTRY,
)
FIDELITY_F1 = Gauge(
    "argus_compression_fidelity_flag_agreement",
    "Agreement (F1) of IQR outlier flags, raw vs reconstructed, latest sample",
    ["argus_job"],
    registry=REGISTRY,
)
COMPRESSION = Gauge(
    "argus_compression_ratio",
    "Raw kernel-batch bytes over summary bytes",
    ["argus_job"],
    registry=REGISTRY,
)
COLLECTOR_DROPPED = Gauge(
    "argus_collector_dropped_records",
    "Records the collectors dropped (max cumulative over a job's ranks)",
    ["argus_job"],
    registry=REGISTRY,
)
COLLECTOR_ERRORS = Gauge(
    "argus_collector_errors",
    "Errors caught in collector hooks (max over ranks)",
    ["argus_job"],
    registry=REGISTRY,
)
COLLECTOR_OVERHEAD = Gauge(
    "argus_collector_overhead_ratio",
    "Collector time on the training thread / step time (latest, max over ranks)",
    ["argus_job"],
    registry=REGISTRY,
)
LAG = Gauge(
    "argus_consumer_lag",
    "Messages between the high watermark and the consumer position",
    ["role", "topic", "partition"],
    registry=REGISTRY,
)
INPUT_AGE = Histogram(
    "argus_input_age_seconds",
    "Wall-clock time when a role takes a record minus the record's Kafka timestamp (s): the"
    " time it spent between its producer and this role (topic: the full topic name)",
    ["topic"],
    buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 40, 60, 120, 300, 600),
    registry=REGISTRY,
)
LAG_SECONDS = Gauge(
    "argus_consumer_lag_seconds",
    "How long ago the oldest record still waiting for the role was produced (s; 0 caught up)",
    ["role", "topic", "partition"],
    registry=REGISTRY,
)


def topic_label(topic: str, prefix: str) -> str:
    """A topic's ``topic`` label: its name without ``<prefix>.`` (``argus.raw.steps`` ->
    ``raw.steps``), so dashboards work across prefixes; a foreign name stays whole."""
    return topic.removeprefix(prefix + ".")


def lag_seconds(now_s: float, last_ts_s: float | None, caught_up_s: float | None) -> float:
    """Consumer lag in seconds of a partition with records waiting (an upper bound).

    Every record still waiting was produced after the newest record the role consumed
    (``last_ts_s``, its Kafka timestamp) and after the last time the partition was seen
    caught up (``caught_up_s``: nothing was waiting then); the later of the two bounds the
    oldest waiting record's age, so a partition idle for an hour does not read as an hour
    behind when one record arrives, and a backlog found at start reads its full age. All s
    on the epoch clock; NaN when neither is known.
    """
    known = [t for t in (last_ts_s, caught_up_s) if t is not None and math.isfinite(t)]
    if not known:
        return math.nan
    return max(0.0, now_s - max(known))


_LAST_TS: dict[tuple[str, int], float] = {}
_LAST_OFFSET: dict[tuple[str, int], int] = {}
_AGE_OF: dict[str, Any] = {}  # topic -> its INPUT_AGE child (no label lookup per record)


def consumed(topic: str, partition: int, ts_s: float | None, offset: int | None = None) -> None:
    """Note the Kafka timestamp (s since the epoch) and offset of a record a role just took
    (and its age, :data:`INPUT_AGE`)."""
    key = (topic, partition)
    if ts_s is not None and ts_s > 0:
        age = _AGE_OF.get(topic)
        if age is None:
            age = _AGE_OF[topic] = INPUT_AGE.labels(topic)
        age.observe(max(0.0, time.time() - ts_s))
        if ts_s > _LAST_TS.get(key, 0.0):
            _LAST_TS[key] = float(ts_s)
    if offset is not None and offset > _LAST_OFFSET.get(key, -1):
        _LAST_OFFSET[key] = int(offset)


def last_offset(topic: str, partition: int) -> int | None:
    """The highest offset :func:`consumed` noted for a partition, None if none."""
    return _LAST_OFFSET.get((topic, partition))


def forget_offsets(tps: Iterable[tuple[str, int]]) -> None:
    """Drop the offsets noted for these (topic, partition) (revoked: another worker may move
    them on before they come back)."""
    for key in tps:
        _LAST_OFFSET.pop(key, None)


def lag_records(high: int, position: int, taken: int | None) -> int:
    """Records a role has not taken yet: ``high`` (the partition's high watermark) minus the
    offset after the last one it took (``taken``; the consumer's fetch ``position`` when
    none is noted). faust fetches ahead into its stream buffer: ``high - position`` alone
    misses what waits there."""
    nxt = position if taken is None or taken + 1 > position else taken + 1
    return max(0, high - nxt)


def note_lag(
    role: str,
    topic: str,
    partition: int,
    prefix: str,
    *,
    high: int,
    position: int,
    caught_up: dict[tuple[str, int], float],
    now_s: float,
) -> None:
    """Set :data:`LAG` (:func:`lag_records`) and :data:`LAG_SECONDS` (:func:`lag_seconds`)
    of one input partition of ``role``: ``high`` its high watermark, ``position`` the
    consumer's; ``caught_up`` holds the last time (s, epoch) each partition was seen with
    nothing waiting, and is updated here."""
    lag = lag_records(high, position, last_offset(topic, partition))
    labels = (role, topic_label(topic, prefix), str(partition))
    LAG.labels(*labels).set(lag)
    key = (topic, partition)
    if lag == 0:
        caught_up[key] = now_s
        secs = 0.0
    else:
        secs = lag_seconds(now_s, last_consumed(topic, partition), caught_up.get(key))
    LAG_SECONDS.labels(*labels).set(secs)


def last_consumed(topic: str, partition: int) -> float | None:
    """The newest timestamp :func:`consumed` noted for a partition (s), None if none."""
    return _LAST_TS.get((topic, partition))


def parse_addr(addr: str | int) -> tuple[str, int]:
    """``HOST:PORT`` (``0.0.0.0:9464``, ``[::]:9464``, ``:9464`` = all interfaces) or a bare
    port (127.0.0.1) -> (host, port); port 0 means off.

    Raises
    ------
    ConfigError
        Naming the value when it is not of that form or the port is not 0..65535.
    """
    text = str(addr).strip()
    host, sep, port_s = text.rpartition(":")
    if not sep:
        host, port_s = "127.0.0.1", text
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(f"metrics address {text!r}: write an IPv6 host in brackets, [::]:9464")
    elif host == "":
        host = "0.0.0.0"
    try:
        port = int(port_s)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"metrics address {text!r} is not HOST:PORT or PORT with a port 0..65535")
    return host, port


def serve(addr: str | int) -> tuple[str, int] | None:
    """Serve ``/metrics`` on ``addr`` (:func:`parse_addr`; port 0: off). Returns the bound
    (host, port), or None when off."""
    host, port = parse_addr(addr)
    if not port:
        return None
    start_http_server(port, addr=host, registry=REGISTRY)
    return host, port
