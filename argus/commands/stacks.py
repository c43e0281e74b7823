"""``argus stacks``: the hottest collapsed stacks of one rank (L5 drill-down)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from argus.cli import settings_from
from argus.commands._window import check_out, drill_window, window_options


@click.command()
@click.option("--job", default=None, help="the job (default: --around's)")
@click.option("--rank", type=int, default=None, help="default with --around: the culprit's first")
@window_options
@click.option(
    "--vs",
    "vs",
    default=None,
    help="a peer rank to diff against (or 'auto': a peer of the culprit's group)",
)
@click.option("--thread", default=None, help="only threads whose name contains this")
@click.option(
    "--all-threads",
    is_flag=True,
    help="keep argus's own threads (collector, producer, control), hidden by default",
)
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
    job: str | None,
    rank: int | None,
    vs: str | None,
    thread: str | None,
    all_threads: bool,
    fmt: str,
    out: str | None,
    top: int,
    prefix: str | None,
    **window: Any,
) -> None:
    """The hottest collapsed Python stacks of a rank over a time range, from
    argus.summary.stacks (or argus.raw.stacks): text, folded (flamegraph.pl / inferno) or
    speedscope JSON (one profile per thread; open in speedscope.app). argus's own threads
    are hidden unless --all-threads; --vs diffs the rank against a peer (text: frames whose
    share changed most; folded: flamegraph.pl's differential input; speedscope: both ranks'
    profiles).
    """
    from argus.stacks_view import (
        select,
        stacks_from_kafka,
        threads,
        to_diff_folded,
        to_diff_text,
        to_folded,
        to_speedscope_multi,
        to_text,
    )

    check_out(out)
    s = settings_from(ctx)
    dw = drill_window(s, job=job, prefix=prefix, **window)
    tr, win, job, lag_ns = dw.tr, dw.win, dw.job, dw.lag_ns
    peer: int | None = None
    if rank is None or vs == "auto":
        if win is None:
            raise click.UsageError("--rank is required (unless --around names a culprit)")
        from argus.commands.trace import culprit_and_peers

        culprits, both = culprit_and_peers(s, win, tr, prefix=prefix, lag_ns=lag_ns, peers=1)
        rank = culprits[0] if rank is None else rank
        if vs == "auto":
            peer = next((r for r in both if r not in culprits), None)
            if peer is None:
                raise click.UsageError("--vs auto: no peer rank in the step records; give one")
    elif vs is not None:
        try:
            peer = int(vs)
        except ValueError as exc:
            raise click.BadParameter(f"{vs!r}: a rank or 'auto'", param_hint="--vs") from exc
    raw, source = stacks_from_kafka(s, job, rank, tr, prefix=prefix, lag_ns=lag_ns)
    counts = select(raw, own=all_threads, thread=thread)
    # argus's own samples among the threads the filter keeps
    hidden = sum(select(raw, own=True, thread=thread).values()) - sum(counts.values())
    name = f"{job} rank {rank}"
    if not counts:
        ths = ", ".join(f"{t} ({n})" for t, n, _own in threads(raw)[:10])
        raise click.UsageError(f"{name}: no samples left after the thread filter; threads: {ths}")
    peer_counts = None
    if peer is not None:
        raw_p, _src = stacks_from_kafka(s, job, peer, tr, prefix=prefix, lag_ns=lag_ns)
        peer_counts = select(raw_p, own=all_threads, thread=thread)
    if fmt == "text":
        head = f"{name} (from {source})"
        if hidden and not all_threads:
            share = 100 * hidden / max(sum(raw.values()), 1)
            head += (
                f"; {hidden} samples ({share:.0f}%) of argus's own threads hidden (--all-threads)"
            )
        ths = "threads: " + ", ".join(
            f"{t} {n}{' (argus)' if own else ''}" for t, n, own in threads(raw)[:8]
        )
        if peer_counts is not None:
            text = f"{head}\n{ths}\n\n" + to_diff_text(
                counts, peer_counts, names=(f"rank {rank}", f"rank {peer}"), top=top
            )
        else:
            text = f"{head}\n{ths}\n" + to_text(counts, top=top)
    elif fmt == "folded":
        text = to_diff_folded(counts, peer_counts) if peer_counts is not None else to_folded(counts)
    else:
        named = {name: counts}
        if peer_counts is not None:
            named[f"{job} rank {peer}"] = peer_counts
        text = json.dumps(to_speedscope_multi(named)) + "\n"
    if out:
        Path(out).write_text(text)
        click.echo(f"{sum(counts.values())} samples ({source}) -> {out}")
    else:
        click.echo(text, nl=False)
