"""Time windows of the drill-down commands (pure: no Kafka).

* ``--last 15m``: :func:`parse_duration` and :func:`last_window` (ends now);
* ``--around REF``: REF is an alert's ``dedup_key`` or an anomaly's ``id``;
  :func:`window_around` turns the matching ``alert`` / ``anomaly`` records into a
  :class:`DrillWindow` (job, event-time range padded on both sides, culprit ranks and group);
* :func:`explain_empty`: the sentence an empty read prints (which of time range, prefix or lag
  limit excluded the data, and the job's own range).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from argus.errors import ArgusError

__all__ = [
    "DrillWindow",
    "Extent",
    "WindowError",
    "explain_empty",
    "iso",
    "last_window",
    "parse_duration",
    "window_around",
]

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


class WindowError(ArgusError):
    """A time window that cannot be resolved (bad duration, unknown alert or finding)."""


def iso(ns: int) -> str:
    """``ns`` since epoch as ISO 8601 UTC with milliseconds (``2026-05-28T20:26:40.000Z``)."""
    dt = datetime.fromtimestamp(ns // 10**9, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(ns % 10**9) // 10**6:03d}Z"


def parse_duration(text: str) -> int:
    """``"15m"``, ``"90s"``, ``"2h"``, ``"1d"``, ``"500ms"`` (or a bare number of s) -> ns.

    Raises
    ------
    WindowError
        Not a positive number with one of the units ms, s, m/min, h, d.
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d)?\s*", text)
    if not m or float(m[1]) <= 0:
        raise WindowError(f"duration {text!r}: expected e.g. 15m, 90s, 2h, 1d (positive)")
    return int(float(m[1]) * _UNITS[m[2] or "s"] * 1e9)


def last_window(text: str, now_ns: int) -> tuple[int, int]:
    """``(now - duration, now)`` in ns for ``--last``."""
    return now_ns - parse_duration(text), now_ns


@dataclass(frozen=True)
class DrillWindow:
    """What ``--around REF`` resolved to.

    Attributes
    ----------
    ref : str
        The dedup key or finding id asked for.
    source : str
        ``alert`` or ``anomaly`` (or ``file`` for a recorded directory).
    job : str
    start_ns, end_ns : int
        The culprit's event-time span (ns since epoch), before padding.
    pad_ns : int
        Added on both sides for the read.
    ranks : tuple of int
        Culprit ranks (empty for a group culprit whose members are not listed).
    group_kind, group_id : str
    phase, kernel : str or None
    summary : str
    """

    ref: str
    source: str
    job: str
    start_ns: int
    end_ns: int
    pad_ns: int = 30 * 10**9
    ranks: tuple[int, ...] = ()
    group_kind: str = ""
    group_id: str = ""
    phase: str | None = None
    kernel: str | None = None
    summary: str = ""
    members: tuple[int, ...] = field(default=())
    """The culprit group's member ranks when known (alert ``details``), else empty."""

    @property
    def read_start_ns(self) -> int:
        return max(0, self.start_ns - self.pad_ns)

    @property
    def read_end_ns(self) -> int:
        return self.end_ns + self.pad_ns

    @property
    def culprit_ranks(self) -> tuple[int, ...]:
        """The ranks to look at first: the culprit's, else its group's members."""
        return self.ranks or self.members

    def describe(self) -> str:
        who = (
            f"ranks {','.join(map(str, self.ranks))}"
            if self.ranks
            else f"{self.group_kind} group {self.group_id}"
        )
        return (
            f"{self.source} {self.ref}: job {self.job}, {who}, {iso(self.start_ns)} .. "
            f"{iso(self.end_ns)} (read +-{self.pad_ns / 1e9:g} s)"
        )


def _ints(xs: Iterable[Any]) -> tuple[int, ...]:
    return tuple(sorted({int(x) for x in xs}))


def _members(details: Mapping[str, Any] | None) -> tuple[int, ...]:
    """Member ranks a renderer may have put in an alert's details (``members``/``group_ranks``:
    a comma list or JSON list); empty when absent."""
    if not details:
        return ()
    for k in ("members", "group_ranks", "member_ranks"):
        v = details.get(k)
        if v is None:
            continue
        if isinstance(v, list | tuple):
            return _ints(v)
        found = re.findall(r"\d+", str(v))
        if found:
            return _ints(found)
    return ()


def window_around(
    ref: str,
    alerts: Sequence[Mapping[str, Any]],
    anomalies: Sequence[Mapping[str, Any]] = (),
    *,
    pad_ns: int = 30 * 10**9,
) -> DrillWindow:
    """Resolve ``ref`` (a ``dedup_key`` or an anomaly ``id``) against records.

    An alert's window runs from its first ``first_seen_ns`` to its last ``last_seen_ns`` over
    every record with that key (trigger and resolve); an anomaly's is its
    ``window_start_ns..window_end_ns``. Alerts win when both match.

    Raises
    ------
    WindowError
        Nothing matches; the message lists some dedup keys that do exist.
    """
    ref = ref.strip()
    hits = [a for a in alerts if a.get("dedup_key") == ref]
    if hits:
        last = hits[-1]
        return DrillWindow(
            ref=ref,
            source="alert",
            job=str(last["job"]),
            start_ns=min(int(a["first_seen_ns"]) for a in hits),
            end_ns=max(int(a["last_seen_ns"]) for a in hits),
            pad_ns=pad_ns,
            ranks=_ints(last.get("ranks") or ()),
            group_kind=str(last.get("group_kind", "")),
            group_id=str(last.get("group_id", "")),
            phase=last.get("phase"),
            kernel=(list(last.get("kernels") or []) or [None])[0],
            summary=str(last.get("summary", "")),
            members=_members(last.get("details")),
        )
    found = [a for a in anomalies if a.get("id") == ref]
    if found:
        a = found[-1]
        return DrillWindow(
            ref=ref,
            source="anomaly",
            job=str(a["job"]),
            start_ns=int(a["window_start_ns"]),
            end_ns=int(a["window_end_ns"]),
            pad_ns=pad_ns,
            ranks=_ints(a.get("ranks") or ()),
            group_kind=str(a.get("group_kind", "")),
            group_id=str(a.get("group_id", "")),
            phase=a.get("phase"),
            kernel=a.get("kernel"),
            summary=f"{a.get('level')} {a.get('kind')}",
        )
    keys = sorted({str(a.get("dedup_key")) for a in alerts})
    hint = ("; dedup keys on the alerts topic: " + ", ".join(keys[-8:])) if keys else ""
    raise WindowError(
        f"--around {ref!r}: no alert with that dedup_key and no finding with that id "
        f"({len(alerts)} alerts, {len(anomalies)} anomalies read){hint}"
    )


