"""``argus report``: one self-contained HTML page of a job's window."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from argus.cli import settings_from
from argus.commands._window import check_out, drill_window, window_options


@click.command()
@click.option("--job", default=None, help="the job (required with Kafka unless --around)")
@window_options
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
    around: str | None,
    from_file: str | None,
    out: str,
    window_steps: int,
    prefix: str | None,
    **window: Any,
) -> None:
    """Write one self-contained HTML report (inline SVG, no external assets): iteration time
    with L1 windows, a rank x step phase heatmap, the W1 matrix of a flagged kernel, CDFs of
    the straggler vs its peers, and the funnel.
    """
    from argus.detectors.config import DetectorsConfig
    from argus.report import report_from_dir, report_from_kafka

    check_out(out)
    s = settings_from(ctx)
    cfg = DetectorsConfig.from_settings(s.section("detectors"))
    if from_file:
        if window["t_from"] or window["t_to"] or window["last"]:
            raise click.UsageError(
                "--from-file reports the whole recording; drop --from/--to/--last"
            )
        # --around with files: the verdict or finding to lead with (no Kafka involved)
        page = report_from_dir(
            from_file, job=job, config=cfg, window_steps=window_steps, focus=around
        )
    else:
        dw = drill_window(s, job=job, prefix=prefix, around=around, **window)
        page = report_from_kafka(
            s,
            dw.job,
            dw.tr,
            config=cfg,
            window_steps=window_steps,
            prefix=prefix,
            lag_ns=dw.lag_ns,
            focus=around,  # the alert's verdict, or the one holding the finding (else a note)
        )
    Path(out).write_text(page)
    click.echo(f"report ({len(page) // 1024} KiB) -> {out}")
