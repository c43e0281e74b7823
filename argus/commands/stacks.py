"""``argus stacks``: the hottest collapsed stacks of one rank (L5 drill-down)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from argus.cli import settings_from


@click.command()
@click.option("--job", required=True)
@click.option("--rank", type=int, required=True)
@click.option("--from", "t_from", required=True, help="event time: ISO 8601 or ns since epoch")
@click.option("--to", "t_to", required=True, help="event time: ISO 8601 or ns since epoch")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "speedscope", "folded"]),
    default="text",
    show_default=True,
)
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    default=None,
    help="write here instead of stdout",
)
@click.option("--top", type=int, default=20, show_default=True)
@click.option("--prefix", default=None, help="topic prefix (default: the settings')")
@click.pass_context
def stacks(
    ctx: click.Context,
    job: str,
    rank: int,
    t_from: str,
    t_to: str,
    fmt: str,
    out: str | None,
    top: int,
    prefix: str | None,
) -> None:
    """The hottest collapsed Python stacks of a rank over a time range, from
    argus.summary.stacks (or argus.raw.stacks): text, folded (flamegraph.pl / inferno) or
    speedscope JSON (open in speedscope.app).
    """
    from argus.replay import TimeRange
    from argus.stacks_view import stacks_from_kafka, to_folded, to_speedscope, to_text

    s = settings_from(ctx)
    counts, source = stacks_from_kafka(s, job, rank, TimeRange.parse(t_from, t_to), prefix=prefix)
    if fmt == "text":
        text = f"{job} rank {rank} (from {source})\n" + to_text(counts, top=top)
    elif fmt == "folded":
        text = to_folded(counts)
    else:
        text = json.dumps(to_speedscope(counts, name=f"{job} rank {rank}")) + "\n"
    if out:
        Path(out).write_text(text)
        click.echo(f"{sum(counts.values())} samples ({source}) -> {out}")
    else:
        click.echo(text, nl=False)
