"""``[pagerduty]`` settings (``ARGUS_PAGERDUTY__<KEY>``), validated when the settings load.

The section alone, without the routing key's presence (only the sink needs one) and without
Kafka: :mod:`argus.config` builds it in every process that sets it, so ``argus config show``
rejects what ``argus worker pagerduty`` would. This dataclass is the one definition of the
section's keys, defaults and ranges: the sink's run-time
:class:`argus.sinks.pagerduty.worker.PagerDutyConfig` holds it as ``section``, with what the
sink resolves beside it (the routing key read from the environment or its file, the consumer
group).

=======================  =============================================  ===================
key                      meaning                                        default
=======================  =============================================  ===================
events_url               Events API v2 endpoint                         PagerDuty's enqueue
routing_key_file         file holding the routing key (a k8s Secret)    none
group_id                 consumer group                                 ``<prefix>.pagerduty``
rate_limit_events        sends allowed per window per routing key       120
rate_limit_window_s      rolling window, seconds                        60
request_timeout_s        one HTTP request, seconds                      10
initial_backoff_s        first wait after 5xx / network error, s        1
rate_limited_backoff_s   first wait after 429, seconds                  30
max_backoff_s            cap of one wait, seconds                       300
backoff_multiplier       growth per attempt                             2
jitter                   random fraction of each wait                   0.2
max_attempts             dead-letter after this many failures           0 (never)
severity_map             table argus severity -> PagerDuty severity     identity
min_severity             triggers below this are not sent               info
source                   ``payload.source``                             ``argus/<job>``
client_url               link shown in the incident                     none
report_url               template of the ``links`` entry to the report  none
hosts_from_topology      look up hosts an alert lacks on argus.jobs     true
poll_timeout_s           one consumer poll, seconds                     0.5
routing_key              the key itself: environment only               none
=======================  =============================================  ===================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from argus.config import NON_NEGATIVE, POSITIVE, ConfigError, Range, check_ranges
from argus.kafka.security import Secret
from argus.sinks.pagerduty.events import (
    DEFAULT_EVENTS_URL,
    PAGERDUTY_SEVERITIES,
    PagerDutyEventError,
    RetryPolicy,
    check_report_url,
    map_severity,
)

__all__ = ["PagerDutySettings"]

_RANGES = {
    "rate_limit_events": Range(ge=1),
    "rate_limit_window_s": POSITIVE,
    "request_timeout_s": POSITIVE,
    "poll_timeout_s": POSITIVE,
    "max_attempts": NON_NEGATIVE,
}


@dataclass(frozen=True, kw_only=True)
class PagerDutySettings:
    """The ``[pagerduty]`` table (the module docstring lists each key).

    ``routing_key`` comes only from the environment (``ARGUS_PAGERDUTY_ROUTING_KEY``, or
    ``ARGUS_PAGERDUTY__ROUTING_KEY``), never from the file; ``group_id`` empty means
    ``<topic prefix>.pagerduty``; ``max_attempts`` 0 retries until PagerDuty answers;
    ``report_url`` (a template, :func:`argus.sinks.pagerduty.events.report_link`) adds a
    ``links`` entry to each trigger.
    """

    events_url: str = DEFAULT_EVENTS_URL
    routing_key: Secret | None = None
    routing_key_file: str = ""
    group_id: str = ""
    rate_limit_events: int = 120
    rate_limit_window_s: float = 60.0
    request_timeout_s: float = 10.0
    initial_backoff_s: float = 1.0
    rate_limited_backoff_s: float = 30.0
    max_backoff_s: float = 300.0
    backoff_multiplier: float = 2.0
    jitter: float = 0.2
    max_attempts: int = 0
    severity_map: Mapping[str, str] = field(default_factory=dict)
    min_severity: str = "info"
    source: str | None = None
    client_url: str | None = None
    report_url: str | None = None
    hosts_from_topology: bool = True
    poll_timeout_s: float = 0.5

    def __post_init__(self) -> None:
        if not self.events_url.startswith(("http://", "https://")):
            raise ConfigError(f"pagerduty.events_url must be http(s), got {self.events_url!r}")
        check_ranges(self, "pagerduty", _RANGES)
        for name, attr in (
            ("initial_backoff_s", "initial_backoff_s"),
            ("rate_limited_backoff_s", "rate_limited_backoff_s"),
            ("max_backoff_s", "max_backoff_s"),
            ("backoff_multiplier", "multiplier"),
            ("jitter", "jitter"),
        ):
            try:
                RetryPolicy(**{attr: getattr(self, name)})
            except ValueError as exc:
                raise ConfigError(f"pagerduty.{name}: {exc}") from None
        if self.min_severity not in PAGERDUTY_SEVERITIES:
            raise ConfigError(
                f"pagerduty.min_severity {self.min_severity!r} is not one of {PAGERDUTY_SEVERITIES}"
            )
        if self.report_url:
            try:
                check_report_url(self.report_url)
            except ValueError as exc:
                raise ConfigError(f"pagerduty.report_url {exc}") from None
        unknown = set(self.severity_map) - set(PAGERDUTY_SEVERITIES)
        if unknown:
            raise ConfigError(f"pagerduty.severity_map has unknown severities {sorted(unknown)}")
        for sev in PAGERDUTY_SEVERITIES:
            try:
                map_severity(sev, self.severity_map)
            except PagerDutyEventError as exc:
                raise ConfigError(f"pagerduty.severity_map: {exc}") from None

    def retry_policy(self) -> RetryPolicy:
        """The backoff schedule these settings describe."""
        return RetryPolicy(
            initial_backoff_s=self.initial_backoff_s,
            rate_limited_backoff_s=self.rate_limited_backoff_s,
            max_backoff_s=self.max_backoff_s,
            multiplier=self.backoff_multiplier,
            jitter=self.jitter,
            max_attempts=self.max_attempts if self.max_attempts > 0 else None,
        )
