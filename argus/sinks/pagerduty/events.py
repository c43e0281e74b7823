"""PagerDuty Events API v2: the pure parts of the ``argus worker pagerduty`` sink.

Nothing here does I/O, reads a clock or logs: time comes in as arguments (seconds on any
monotonic clock), randomness as a number in ``[0, 1)``. The consumer loop that feeds these
functions lives in :mod:`argus.sinks.pagerduty.worker`.

* :func:`build_event` turns a decoded ``alert`` record (``argus/schemas/alert.avsc``) into an
  Events API v2 body: ``trigger`` with summary, source, severity, timestamp, component,
  group, class, structured ``custom_details`` (the culprit with its hosts, the evidence,
  victims, drill-down commands: objects and lists, no JSON inside strings) and ``links`` to
  the report when a report URL is configured; ``resolve`` with only the routing key, dedup
  key and action (what PagerDuty requires).
* :func:`map_severity` maps argus severities onto PagerDuty's four (identity by default,
  overridable per deployment).
* :class:`SlidingWindowLimiter` / :class:`RateLimiter`: at most ``max_events`` sends per
  rolling ``window_s`` per routing key (PagerDuty allows about 120 per minute per key).
* :class:`RetryPolicy`: what to do with a response (accept, retry, dead-letter) and how long
  to wait before the next try (exponential backoff with jitter, honouring ``Retry-After``).

References
----------
PagerDuty developer docs, Events API v2: ``events-API-v2/01-Overview.md``,
``02-Trigger-Events.md``, ``05-Rate-Limits.md`` (github.com/PagerDuty/developer-docs).
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from string import Formatter
from typing import Any
from urllib.parse import quote

from argus.detectors.funnel.render import DRILLDOWN, alert_hosts, alert_members, with_hosts
from argus.errors import ArgusError

__all__ = [
    "DEFAULT_EVENTS_URL",
    "MAX_DEDUP_KEY_CHARS",
    "MAX_PAYLOAD_BYTES",
    "MAX_SUMMARY_CHARS",
    "PAGERDUTY_SEVERITIES",
    "Disposition",
    "PagerDutyEventError",
    "RateLimiter",
    "RetryPolicy",
    "SlidingWindowLimiter",
    "build_event",
    "check_report_url",
    "encode_event",
    "map_severity",
    "pagerduty_dedup_key",
    "parse_retry_after",
    "redact",
    "report_link",
]

DEFAULT_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
PAGERDUTY_SEVERITIES = ("critical", "error", "warning", "info")
MAX_SUMMARY_CHARS = 1024
MAX_DEDUP_KEY_CHARS = 255
MAX_PAYLOAD_BYTES = 512 * 1024  # PagerDuty rejects larger bodies
_MAX_DETAIL_CHARS = 4096  # one funnel-evidence value in custom_details
_MAX_LIST_ITEMS = 256  # ranks / kernels / anomaly ids kept in custom_details


class PagerDutyEventError(ArgusError, ValueError):
    """An alert cannot become a valid Events API v2 body.

    ``reason`` is a short code (``bad-action``, ``bad-severity``, ``empty-dedup-key``,
    ``empty-summary``, ``too-large``, ``bad-alert``) that travels into the DLQ record.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def redact(text: str, secret: str) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``***`` (for logs, DLQ)."""
    return text.replace(secret, "***") if secret else text


# -- severity ---------------------------------------------------------------------------------


def map_severity(severity: str, overrides: Mapping[str, str] | None = None) -> str:
    """PagerDuty severity for an argus alert severity.

    Parameters
    ----------
    severity : str
        The alert's ``severity`` (``critical``, ``error``, ``warning`` or ``info``).
    overrides : mapping, optional
        Deployment-specific remapping, e.g. ``{"warning": "error"}`` to page on warnings
        with a higher urgency. Unmapped severities map to themselves.

    Raises
    ------
    PagerDutyEventError
        ``bad-severity`` when the input or its mapped value is not one of PagerDuty's four.
    """
    if severity not in PAGERDUTY_SEVERITIES:
        raise PagerDutyEventError(
            "bad-severity", f"alert severity {severity!r} is not one of {PAGERDUTY_SEVERITIES}"
        )
    out = (overrides or {}).get(severity, severity)
    if out not in PAGERDUTY_SEVERITIES:
        raise PagerDutyEventError(
            "bad-severity",
            f"severity_map sends {severity!r} to {out!r}, not one of {PAGERDUTY_SEVERITIES}",
        )
    return out


# -- the event body ----------------------------------------------------------------------------


def pagerduty_dedup_key(dedup_key: str) -> str:
    """The dedup key sent to PagerDuty: the alert's own, shortened stably if over 255 chars.

    Long keys keep their first 238 characters plus ``#`` and 16 hex digits of their SHA-256,
    so a trigger and its resolve still meet on the same PagerDuty incident.

    Raises
    ------
    PagerDutyEventError
        ``empty-dedup-key`` for an empty or blank key.
    """
    if not dedup_key.strip():
        raise PagerDutyEventError("empty-dedup-key", "alert has an empty dedup_key")
    if len(dedup_key) <= MAX_DEDUP_KEY_CHARS:
        return dedup_key
    digest = hashlib.sha256(dedup_key.encode()).hexdigest()[:16]
    return f"{dedup_key[: MAX_DEDUP_KEY_CHARS - 17]}#{digest}"


def _iso8601(ns: int) -> str:
    """ns since the epoch -> ISO 8601 UTC with milliseconds, e.g. ``2026-11-29T16:10:28.123Z``."""
    dt = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(ns // 1_000_000) % 1000:03d}Z"


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _capped(items: list[Any]) -> list[Any]:
    return items if len(items) <= _MAX_LIST_ITEMS else [*items[:_MAX_LIST_ITEMS], "…"]


def _field(alert: Mapping[str, Any], name: str) -> Any:
    try:
        return alert[name]
    except KeyError:
        raise PagerDutyEventError("bad-alert", f"alert has no field {name!r}") from None


def build_event(
    alert: Mapping[str, Any],
    *,
    routing_key: str,
    severity_map: Mapping[str, str] | None = None,
    source: str | None = None,
    client: str = "argus-trace",
    client_url: str | None = None,
    hosts: Mapping[int, str] | None = None,
    report_url: str | None = None,
) -> dict[str, Any]:
    """Events API v2 body for one alert record.

    Parameters
    ----------
    alert : mapping
        A decoded ``alert`` record (fields as in ``alert.avsc``); ``*_ns`` are ns since the
        epoch.
    routing_key : str
        The integration key (32 characters); the same for a trigger and its resolve.
    severity_map : mapping, optional
        See :func:`map_severity`.
    source : str, optional
        ``payload.source``; default ``argus/<job>``.
    client, client_url : str
        Shown in the PagerDuty incident as the sending tool and a link to it.
    hosts : mapping, optional
        Rank -> host of the alert's job (``argus.jobs``); the culprit's go into the summary
        and ``custom_details.culprit.hosts`` (:func:`argus.detectors.funnel.render.with_hosts`).
    report_url : str, optional
        Template of a link to the alert's report (:func:`report_link`); sent as ``links``.

    Returns
    -------
    dict
        JSON-serialisable body. ``trigger``: ``routing_key``, ``event_action``,
        ``dedup_key``, ``payload`` {summary ≤ 1024 chars, source, severity, timestamp,
        component, group, class, custom_details}, ``client`` [, ``client_url``].
        ``resolve``: ``routing_key``, ``event_action``, ``dedup_key`` only.

    Raises
    ------
    PagerDutyEventError
        Unknown action or severity, empty dedup key or summary, a missing field, or a body
        over 512 KB even after trimming the evidence.

    Examples
    --------
    >>> ev = build_event({"dedup_key": "j/dp/0/3/fwd", "action": "resolve"}, routing_key="k" * 32)
    >>> sorted(ev)
    ['dedup_key', 'event_action', 'routing_key']
    """
    action = _field(alert, "action")
    if action not in ("trigger", "resolve"):
        raise PagerDutyEventError("bad-action", f"alert action {action!r} is not trigger/resolve")
    key = pagerduty_dedup_key(str(_field(alert, "dedup_key")))
    if action == "resolve":
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": key}

    if hosts:
        alert = with_hosts(alert, hosts)
    summary = str(_field(alert, "summary")).strip()
    if not summary:
        raise PagerDutyEventError("empty-summary", f"trigger {key!r} has an empty summary")
    job = str(_field(alert, "job"))
    group_kind = str(_field(alert, "group_kind"))
    group_id = str(_field(alert, "group_id"))
    levels = [str(x) for x in _field(alert, "levels")]
    kernels = [str(x) for x in alert.get("kernels") or []]
    phase = alert.get("phase")
    _field(alert, "ranks")  # required; the culprit's ranks come from alert_members
    raw = {str(k): str(v) for k, v in (alert.get("details") or {}).items()}
    first_seen = _iso8601(int(_field(alert, "first_seen_ns")))
    last_seen = _iso8601(int(_field(alert, "last_seen_ns")))
    custom: dict[str, Any] = {
        "culprit": _culprit(alert, raw, kernels, first_seen),
        "evidence": _evidence(alert, raw, levels, first_seen, last_seen),
        "victims": _capped(_json(raw.pop("victims", None), list) or []),
        "drill_down": {name: raw.pop(f"cmd_{name}") for name in DRILLDOWN if f"cmd_{name}" in raw},
        "anomaly_ids": _capped([str(a) for a in alert.get("anomaly_ids") or []]),
        "funnel": {k: _truncate(v, _MAX_DETAIL_CHARS) for k, v in raw.items()},
    }
    if not custom["victims"]:
        del custom["victims"]
    if not custom["drill_down"]:
        del custom["drill_down"]
    if key != alert["dedup_key"]:
        custom["argus_dedup_key"] = alert["dedup_key"]
    payload: dict[str, Any] = {
        "summary": _truncate(summary, MAX_SUMMARY_CHARS),
        "source": source or f"argus/{job}",
        "severity": map_severity(str(_field(alert, "severity")), severity_map),
        "timestamp": last_seen,
        "component": phase or (kernels[0] if kernels else group_kind),
        "group": f"{group_kind}/{group_id}",
        "class": "+".join(levels) if levels else "fail-slow",
        "custom_details": custom,
    }
    event: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": key,
        "payload": payload,
        "client": client,
    }
    if client_url:
        event["client_url"] = client_url
    if report_url:
        event["links"] = [
            {
                "href": report_link(report_url, alert),
                "text": f"argus report: {custom['culprit']['name']} ({job})",
            }
        ]
    if len(encode_event(event)) > MAX_PAYLOAD_BYTES:
        custom["funnel"] = {"trimmed": "evidence over PagerDuty's 512 KB limit; see argus.alerts"}
        custom["evidence"]["findings"] = custom["evidence"]["findings"][:4]
        custom["anomaly_ids"] = custom["anomaly_ids"][:16]
        if len(encode_event(event)) > MAX_PAYLOAD_BYTES:
            raise PagerDutyEventError("too-large", f"trigger {key!r} is over 512 KB even trimmed")
    return event


_LINK_FIELDS = ("dedup_key", "job", "from", "to")


def report_link(template: str, alert: Mapping[str, Any]) -> str:
    """The report URL of an alert: ``template`` with ``{dedup_key}``, ``{job}``, ``{from}``
    and ``{to}`` (the window, ISO 8601 UTC) URL-quoted; a template without placeholders gets
    ``?dedup_key=<key>`` (``&`` if it has a query already).

    Examples
    --------
    >>> report_link("https://ops.example/argus/{job}?around={dedup_key}",
    ...             {"dedup_key": "j/dp/pp0/7/mlp", "job": "j", "first_seen_ns": 0,
    ...              "last_seen_ns": 0})
    'https://ops.example/argus/j?around=j%2Fdp%2Fpp0%2F7%2Fmlp'
    """
    values = {
        "dedup_key": str(alert.get("dedup_key", "")),
        "job": str(alert.get("job", "")),
        "from": _iso8601(int(alert.get("first_seen_ns", 0))),
        "to": _iso8601(int(alert.get("last_seen_ns", 0))),
    }
    if not any("{" + f + "}" in template for f in _LINK_FIELDS):
        sep = "&" if "?" in template else "?"
        return f"{template}{sep}dedup_key={quote(values['dedup_key'], safe='')}"
    return template.format(**{k: quote(v, safe="") for k, v in values.items()})


def check_report_url(template: str) -> None:
    """Raise ``ValueError`` naming what is wrong with a ``report_url`` template: not
    http(s), or a placeholder other than ``{dedup_key}``, ``{job}``, ``{from}``, ``{to}``."""
    if not template.startswith(("http://", "https://")):
        raise ValueError(f"must be an http(s) URL, got {template!r}")
    try:
        names = {f for _, f, _, _ in Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ValueError(f"{template!r}: {exc}") from None
    bad = names - set(_LINK_FIELDS)
    if bad:
        raise ValueError(
            f"{template!r} has unknown placeholders {sorted(bad)}; use {list(_LINK_FIELDS)}"
        )


def _json(text: str | None, kind: type) -> Any:
    """A JSON value of ``kind`` from a detail string, or None."""
    if text is None:
        return None
    try:
        v = json.loads(text)
    except ValueError:
        return None
    return v if isinstance(v, kind) else None


def _culprit(
    alert: Mapping[str, Any],
    raw: dict[str, str],
    kernels: list[str],
    first_seen: str,
) -> dict[str, Any]:
    """``custom_details.culprit``: who, where, what, how much slower, since when (``members``
    and ``hosts`` read as :mod:`argus.detectors.funnel.render` wrote them)."""
    members = alert_members(alert)
    by_rank = alert_hosts(alert)
    raw.pop("members", None)
    raw.pop("hosts", None)
    rank_hosts = {str(r): by_rank[r] for r in members if r in by_rank}
    out: dict[str, Any] = {
        "name": raw.pop("culprit", "") or f"{alert['group_kind']} group {alert['group_id']}",
        "job": str(alert["job"]),
        "group": raw.pop("group", f"{alert['group_kind']}/{alert['group_id']}"),
        "ranks": _capped(members),
        "hosts": list(dict.fromkeys(rank_hosts.values())),
        "rank_hosts": rank_hosts,
        "phase": alert.get("phase"),
        "kernels": _capped(kernels),
        "what": raw.pop("what", ""),
        "slower": raw.pop("slower", ""),
        "since": raw.pop("since", "") or first_seen,
    }
    ratio = raw.pop("ratio", None)
    try:
        out["ratio_to_peers"] = float(ratio) if ratio is not None else None
    except ValueError:
        out["ratio_to_peers"] = None
    return out


def _evidence(
    alert: Mapping[str, Any], raw: dict[str, str], levels: list[str], first: str, last: str
) -> dict[str, Any]:
    """``custom_details.evidence``: levels, persistence, confidence, window and findings."""
    raw.pop("levels", None)
    raw.pop("last_seen", None)
    return {
        "kind": raw.pop("kind", ""),
        "levels": levels,
        "persistence": int(alert.get("persistence", 1)),
        "confidence": float(alert.get("confidence", 0.0)),
        "first_seen": first,
        "last_seen": last,
        "steps": raw.pop("steps", ""),
        "findings": _json(raw.pop("findings", None), list) or [],
    }


def encode_event(event: Mapping[str, Any]) -> bytes:
    """The UTF-8 JSON body sent to PagerDuty."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


