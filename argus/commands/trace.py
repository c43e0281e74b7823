"""``argus trace``: a Perfetto trace of some ranks' phases, kernels and stacks (L4)."""

from __future__ import annotations

from pathlib import Path

import click

from argus.cli import settings_from


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
@click.option("--job", required=True)
@click.option("--ranks", "ranks_text", required=True, help="e.g. 12,13 or 8-11")
@click.option("--from", "t_from", required=True, help="event time: ISO 8601 or ns since epoch")
@click.option("--to", "t_to", required=True, help="event time: ISO 8601 or ns since epoch")
@click.option(
    "-o", "--out", "out", type=click.Path(dir_okay=False), default="out.pftrace", show_default=True
)
@click.option("--prefix", default=None, help="topic prefix (default: the settings')")
@click.pass_context
def trace(
    ctx: click.Context,
    job: str,
    ranks_text: str,
    t_from: str,
    t_to: str,
    out: str,
    prefix: str | None,
) -> None:
    """Write a Perfetto trace (open it in ui.perfetto.dev): one track per rank, child tracks
    for step phases per stream kind, kernels per CUDA stream (while raw kernels are retained)
    and stack samples, on event time.
    """
    from argus.replay import TimeRange
    from argus.trace import trace_from_kafka

    s = settings_from(ctx)
    ranks = parse_ranks(ranks_text)
    data, stats = trace_from_kafka(s, job, ranks, TimeRange.parse(t_from, t_to), prefix=prefix)
    Path(out).write_bytes(data)
    for rk, d in stats.slices.items():
        click.echo(f"rank {rk}: " + ", ".join(f"{n} {k}" for k, n in d.items()))
    click.echo(f"{stats.total()} slices, {len(data)} bytes -> {out} (open in ui.perfetto.dev)")
