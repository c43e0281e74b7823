"""``argus trace``: a Perfetto trace of some ranks' phases, kernels and stacks (L4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from argus.cli import settings_from
from argus.commands._window import check_out, drill_window, window_options


def parse_ranks(text: str) -> list[int]:
    """``"12,13"`` or ``"8-11,14"`` -> rank list.

    Raises
    ------
    click.BadParameter
        Not a comma list of integers or ranges.
    """
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                a, b = part.split("-", 1)
                if int(b) < int(a):
                    raise click.BadParameter(
                        f"{text!r}: range {part} is reversed (write {b}-{a})",
                        param_hint="--ranks",
                    )
                out.extend(range(int(a), int(b) + 1))
            else:
                out.append(int(part))
    except ValueError as exc:
        raise click.BadParameter(
            f"{text!r}: expected e.g. 12,13 or 8-11", param_hint="--ranks"
        ) from exc
    if not out or min(out) < 0:
        raise click.BadParameter(f"{text!r}: no ranks, or a negative rank", param_hint="--ranks")
    return sorted(set(out))


@click.command()
@click.option("--job", default=None, help="the job (default: --around's)")
@click.option(
    "--ranks",
    "ranks_text",
    default=None,
    help="e.g. 12,13 or 8-11 (default with --around: the culprit's ranks and two peers)",
)
@window_options
@click.option(
    "-o", "--out", "out", type=click.Path(dir_okay=False), default="out.pftrace", show_default=True
)
@click.option("--prefix", default=None, help="topic prefix (default: the settings')")
@click.pass_context
def trace(
    ctx: click.Context,
    job: str | None,
    ranks_text: str | None,
    out: str,
    prefix: str | None,
    **window: Any,
) -> None:
    """Write a Perfetto trace (open it in ui.perfetto.dev): one process per rank (culprit
    ranks marked CULPRIT), one track per stream with nested slices (steps, phases per stream
    kind, kernels per CUDA stream, CPU ops per thread, stack samples) and an iteration-time
    counter, on event time.
    """
    from argus.trace import trace_from_kafka

    check_out(out)
    ranks = parse_ranks(ranks_text) if ranks_text else None
    s = settings_from(ctx)
    dw = drill_window(s, job=job, prefix=prefix, **window)
    tr, win, job, lag_ns = dw.tr, dw.win, dw.job, dw.lag_ns
    culprits: list[int] = list(win.culprit_ranks) if win else []
    if ranks is None:
        if win is None:
            raise click.UsageError("--ranks is required (unless --around names a culprit)")
        culprits, ranks = culprit_and_peers(s, win, tr, prefix=prefix, lag_ns=lag_ns)
        click.echo(
            f"culprit ranks {','.join(map(str, culprits))}; peers "
            f"{','.join(str(r) for r in ranks if r not in culprits) or 'none'}",
            err=True,
        )
    marks = [(win.start_ns, win.end_ns, win.summary or win.ref)] if win else []
    data, stats = trace_from_kafka(
        s, job, ranks, tr, prefix=prefix, lag_ns=lag_ns, culprits=culprits, marks=marks
    )
    Path(out).write_bytes(data)
    for rk, d in stats.slices.items():
        mark = " (culprit)" if rk in culprits else ""
        click.echo(f"rank {rk}{mark}: " + ", ".join(f"{n} {k}" for k, n in d.items()))
    clipped = f", {stats.clipped} clipped to their parent" if stats.clipped else ""
    click.echo(
        f"{stats.total()} slices{clipped}, {len(data)} bytes -> {out} (open in ui.perfetto.dev)"
    )


def culprit_and_peers(
    settings: Any, win: Any, tr: Any, *, prefix: str | None, lag_ns: int | None, peers: int = 2
) -> tuple[list[int], list[int]]:
    """``(culprit ranks, culprit ranks + peers)`` for ``--around`` without ``--ranks``: the
    alert's ranks, else its group's members (from the step records' coords); peers are
    ranks of the same group (a rank culprit) or of other groups (a group culprit).

    Raises
    ------
    click.UsageError
        No ranks can be found for the culprit.
    """
    from argus.detectors.config import DetectorsConfig
    from argus.drill.read import group_members
    from argus.replay import read_range
    from argus.routing import Routing
    from argus.topics import topic_name

    pfx = settings.topic_prefix if prefix is None else prefix
    steps = read_range(settings, topic_name("raw.steps", pfx), tr, job=win.job, lag_ns=lag_ns)
    from argus.errors import ArgusError

    cfg = DetectorsConfig.from_settings(settings.section("detectors"))
    members = (
        group_members(steps, win.group_kind, win.group_id, Routing.from_config(cfg.routing))
        if win.group_kind and win.group_kind != "job"
        else []
    )
    culprits = list(win.ranks) or members
    if not culprits:
        raise click.UsageError(
            f"{win.ref}: no culprit ranks (and no members of {win.group_kind} "
            f"{win.group_id} in the step records); give --ranks"
        )
    routing = Routing.from_config(cfg.routing)
    gid: dict[int, str] = {}
    for rec in steps:
        try:
            gid.setdefault(int(rec["rank"]), routing.group_for_kind(rec["coords"], win.group_kind))
        except (ArgusError, KeyError, ValueError):
            continue

    def kin(r: int) -> int:
        """Characters the rank's group id shares with the culprit's (a sibling group)."""
        a, b = gid.get(r, ""), win.group_id
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    seen = sorted({int(r["rank"]) for r in steps})
    pool = [r for r in members if r not in culprits] if win.ranks else []
    pool += sorted(
        (r for r in seen if r not in culprits and r not in pool), key=lambda r: (-kin(r), r)
    )
    return culprits, sorted(set(culprits) | set(pool[:peers]))
