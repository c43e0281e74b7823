"""``argus simulate``: a synthetic training job with injected faults and ground truth."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from argus.cli import settings_from


@click.command()
@click.argument("scenario", required=False)
@click.option("--list", "list_", is_flag=True, help="list the scenarios and exit")
@click.option("--ranks", type=int, default=None, help="world size (a layout is chosen; default 64)")
@click.option(
    "--layout", default=None, help='e.g. "dp=4,tp=2,pp=2,ep=4" (rank order tp-cp-ep-dp-pp)'
)
@click.option("--steps", type=int, default=200, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--job", default=None, help="job name (default sim-<scenario>)")
@click.option("--no-kernels", is_flag=True, help="step records only (no kernel batches)")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="write steps.avro, kernels.avro and truth.json here",
)
@click.option("--kafka", "to_kafka", is_flag=True, help="publish to Kafka instead of files")
@click.option(
    "--rate",
    "step_rate",
    type=float,
    default=None,
    help="steps per second when publishing (default: as fast as possible)",
)
@click.option("--prefix", default=None, help="topic prefix (default: settings topics.prefix)")
@click.pass_context
def simulate(
    ctx: click.Context,
    scenario: str | None,
    list_: bool,
    ranks: int | None,
    layout: str | None,
    steps: int,
    seed: int,
    job: str | None,
    no_kernels: bool,
    out_dir: str | None,
    to_kafka: bool,
    step_rate: float | None,
    prefix: str | None,
) -> None:
    """Simulate SCENARIO and write Avro files (--out DIR) or publish to Kafka (--kafka).

    Scenarios: healthy, compute-straggler (paper case 1), link-degradation (case 2),
    pp-stage-straggler (case 3), jit-stalls (case 4), masked-compute-straggler (case 5),
    thermal-throttle, noisy-neighbour.
    """
    from argus.sim import SimRun, publish, scenario_names, write_avro
    from argus.sim import simulate as sim

    if list_:
        for name in scenario_names():
            click.echo(name)
        return
    if not scenario:
        raise click.UsageError("give a SCENARIO (or --list)")
    if bool(out_dir) == to_kafka:
        raise click.UsageError("choose exactly one of --out DIR and --kafka")
    run = SimRun.make(
        scenario,
        ranks=ranks,
        layout=layout,
        steps=steps,
        seed=seed,
        job=job,
        kernels=not no_kernels,
    )
    click.echo(
        f"simulating {scenario}: {run.layout.world} ranks ({run.layout}), {steps} steps, "
        f"job {run.job}"
    )
    t0 = time.monotonic()
    span: list[int] = []

    def tracked() -> Any:
        """The records, noting the step records' event-time span (for the line below)."""
        for item in sim(run):
            if item[0] == "raw.steps":
                rec = item[2]
                span[:] = [
                    min(span[0], int(rec["start_ns"])) if span else int(rec["start_ns"]),
                    max(span[1], int(rec["end_ns"])) if span else int(rec["end_ns"]),
                ]
            yield item

    if out_dir:
        counts = write_avro(tracked(), out_dir, truth=run.truth_dict())
        for name, n in sorted(counts.items()):
            click.echo(f"  {n:>9d} records -> {out_dir}/{name}")
        click.echo(f"  ground truth -> {out_dir}/truth.json")
    else:
        s = settings_from(ctx)
        counts = publish(tracked(), s, prefix=prefix, step_rate=step_rate)
        for topic, n in sorted(counts.items()):
            click.echo(f"  {n:>9d} records -> {topic}")
        click.echo("  ground truth: " + json.dumps(run.truth_dict()))
    if span:
        from argus.drill.window import iso

        click.echo(
            f"  event time (the simulator's fixed epoch, not now): {iso(span[0])} .. "
            f"{iso(span[1])} ({span[0]} .. {span[1]} ns); drill down with --from "
            f"{iso(span[0])} --to {iso(span[1])}"
        )
    click.echo(f"done in {time.monotonic() - t0:.1f} s")