# -- rate limiting -----------------------------------------------------------------------------


class SlidingWindowLimiter:
    """At most ``max_events`` sends in any rolling ``window_s``.

    Time is passed in (seconds, any monotonic clock). Call :meth:`delay_s` before a send and
    :meth:`record` when it happened.

    Examples
    --------
    >>> lim = SlidingWindowLimiter(max_events=2, window_s=60.0)
    >>> lim.record(0.0); lim.record(1.0)
    >>> lim.delay_s(10.0)
    50.0
    >>> lim.delay_s(60.0)
    0.0
    """

    def __init__(self, *, max_events: int, window_s: float) -> None:
        if max_events < 1:
            raise ValueError(f"max_events must be >= 1, got {max_events}")
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.max_events = max_events
        self.window_s = float(window_s)
        self._sent: deque[float] = deque()

    def _prune(self, now_s: float) -> None:
        while self._sent and self._sent[0] + self.window_s <= now_s:
            self._sent.popleft()

    def delay_s(self, now_s: float) -> float:
        """Seconds to wait from ``now_s`` before the next send is allowed (0: send now).

        Ask again after waiting: float rounding can leave a few ulp to go.
        """
        self._prune(now_s)
        if len(self._sent) < self.max_events:
            return 0.0
        return max(0.0, self._sent[0] + self.window_s - now_s)

    def record(self, now_s: float) -> None:
        """Count a send at ``now_s``."""
        self._prune(now_s)
        self._sent.append(now_s)


