"""A funnel verdict and what it renders to: the ``anomaly`` record (level ``funnel``), the
``alert`` record (``alert.avsc``), its one-line summary and its details.

Pure functions, shared by the live funnel, ``argus diagnose``/``replay`` and the PagerDuty
sink. The summary starts with the culprit (``rank 7 (dp group pp0.tp1, host node0000)`` or
``ep group pp1.tp0.ep3 (ranks 54,62, hosts node0006,node0007)``), then what is slow, how much
slower than its peers and since when (ISO 8601 UTC), then job, levels, steps, persistence and
confidence. It is rendered from the alert record alone (:func:`alert_summary`), so a consumer
that learns the ranks' hosts later (:func:`with_hosts`) renders the same line with them.

``details`` (``map<string,string>`` on the wire) holds, besides ``kind``, ``levels`` and the
JSON list of ``findings``: ``culprit``, ``group``, ``members`` (JSON list of the culprit's
ranks: its own, or a faulty group's members), ``what``, ``slower`` (text) and ``ratio``
(observed / baseline), ``since`` and ``last_seen`` (ISO), ``steps``, ``victims`` (JSON list of
waiting ranks outside the culprit), ``hosts`` (JSON object rank -> host, when known) and the
drill-down commands ``cmd_report``, ``cmd_trace``, ``cmd_stacks``
(``argus report|trace|stacks --around <dedup_key>``).

This module is the one place that writes ``details`` and reads its JSON values back
(:func:`alert_members`, :func:`alert_hosts`); the PagerDuty sink
(:func:`argus.sinks.pagerduty.events.build_event`) reshapes them into the nested
``custom_details`` PagerDuty shows (objects and lists, no JSON inside strings) through these
readers. Two shapes on purpose: ``details`` is the Avro wire form every consumer of
``argus.alerts`` gets (``map<string,string>``), ``custom_details`` is PagerDuty's.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from argus.detectors.findings import Finding
from argus.detectors.funnel.join import Culprit, _waiting
from argus.ranks import rank_ranges

__all__ = [
    "DRILLDOWN",
    "MAX_IDS",
    "Verdict",
    "alert_hosts",
    "alert_members",
    "alert_summary",
    "drilldown_commands",
    "iso_utc",
    "members_of",
    "severity",
    "summary",
    "with_hosts",
]

MAX_IDS = 32
"""Most anomaly ids an alert carries."""

DRILLDOWN = ("report", "trace", "stacks")
"""The drill-down commands an alert names, ``details["cmd_<name>"]``."""


@dataclass(frozen=True)
class Verdict:
    """A culprit in one window with its persistence and confidence."""

    culprit: Culprit
    persistence: int
    confidence: float
    first_seen_ns: int

    @property
    def dedup_key(self) -> str:
        return self.culprit.dedup_key

    def to_anomaly(self, *, detected_ns: int | None = None) -> dict[str, Any]:
        """The ``anomaly`` record (level ``funnel``) of this verdict; deterministic id."""
        from argus.detectors.findings import to_anomaly

        c = self.culprit
        p = c.primary
        f = Finding(
            job=c.job,
            level="funnel",
            kind=p.kind,
            group_kind=c.group_kind,
            group_id=c.group_id,
            ranks=c.ranks,
            phase=c.phase,
            kernel=c.kernels[0] if c.kernels else None,
            stream=p.stream,
            window_start_step=c.window_start_step,
            window_end_step=c.window_end_step,
            window_start_ns=c.window_start_ns,
            window_end_ns=c.window_end_ns,
            score=p.score,
            threshold=p.threshold,
            baseline=p.baseline,
            observed=p.observed,
            unit=p.unit,
            evidence=_details(self),
        )
        return to_anomaly(
            f,
            detected_ns=c.window_end_ns if detected_ns is None else detected_ns,
            persistence=self.persistence,
            confidence=self.confidence,
        )

    def to_alert(self, action: str = "trigger") -> dict[str, Any]:
        """The ``alert`` record (``alert.avsc``) of this verdict."""
        c = self.culprit
        rec: dict[str, Any] = {
            "dedup_key": c.dedup_key,
            "action": action,
            "severity": severity(self),
            "summary": "",
            "job": c.job,
            "group_kind": c.group_kind,
            "group_id": c.group_id,
            "ranks": list(c.ranks),
            "phase": c.phase,
            "kernels": list(c.kernels),
            "levels": list(c.levels),
            "first_seen_ns": int(self.first_seen_ns),
            "last_seen_ns": int(c.window_end_ns),
            "persistence": int(self.persistence),
            "confidence": float(self.confidence),
            "anomaly_ids": [f.id for f in c.findings][:MAX_IDS],
            "details": _details(self),
        }
        rec["summary"] = alert_summary(rec)
        return rec


def severity(v: Verdict) -> str:
    if v.confidence >= 0.9 and len(v.culprit.levels) >= 2:
        return "critical"
    if v.confidence >= 0.7:
        return "error"
    return "warning"


def summary(v: Verdict) -> str:
    """One line a human reads first: the alert's summary (:func:`alert_summary`)."""
    return str(v.to_alert()["summary"])


