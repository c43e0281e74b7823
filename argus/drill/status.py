"""What ``argus status`` and ``argus jobs`` show (pure: records and offsets in, rows out).

* :func:`job_rows`: per job, its event-time range, newest step, ranks, how long ago its
  newest record reached Kafka, and its open alerts (the last action per ``dedup_key`` is a
  ``trigger``);
* :func:`role_rows`: per worker consumer group (``<prefix>-<roles>`` faust apps,
  ``<prefix>.pagerduty``), its roles, liveness (``up``: a stable group with members;
  ``down``: no members; else the group state) and lag in records and seconds per topic;
* :func:`render`: the terminal text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from argus.drill.window import Extent, iso

__all__ = ["JobRow", "RoleRow", "job_rows", "open_alerts", "render", "role_rows"]

_OURS = ("drill-", "replay-", "watch-")
"""Consumer groups of argus's own one-off readers (never workers)."""


@dataclass
class JobRow:
    """One job: its step records' extent and its open alerts."""

    job: str
    extent: Extent
    alerts: list[Mapping[str, Any]] = field(default_factory=list)

    def age_s(self, now_ms: int) -> float | None:
        """Seconds since the newest step record reached Kafka (None: unknown)."""
        t = self.extent.last_ts_ms
        return None if t is None else max(0.0, (now_ms - t) / 1000)


@dataclass
class RoleRow:
    """One worker consumer group."""

    group: str
    roles: tuple[str, ...]
    state: str
    members: int
    topics: dict[str, dict[str, Any]]

    @property
    def liveness(self) -> str:
        if self.members and self.state == "stable":
            return "up"
        if not self.members:
            return "down"
        return self.state

    @property
    def lag(self) -> int:
        return sum(int(t["lag"]) for t in self.topics.values())

    @property
    def lag_s(self) -> float | None:
        ages = [float(t["lag_s"]) for t in self.topics.values() if t.get("lag_s") is not None]
        return max(ages) if ages else (0.0 if self.topics else None)


def open_alerts(alerts: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Per job, the alerts whose last record (in topic order) is a ``trigger``."""
    last: dict[str, Mapping[str, Any]] = {}
    for a in alerts:
        last[str(a["dedup_key"])] = a
    out: dict[str, list[Mapping[str, Any]]] = {}
    for a in last.values():
        if a.get("action") == "trigger":
            out.setdefault(str(a["job"]), []).append(a)
    return out


def job_rows(
    steps: Iterable[tuple[Mapping[str, Any], int | None]],
    alerts: Iterable[Mapping[str, Any]] = (),
    *,
    job: str | None = None,
) -> list[JobRow]:
    """Rows from ``(step record, Kafka timestamp ms)`` pairs and alert records, newest job
    (by its last event) first; only ``job`` when given."""
    ext: dict[str, Extent] = {}
    for rec, ts in steps:
        j = str(rec["job"])
        if job is None or j == job:
            ext.setdefault(j, Extent()).add(rec, ts)
    opened = open_alerts(alerts)
    for j in opened:
        if job is None or j == job:
            ext.setdefault(j, Extent())
    rows = [JobRow(j, e, opened.get(j, [])) for j, e in ext.items()]
    rows.sort(key=lambda r: (-(r.extent.last_ns or 0), r.job))
    return rows


def role_rows(groups: Sequence[Mapping[str, Any]], prefix: str) -> list[RoleRow]:
    """Rows from :func:`argus.drill.read.group_lags`'s dicts; argus's one-off readers'
    groups (``<prefix>-drill-*``, ``-replay-*``, ``-watch-*``) are left out. A mixed worker's
    faust group (``<prefix>-compressor-l3``) is labelled with the roles it reads for: not the
    compressor when it reads no ``raw.kernels`` (the compressor's loop reads them in
    ``<prefix>-compressor``); the steps router's loop group (``<prefix>-steps-router``) is
    labelled ``steps-router``; a group with no offsets at all keeps its name's roles."""
    out = []
    for g in groups:
        gid = str(g["group"])
        rest = gid[len(prefix) + 1 :] if gid.startswith(prefix) else gid
        if rest.startswith(_OURS):
            continue
        if gid == f"{prefix}.pagerduty":
            roles: tuple[str, ...] = ("pagerduty",)
        elif rest == "steps-router":  # the steps router's loop (l1 and l2 workers)
            roles = ("steps-router",)
        else:
            roles = tuple(rest.split("-"))
        topics = g.get("topics") or {}
        if (
            len(roles) > 1
            and "compressor" in roles
            and topics
            and not any(t.endswith(".raw.kernels") for t in topics)
        ):  # a mixed faust app whose compressor reads in <prefix>-compressor (its loop)
            roles = tuple(r for r in roles if r != "compressor")
        out.append(
            RoleRow(gid, roles, str(g["state"]), int(g["members"]), dict(g.get("topics", {})))
        )
    return sorted(out, key=lambda r: r.group)


def _age(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def render(
    jobs: Sequence[JobRow],
    roles: Sequence[RoleRow] | None,
    *,
    now_ms: int,
    note: str = "",
) -> str:
    """The terminal text: a jobs table (and its open alerts), then a workers table."""
    lines = ["JOBS" + (f" ({note})" if note else "")]
    if not jobs:
        lines.append("  no step records")
    for r in jobs:
        e = r.extent
        step = "-" if e.last_step is None else str(e.last_step)
        lines.append(
            f"  {r.job}: {e.span()}; last step {step}; {len(e.ranks)} ranks; newest record "
            f"{_age(r.age_s(now_ms))} ago; {len(r.alerts)} open alert(s)"
        )
        for a in sorted(r.alerts, key=lambda a: -int(a.get("first_seen_ns", 0))):
            lines.append(
                f"    [{a.get('severity')}] since {iso(int(a['first_seen_ns']))}: "
                f"{a.get('summary', '')}"
            )
            lines.append(f"      argus report --around '{a['dedup_key']}'")
    if roles is not None:
        lines += ["", "WORKERS (consumer groups)"]
        if not roles:
            lines.append("  no worker consumer groups")
        for w in roles:
            lines.append(
                f"  {w.group} [{'+'.join(w.roles)}]: {w.liveness} ({w.state}, "
                f"{w.members} member(s)); lag {w.lag} records, {_age(w.lag_s)}"
            )
            for t, v in sorted(w.topics.items()):
                if v["lag"]:
                    lines.append(f"    {t}: {v['lag']} records behind, oldest {_age(v['lag_s'])}")
    return "\n".join(lines) + "\n"