@dataclass
class RateLimiter:
    """One :class:`SlidingWindowLimiter` per routing key (PagerDuty limits per integration key)."""

    max_events: int = 120
    window_s: float = 60.0
    _by_key: dict[str, SlidingWindowLimiter] = field(default_factory=dict, repr=False)

    def _for(self, routing_key: str) -> SlidingWindowLimiter:
        lim = self._by_key.get(routing_key)
        if lim is None:
            lim = SlidingWindowLimiter(max_events=self.max_events, window_s=self.window_s)
            self._by_key[routing_key] = lim
        return lim

    def delay_s(self, routing_key: str, now_s: float) -> float:
        """Seconds to wait before the next send on ``routing_key``."""
        return self._for(routing_key).delay_s(now_s)

    def record(self, routing_key: str, now_s: float) -> None:
        """Count a send on ``routing_key`` at ``now_s``."""
        self._for(routing_key).record(now_s)


# -- responses and retries ---------------------------------------------------------------------


def parse_retry_after(value: str | None, now_s: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (RFC 9110 10.2.3): delay-seconds
    (``"3"``) or an HTTP-date (``"Wed, 21 Oct 2026 07:28:00 GMT"``), relative to ``now_s``
    (s since the epoch). None when absent or unreadable (the backoff schedule applies);
    a date in the past is 0.

    Examples
    --------
    >>> parse_retry_after("3", 0.0)
    3.0
    >>> parse_retry_after("Thu, 01 Jan 1970 00:00:10 GMT", 4.0)
    6.0
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        secs = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # RFC 850 / asctime forms: GMT by definition
            when = when.replace(tzinfo=UTC)
        return max(0.0, when.timestamp() - now_s)
    return max(0.0, secs) if math.isfinite(secs) else None


class Disposition(enum.Enum):
    """What the sink does with a response."""

    ACCEPTED = "accepted"  # 2xx: commit the offset
    RETRY = "retry"  # 429, 5xx, 408, network error, unexpected status: back off, send again
    REJECT = "reject"  # 400/413/422: the event itself is bad; dead-letter it, commit


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Backoff for PagerDuty sends.

    Parameters
    ----------
    initial_backoff_s : float
        First wait after a 5xx / network error, seconds.
    rate_limited_backoff_s : float
        First wait after a 429, seconds (PagerDuty suggests backing off for a while).
    multiplier : float
        Growth per further attempt.
    max_backoff_s : float
        Cap of one wait, seconds.
    jitter : float
        Fraction of the wait drawn at random (``0.2``: the wait lies in [0.8, 1.0] × base).
    max_attempts : int or None
        Give up (dead-letter) after this many failed sends; ``None`` retries until
        PagerDuty answers, which keeps the alert in Kafka instead of losing it.
    """

    initial_backoff_s: float = 1.0
    rate_limited_backoff_s: float = 30.0
    multiplier: float = 2.0
    max_backoff_s: float = 300.0
    jitter: float = 0.2
    max_attempts: int | None = None

    def __post_init__(self) -> None:
        for name in ("initial_backoff_s", "rate_limited_backoff_s", "max_backoff_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.multiplier >= 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be in [0, 1], got {self.jitter}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None, got {self.max_attempts}")

    @staticmethod
    def classify(status: int | None) -> Disposition:
        """Disposition of an HTTP status (``None``: no response, e.g. timeout or refused).

        Statuses other than 2xx, 400, 413 and 422 are retried: 401/403/404 mean a wrong URL,
        proxy or key, which an operator fixes; dead-lettering every alert meanwhile would
        lose them.
        """
        if status is not None and 200 <= status < 300:
            return Disposition.ACCEPTED
        if status in (400, 413, 422):
            return Disposition.REJECT
        return Disposition.RETRY

    def backoff_s(
        self,
        attempt: int,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        u: float = 1.0,
    ) -> float:
        """Seconds to wait after the ``attempt``-th failed send (1-based).

        ``u`` in ``[0, 1]`` is the caller's random draw (1.0: no jitter). A ``Retry-After``
        from the server (s, see :func:`parse_retry_after`) replaces the schedule: the server
        said when to come back (capped at ``max_backoff_s``; jitter none).
        """
        if attempt < 1:
            raise ValueError(f"attempt is 1-based, got {attempt}")
        if retry_after_s is not None and math.isfinite(retry_after_s):
            return min(max(retry_after_s, 0.0), self.max_backoff_s)
        first = self.rate_limited_backoff_s if status == 429 else self.initial_backoff_s
        exp = min(attempt - 1, 64)
        base = min(self.max_backoff_s, first * math.pow(self.multiplier, exp))
        return base * (1.0 - self.jitter * (1.0 - min(max(u, 0.0), 1.0)))

    def gives_up(self, attempt: int) -> bool:
        """True when ``attempt`` failed sends exhaust the policy."""
        return self.max_attempts is not None and attempt >= self.max_attempts