def iso_utc(ns: int) -> str:
    """ns since the epoch -> ``2026-05-28T20:26:40Z`` (UTC, whole seconds)."""
    return datetime.fromtimestamp(int(ns) // 1_000_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def drilldown_commands(dedup_key: str) -> dict[str, str]:
    """Ready-to-paste commands that open the alert's window: ``report``, ``trace``,
    ``stacks`` -> ``argus <cmd> --around <dedup_key>`` (the key shell-quoted when needed)."""
    k = shlex.quote(dedup_key)
    return {c: f"argus {c} --around {k}" for c in DRILLDOWN}


def members_of(c: Culprit) -> tuple[int, ...]:
    """The culprit's ranks: its own, else the members of its faulty group (L3 group
    divergence names them in ``evidence.members``); () for the whole job."""
    if c.ranks:
        return tuple(sorted(c.ranks))
    out: set[int] = set()
    for f in c.findings:
        if (f.group_kind, f.group_id) == (c.group_kind, c.group_id) and "members" in f.evidence:
            try:
                out.update(int(r) for r in json.loads(f.evidence["members"]))
            except (TypeError, ValueError):
                continue
    return tuple(sorted(out))


def alert_members(alert: Mapping[str, Any]) -> list[int]:
    """The ranks an alert names: ``details.members`` (the culprit's ranks, or its faulty
    group's), else the alert's ``ranks``."""
    details = alert.get("details") or {}
    return _json_list(details.get("members")) or [int(r) for r in alert.get("ranks") or ()]


def alert_hosts(alert: Mapping[str, Any]) -> dict[int, str]:
    """``details.hosts`` of an alert as rank -> host ({} without one, or when it does not
    parse)."""
    text = (alert.get("details") or {}).get("hosts")
    if not text:
        return {}
    try:
        return {int(k): str(v) for k, v in json.loads(text).items()}
    except (AttributeError, TypeError, ValueError):
        return {}


def with_hosts(alert: Mapping[str, Any], hosts: Mapping[int, str]) -> dict[str, Any]:
    """The alert with its members' hosts (``hosts``: rank -> host, e.g. from the job's
    topology on ``argus.jobs``) in ``details.hosts`` and the summary rendered anew; ranks
    without a host are left out, and an alert whose details already name hosts keeps them."""
    details = dict(alert.get("details") or {})
    members = alert_members(alert)
    known = {r: hosts[r] for r in members if hosts.get(r)}
    out = {**alert, "details": details}
    if known and "hosts" not in details:
        details["hosts"] = json.dumps({str(r): h for r, h in sorted(known.items())})
        resolved = str(alert.get("summary", "")).startswith("resolved: ")
        out["summary"] = ("resolved: " if resolved else "") + alert_summary(out)
    return out


def alert_summary(rec: Mapping[str, Any]) -> str:
    """The one-line summary of an alert record, from its fields and ``details``:

    ``rank 7 (dp group pp0.tp1, host node0000): straggler in mlp, 1.38x its dp peers, since
    2026-05-28T20:26:40Z; job J [L1+L2]; steps 40-49; persistence 3, confidence 0.93``
    """
    d = rec.get("details") or {}
    members = _json_list(d.get("members"))
    hosts = _host_list(alert_hosts(rec), members)
    gk, gid = rec.get("group_kind", ""), rec.get("group_id", "")
    ranks = list(rec.get("ranks") or ())
    host_txt = ""
    if hosts:
        host_txt = ("host " if len(hosts) == 1 else "hosts ") + _cap(hosts, 8, "hosts")
    head = _culprit_text(ranks, gk, gid)
    if ranks:
        ctx = [f"{gk} group {gid}"] if gk and gk != "job" else []
    elif gk and gk != "job" and members:
        ctx = [_culprit_text(members, "", "")]
    else:
        ctx = []
    if host_txt:
        ctx.append(host_txt)
    who = head + (f" ({', '.join(ctx)})" if ctx else "")
    what = d.get("what") or d.get("kind") or "slow"
    slower = d.get("slower", "")
    since = d.get("since") or iso_utc(int(rec.get("first_seen_ns", 0)))
    levels = "+".join(rec.get("levels") or ())
    return (
        f"{who}: {what}{', ' + slower if slower else ''}, since {since}; job {rec.get('job')}"
        f" [{levels}]; steps {d.get('steps', '?')}; persistence {rec.get('persistence', 1)},"
        f" confidence {float(rec.get('confidence', 0.0)):.2f}"
    )


def _culprit_text(ranks: Sequence[int], gk: str, gid: str) -> str:
    """``rank 7``, ``ranks 3-5``, ``ep group pp1.tp0.ep3`` or ``the whole job``."""
    if ranks:
        return f"{'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(ranks, sep=',', most=16)}"
    return f"{gk} group {gid}" if gk and gk != "job" else "the whole job"


def _json_list(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        return [int(r) for r in json.loads(text)]
    except (TypeError, ValueError):
        return []


def _host_list(by_rank: Mapping[int, str], members: Sequence[int]) -> list[str]:
    """Distinct hosts of ``details.hosts`` (``by_rank``) in the members' order."""
    order = [r for r in members if r in by_rank] or sorted(by_rank)
    return list(dict.fromkeys(by_rank[r] for r in order if by_rank[r]))


def _cap(items: Sequence[str], n: int, what: str) -> str:
    return ",".join(items[:n]) + (f",... ({len(items)} {what})" if len(items) > n else "")


def _what_and_slower(c: Culprit) -> tuple[str, str, float | None]:
    """(what is slow, how much slower than whom, observed/baseline or None)."""
    p = c.primary
    late = p.evidence.get("role") == "late_arrival" and c.phase == p.phase
    kernel = c.kernels[0] if c.kernels else p.kernel
    what = {
        "straggler": f"late into {c.phase} (peers waited)" if late else f"straggler in {c.phase}",
        "kernel_divergence": f"kernel {kernel} diverged",
        "group_divergence": f"collective/kernel {p.kernel or c.phase} slow for the whole group",
        "regression": f"iteration time regressed {p.baseline:.1f} -> {p.observed:.1f} ms",
        "jitter": f"iteration-time spikes {p.observed:.1f} ms vs {p.baseline:.1f} ms",
    }.get(p.kind, p.kind)
    if c.ranks:
        peers = f"its {p.group_kind} peers" if p.group_kind != "job" else "the job's ranks"
    elif c.group_kind != "job":
        peers = f"the other {c.group_kind} groups"
    else:
        peers = "its own baseline"
    ratio = p.observed / p.baseline if p.baseline > 0 else None
    if late and p.baseline > p.observed:
        return what, f"{p.baseline - p.observed:.1f} {p.unit} later than {peers}", ratio
    if ratio is not None and ratio > 1.0 and p.kind != "missing_rank":
        return what, f"{ratio:.2f}x {peers}", ratio
    return what, "", ratio


def _details(v: Verdict) -> dict[str, str]:
    c = v.culprit
    members = members_of(c)
    what, slower, ratio = _what_and_slower(c)
    d: dict[str, str] = {
        "kind": c.kind,
        "levels": ",".join(c.levels),
        "culprit": _culprit_text(c.ranks, c.group_kind, c.group_id),
        "group": f"{c.primary.group_kind}/{c.primary.group_id}"
        if c.ranks
        else f"{c.group_kind}/{c.group_id}",
        "members": json.dumps(list(members[:256])),
        "what": what,
        "slower": slower,
        "since": iso_utc(v.first_seen_ns),
        "last_seen": iso_utc(c.window_end_ns),
        "steps": f"{c.window_start_step}-{c.window_end_step}",
        **{f"cmd_{k}": cmd for k, cmd in drilldown_commands(c.dedup_key).items()},
        "findings": json.dumps(
            [
                {
                    "level": f.level,
                    "kind": f.kind,
                    "group": f"{f.group_kind}/{f.group_id}",
                    "phase": f.phase,
                    "kernel": f.kernel,
                    "ranks": list(f.ranks[:32]),
                    "score": round(f.score, 4),
                    "threshold": round(f.threshold, 4),
                    "baseline": round(f.baseline, 4),
                    "observed": round(f.observed, 4),
                    "unit": f.unit,
                    "role": f.evidence.get("role"),
                }
                for f in c.findings[:16]
            ]
        ),
    }
    if ratio is not None:
        d["ratio"] = f"{ratio:.3f}"
    named = {r for f in c.findings for r in _json_list(f.evidence.get("victims"))}
    waited = {r for f in c.findings if _waiting(f) for r in f.ranks}  # late into collectives
    victims = sorted((named | waited) - set(c.ranks) - set(members))  # never the culprit
    if victims:
        d["victims"] = json.dumps(victims[:64])
    return d
