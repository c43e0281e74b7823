"""``argus report``: one self-contained HTML page of a job's window."""

from __future__ import annotations

from pathlib import Path

import click

from argus.cli import settings_from


@click.command()
@click.option("--job", default=None, help="the job (required with Kafka)")
@click.option("--from", "t_from", default=None, help="event time: ISO 8601 or ns since epoch")
@click.option("--to", "t_to", default=None, help="event time: ISO 8601 or ns since epoch")
@click.option(
    "--from-file",
    "from_file",
    type=click.Path(exists=True),
    default=None,
    help="a directory of Avro files (argus simulate --out DIR) instead of Kafka",
)
@click.option(
    "-o", "--out", "out", type=click.Path(dir_okay=False), default="report.html", show_default=True
)
@click.option("--window-steps", type=int, default=10, show_default=True)
@click.option("--prefix", default=None, help="topic prefix (default: the settings')")
@click.pass_context
def report(
    ctx: click.Context,
    job: str | None,
    t_from: str | None,
    t_to: str | None,
    from_file: str | None,
    out: str,
    window_steps: int,
    prefix: str | None,
) -> None:
    """Write one self-contained HTML report (inline SVG, no external assets): iteration time
    with L1 windows, a rank x step phase heatmap, the W1 matrix of a flagged kernel, CDFs of
    the straggler vs its peers, and the funnel.
    """
    from argus.detectors.config import DetectorsConfig
    from argus.report import report_from_dir, report_from_kafka

    s = settings_from(ctx)
    cfg = DetectorsConfig.from_settings(s.section("detectors"))
    if from_file:
        page = report_from_dir(from_file, job=job, config=cfg, window_steps=window_steps)
    else:
        if not (job and t_from and t_to):
            raise click.UsageError("--job, --from and --to are required unless --from-file")
        from argus.replay import TimeRange

        page = report_from_kafka(
            s,
            job,
            TimeRange.parse(t_from, t_to),
            config=cfg,
            window_steps=window_steps,
            prefix=prefix,
        )
    Path(out).write_text(page)
    click.echo(f"report ({len(page) // 1024} KiB) -> {out}")
