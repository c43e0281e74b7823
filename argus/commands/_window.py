"""Options shared by the drill-down commands (replay, trace, stacks, report): the time
window (``--from/--to``, ``--last``, ``--around``, ``--max-lag``) and the output path check
that runs before any work."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = ["Drill", "check_out", "drill_window", "resolve_window", "window_options"]

F = TypeVar("F", bound=Callable[..., Any])


def window_options(fn: F) -> F:
    """Add ``--from``, ``--to``, ``--last``, ``--around``, ``--pad`` and ``--max-lag``."""
    opts = [
        click.option(
            "--from", "t_from", default=None, help="event time: ISO 8601 or ns since epoch"
        ),
        click.option("--to", "t_to", default=None, help="event time: ISO 8601 or ns since epoch"),
        click.option("--last", default=None, help="the last DURATION up to now, e.g. 15m, 2h"),
        click.option(
            "--around",
            default=None,
            help="an alert's dedup_key or a finding's id: its job, window and culprit",
        ),
        click.option(
            "--pad", default="30s", show_default=True, help="with --around: time added each side"
        ),
        click.option(
            "--max-lag",
            type=float,
            default=None,
            help="seconds from event time to produce time at most (bounds the read; "
            "default: to the end)",
        ),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def resolve_window(
    settings: Any,
    *,
    t_from: str | None,
    t_to: str | None,
    last: str | None,
    around: str | None,
    pad: str = "30s",
    prefix: str | None = None,
    job: str | None = None,
) -> tuple[Any, Any]:
    """``(TimeRange, DrillWindow or None)`` from exactly one of ``--from/--to``, ``--last``
    and ``--around``.

    Raises
    ------
    click.UsageError
        None or several of them, a bad duration, or ``--job`` other than the alert's.
    """
    from argus.drill.window import WindowError, last_window, parse_duration
    from argus.replay import ReplayError, TimeRange

    given = [
        n for n, v in (("--from/--to", t_from or t_to), ("--last", last), ("--around", around)) if v
    ]
    if len(given) != 1:
        raise click.UsageError(
            "give one of --from T1 --to T2, --last DURATION (e.g. 15m) or --around "
            f"DEDUP_KEY|FINDING_ID (got {', '.join(given) or 'none'})"
        )
    try:
        if last:
            lo, hi = last_window(last, time.time_ns())
            return TimeRange(lo, hi), None
        if around:
            from argus.drill.read import find_around

            w = find_around(settings, around, prefix=prefix, pad_ns=parse_duration(pad))
            if job and job != w.job:
                raise click.UsageError(f"--job {job} but {around} is of job {w.job}")
            click.echo(w.describe(), err=True)
            return TimeRange(w.read_start_ns, w.read_end_ns), w
        if not (t_from and t_to):
            raise click.UsageError("--from needs --to (and --to needs --from)")
        return TimeRange.parse(t_from, t_to), None
    except (WindowError, ReplayError) as exc:
        raise click.UsageError(str(exc)) from exc


def check_out(path: str | None, *, param: str = "-o/--out") -> None:
    """Fail before any work when ``path`` cannot be written: its directory is missing or
    not writable, or it names a directory.

    Raises
    ------
    click.BadParameter
        Naming the path and what is wrong with it.
    """
    if not path:
        return
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise click.BadParameter(f"{path} is a directory; give a file name", param_hint=param)
    if not parent.is_dir():
        raise click.BadParameter(
            f"{path}: directory {parent} does not exist (create it first)", param_hint=param
        )
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise click.BadParameter(f"{path}: not writable", param_hint=param)


@dataclass(frozen=True)
class Drill:
    """A drill-down command's resolved window: range, ``--around`` window, job, lag (ns)."""

    tr: Any
    win: Any
    job: str
    lag_ns: int | None


def drill_window(
    settings: Any,
    *,
    job: str | None,
    prefix: str | None,
    t_from: str | None,
    t_to: str | None,
    last: str | None,
    around: str | None,
    pad: str,
    max_lag: float | None,
) -> Drill:
    """:func:`resolve_window` plus the job (``--job``, else the alert's) and ``--max-lag``
    in ns; the keyword arguments are :func:`window_options`'.

    Raises
    ------
    click.UsageError
        As :func:`resolve_window`, or no job.
    """
    tr, win = resolve_window(
        settings, t_from=t_from, t_to=t_to, last=last, around=around, pad=pad, prefix=prefix,
        job=job,
    )  # fmt: skip
    job = job or (win.job if win else None)
    if not job:
        raise click.UsageError("--job is required (unless --around names an alert)")
    return Drill(tr, win, job, None if max_lag is None else int(max_lag * 1e9))