@dataclass
class Extent:
    """What one job has on one topic (a fold over its records).

    ``first_ns``/``last_ns`` are event times (ns since epoch); ``last_step`` the newest step
    (step records) or window id; ``in_range``/``max_lag_ns`` describe the records that overlap
    a requested range: how many, and the longest delay from event end to Kafka timestamp.
    """

    records: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    last_step: int | None = None
    last_ts_ms: int | None = None
    """Kafka timestamp of the newest record (ms since epoch)."""
    in_range: int = 0
    max_lag_ns: int = 0
    ranks: set[int] = field(default_factory=set)

    def add(
        self, rec: Mapping[str, Any], ts_ms: int | None, tr: tuple[int, int] | None = None
    ) -> None:
        """Count one decoded record with its Kafka timestamp (ms); ``tr`` the asked range."""
        if "window_start_ns" in rec:
            lo, hi = int(rec["window_start_ns"]), int(rec["window_end_ns"])
        elif "start_ns" in rec:
            lo, hi = int(rec["start_ns"]), int(rec["end_ns"])
        else:
            lo = hi = int(rec.get("window_end_ns", rec.get("last_seen_ns", 0)))
        self.records += 1
        self.first_ns = lo if self.first_ns is None else min(self.first_ns, lo)
        self.last_ns = hi if self.last_ns is None else max(self.last_ns, hi)
        step = rec.get("step", rec.get("window_id"))
        if step is not None:
            self.last_step = int(step) if self.last_step is None else max(self.last_step, int(step))
        if ts_ms is not None:
            self.last_ts_ms = ts_ms if self.last_ts_ms is None else max(self.last_ts_ms, ts_ms)
        if "rank" in rec:
            self.ranks.add(int(rec["rank"]))
        if tr is not None and lo <= tr[1] and hi >= tr[0]:
            self.in_range += 1
            if ts_ms is not None:
                self.max_lag_ns = max(self.max_lag_ns, ts_ms * 10**6 - hi)

    def span(self) -> str:
        if self.first_ns is None or self.last_ns is None:
            return "no records"
        return f"{iso(self.first_ns)} .. {iso(self.last_ns)}"


def explain_empty(
    *,
    topic: str,
    job: str,
    start_ns: int,
    end_ns: int,
    exists: bool,
    extent: Extent | None,
    other_jobs: Sequence[str] = (),
    lag_ns: int | None = None,
    ranks: Sequence[int] | None = None,
    prefix_topics: Sequence[str] = (),
) -> str:
    """Why a read of ``job`` in ``[start_ns, end_ns]`` on ``topic`` found nothing.

    Names the cause: the **prefix** (topic missing, or the job only under another prefix),
    the **time range** (the job's records lie elsewhere; its range is given), the **lag
    limit** (``--max-lag`` cut records that are in range), or the ranks asked for.
    """
    asked = f"{iso(start_ns)} .. {iso(end_ns)}"
    if not exists:
        alt = f"; topics with that suffix: {', '.join(prefix_topics[:8])}" if prefix_topics else ""
        return f"prefix: topic {topic} does not exist (check --prefix / [topics] prefix){alt}"
    if extent is None or not extent.records:
        where = f"; the job is on: {', '.join(prefix_topics[:8])}" if prefix_topics else ""
        jobs = f"; jobs there: {', '.join(other_jobs[:10])}" if other_jobs else ""
        return f"job/prefix: no records of job {job!r} on {topic}{jobs}{where}"
    rng = f"job {job}'s records on {topic} span {extent.span()}"
    if extent.last_step is not None:
        rng += f" (up to step/window {extent.last_step}, {extent.records} records)"
    if ranks is not None and extent.ranks and not set(ranks) & extent.ranks:
        return (
            f"ranks: none of ranks {','.join(map(str, ranks))} on {topic}; ranks there: "
            f"{min(extent.ranks)}-{max(extent.ranks)}; {rng}"
        )
    if extent.in_range == 0:
        return f"time range: nothing of job {job} in {asked}; {rng}"
    if lag_ns is not None and extent.max_lag_ns > lag_ns:
        return (
            f"lag limit: {extent.in_range} records of job {job} overlap {asked} but were "
            f"produced up to {extent.max_lag_ns / 1e9:.1f} s after their event time, beyond "
            f"--max-lag {lag_ns / 1e9:g} s (raise it or drop it); {rng}"
        )
    return f"{extent.in_range} records of job {job} overlap {asked}, none kept; {rng}"
