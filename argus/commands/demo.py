"""``argus demo``."""

from __future__ import annotations

from pathlib import Path

import click

from argus.cli import settings_from


@click.command()
@click.option(
    "--source",
    type=click.Choice(["training", "simulator"]),
    default="training",
    show_default=True,
    help="a real 4-process CPU DDP job with collectors, or the fault simulator",
)
@click.option(
    "--scenario",
    default="compute-straggler",
    show_default=True,
    help="fault to inject (argus simulate --list)",
)
@click.option(
    "--ranks", default=64, show_default=True, help="simulated GPUs, multiple of 16 (simulator)"
)
@click.option("--steps", default=120, show_default=True)
@click.option("--rate", default=4.0, show_default=True, help="steps per second (simulator)")
@click.option(
    "--out",
    "out",
    default="out/demo-findings.json",
    show_default=True,
    type=click.Path(dir_okay=False),
)
@click.option("--keep-topics", is_flag=True, help="keep the demo's topics for inspection")
@click.pass_context
def demo(
    ctx: click.Context,
    source: str,
    scenario: str,
    ranks: int,
    steps: int,
    rate: float,
    out: str,
    keep_topics: bool,
) -> None:
    """The main job end to end: broker, topics, workers, a faulty job, the live funnel.

    By default a real 4-process CPU DDP training job with the collectors on, rank 2's MLP
    slowed 3x; --source simulator runs a simulated --ranks job with a --scenario fault.

    Exits 0 when an alert names the injected culprit, 1 otherwise.
    """
    from argus.demo import run_demo

    res = run_demo(
        settings_from(ctx),
        source=source,
        scenario=scenario,
        ranks=ranks,
        steps=steps,
        rate=rate,
        out=Path(out),
        keep_topics=keep_topics,
    )
    ctx.exit(0 if res.found else 1)
