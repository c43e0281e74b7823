"""Prometheus metrics of the stream workers, served on a loopback port.

All metrics carry the ``role`` label of the agent that counts them. Serve with
:func:`serve` (127.0.0.1 only; put a proxy or a sidecar in front to scrape from elsewhere).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["REGISTRY", "serve"]

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
ANOMALIES = Counter(
    "argus_anomalies", "Anomaly records emitted", ["level", "kind"], registry=REGISTRY
)
ALERTS = Counter("argus_alerts", "Alert records emitted", ["action"], registry=REGISTRY)
FIDELITY = Gauge(
    "argus_compression_fidelity_spearman",
    "Spearman of raw vs reconstructed pairwise W1 on the latest sampled window",
    ["job"],
    registry=REGISTRY,
)
FIDELITY_F1 = Gauge(
    "argus_compression_fidelity_flag_agreement",
    "Agreement (F1) of IQR outlier flags, raw vs reconstructed, latest sample",
    ["job"],
    registry=REGISTRY,
)
COMPRESSION = Gauge(
    "argus_compression_ratio",
    "Raw kernel-batch bytes over summary bytes",
    ["job"],
    registry=REGISTRY,
)
COLLECTOR_DROPPED = Gauge(
    "argus_collector_dropped_records",
    "Records the collectors dropped (max cumulative over a job's ranks)",
    ["job"],
    registry=REGISTRY,
)
COLLECTOR_ERRORS = Gauge(
    "argus_collector_errors",
    "Errors caught in collector hooks (max over ranks)",
    ["job"],
    registry=REGISTRY,
)
COLLECTOR_OVERHEAD = Gauge(
    "argus_collector_overhead_ratio",
    "Collector time on the training thread / step time (latest, max over ranks)",
    ["job"],
    registry=REGISTRY,
)
LAG = Gauge(
    "argus_consumer_lag",
    "Messages between the high watermark and the consumer position",
    ["role", "topic", "partition"],
    registry=REGISTRY,
)


def serve(port: int) -> None:
    """Serve ``/metrics`` on 127.0.0.1:``port`` (no-op for port 0)."""
    if port:
        start_http_server(port, addr="127.0.0.1", registry=REGISTRY)
