"""``argus status`` and ``argus jobs``: the overview page, in a terminal.

Jobs (time range, last step, open alerts) come from the tail of ``<prefix>.raw.steps`` and
all of ``<prefix>.alerts``; workers (liveness, lag in records and seconds) from the consumer
groups ``<prefix>-<roles>`` and ``<prefix>.pagerduty``. What is shown is decided in
:mod:`argus.drill.status`.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from argus.cli import settings_from


def _gather(
    ctx: click.Context, prefix: str | None, job: str | None, tail: int, workers: bool
) -> tuple[list[Any], list[Any] | None, str, int]:
    from argus.drill.read import DrillReadError, group_lags, read_topic, topic_exists
    from argus.drill.status import job_rows, role_rows
    from argus.topics import topic_name

    s = settings_from(ctx)
    pfx = s.topic_prefix if prefix is None else prefix
    t_steps, t_alerts = topic_name("raw.steps", pfx), topic_name("alerts", pfx)
    try:
        if not topic_exists(s, t_steps):
            raise click.UsageError(f"topic {t_steps} does not exist (check --prefix)")
        kp = f"{job}/" if job else None
        steps = [(r, ts) for _k, r, ts in read_topic(s, t_steps, key_prefix=kp, tail=tail)]
        alerts = [r for _k, r, _t in read_topic(s, t_alerts)] if topic_exists(s, t_alerts) else []
        roles = role_rows(group_lags(s, pfx), pfx) if workers else None
    except DrillReadError as exc:
        raise click.ClickException(str(exc)) from exc
    note = f"{t_steps}, the last {tail} records per partition"
    return job_rows(steps, alerts, job=job), roles, note, int(time.time() * 1000)


def _as_json(jobs: list[Any], roles: list[Any] | None, now_ms: int) -> str:
    doc: dict[str, Any] = {
        "jobs": [
            {
                "job": r.job,
                "first_ns": r.extent.first_ns,
                "last_ns": r.extent.last_ns,
                "last_step": r.extent.last_step,
                "ranks": len(r.extent.ranks),
                "newest_record_age_s": r.age_s(now_ms),
                "open_alerts": [
                    {k: a.get(k) for k in ("dedup_key", "severity", "summary", "first_seen_ns")}
                    for a in r.alerts
                ],
            }
            for r in jobs
        ]
    }
    if roles is not None:
        doc["workers"] = [
            {
                "group": w.group,
                "roles": list(w.roles),
                "liveness": w.liveness,
                "state": w.state,
                "members": w.members,
                "lag_records": w.lag,
                "lag_s": w.lag_s,
                "topics": w.topics,
            }
            for w in roles
        ]
    return json.dumps(doc, indent=1)


def _show(
    ctx: click.Context,
    prefix: str | None,
    job: str | None,
    tail: int,
    as_json: bool,
    *,
    workers: bool,
) -> None:
    """Print the jobs (and, with ``workers``, the worker roles) as text or JSON."""
    from argus.drill.status import render

    jobs, roles, note, now_ms = _gather(ctx, prefix, job, tail, workers)
    text = (
        _as_json(jobs, roles, now_ms) + "\n"
        if as_json
        else render(jobs, roles, now_ms=now_ms, note=note)
    )
    click.echo(text, nl=False)


_OPTS = [
    click.option("--prefix", default=None, help="topic prefix (default: the settings')"),
    click.option("--job", default=None, help="only this job"),
    click.option(
        "--tail",
        type=int,
        default=20000,
        show_default=True,
        help="step records read per partition, newest first",
    ),
    click.option("--json", "as_json", is_flag=True, help="JSON instead of text"),
]


def _with_opts(fn: Any) -> Any:
    for o in reversed(_OPTS):
        fn = o(fn)
    return fn


@click.command()
@_with_opts
@click.pass_context
def status(
    ctx: click.Context, prefix: str | None, job: str | None, tail: int, as_json: bool
) -> None:
    """Each job's time range, last step and open alerts; each worker role's liveness and
    lag in records and seconds (its consumer group's committed offsets)."""
    _show(ctx, prefix, job, tail, as_json, workers=True)


@click.command()
@_with_opts
@click.pass_context
def jobs(ctx: click.Context, prefix: str | None, job: str | None, tail: int, as_json: bool) -> None:
    """Each job's time range, last step and open alerts (``argus status`` without workers)."""
    _show(ctx, prefix, job, tail, as_json, workers=False)
