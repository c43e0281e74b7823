"""``argus replay``: re-run compression, L1-L3 and the funnel over a window read from Kafka."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from argus.cli import settings_from
from argus.commands._window import check_out, drill_window, window_options


@click.command()
@click.option("--job", default=None, help="the job to replay (default: --around's)")
@window_options
@click.option(
    "--config",
    "thresholds",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="TOML file with a [detectors] section (other thresholds than the settings')",
)
@click.option("--window-steps", type=int, default=10, show_default=True)
@click.option("-o", "--out", "out", type=click.Path(dir_okay=False), default=None)
@click.option("--publish-topic", default=None, help="also produce the findings to this topic")
@click.option("--prefix", default=None, help="topic prefix (default: the settings')")
@click.option("--top", type=int, default=20, show_default=True, help="verdicts to print")
@click.pass_context
def replay(
    ctx: click.Context,
    job: str | None,
    thresholds: str | None,
    window_steps: int,
    out: str | None,
    publish_topic: str | None,
    prefix: str | None,
    top: int,
    **window: Any,
) -> None:
    """Replay a job's historical window: find the offsets for the event times on the raw
    (or summary) topics, re-run the diagnosis with the same code as `argus diagnose`, print
    the funnel and write JSON.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from argus.commands.diagnose import _print
    from argus.detectors.config import DetectorsConfig
    from argus.replay import publish_findings
    from argus.replay import replay as run_replay

    check_out(out)
    s = settings_from(ctx)
    dw = drill_window(s, job=job, prefix=prefix, **window)
    tr, job = dw.tr, dw.job
    section: Any = s.section("detectors")
    if thresholds:
        import tomllib

        try:
            section = tomllib.loads(Path(thresholds).read_text()).get("detectors", {})
        except tomllib.TOMLDecodeError as exc:
            raise click.UsageError(f"{thresholds}: not valid TOML ({exc})") from exc
    cfg = DetectorsConfig.from_settings(section)
    if publish_topic:
        from argus.topics import topic_name

        pfx = s.topic_prefix if prefix is None else prefix
        live = {topic_name(x, p) for x in ("anomalies", "alerts") for p in (pfx, s.topic_prefix)}
        if publish_topic in live:
            raise click.UsageError(
                f"--publish-topic {publish_topic} is a live topic; publish replays elsewhere"
            )
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), transient=True
    ) as bar:
        tasks: dict[str, Any] = {}

        def on_progress(topic: str, done: int, total: int) -> None:
            if topic not in tasks:
                tasks[topic] = bar.add_task(topic, total=total or 1)
            bar.update(tasks[topic], completed=done if total else 1)

        res = run_replay(
            s, job, tr, config=cfg, window_steps=window_steps, prefix=prefix,
            on_progress=on_progress, lag_ns=dw.lag_ns,
        )  # fmt: skip
    _print(res.result, None, top)
    click.echo(f"kernels from {res.kernel_source}; read {res.read}")
    for where in res.skipped[:10]:
        click.secho(f"skipped undecodable record {where}", fg="yellow", err=True)
    path = Path(out) if out else Path(f"replay-{job}-{tr.start_ns}-{tr.end_ns}.json")
    path.write_text(json.dumps(res.to_json(), indent=1, default=str) + "\n")
    click.echo(f"findings -> {path}")
    if publish_topic:
        n = publish_findings(s, res.result, publish_topic)
        click.echo(f"published {n} anomaly records -> {publish_topic}")
