"""``argus diagnose PATH``: offline funnel over recorded Avro files."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from argus.cli import settings_from


@click.command()
@click.argument("path", type=click.Path(exists=True))
@click.option(
    "--window-steps", type=int, default=10, show_default=True, help="steps per L2/L3/funnel window"
)
@click.option("--job", default=None, help="the job to diagnose when the files hold several")
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="where to write the findings (default: PATH/findings.json, or PATH.findings.json)",
)
@click.option("--top", type=int, default=20, show_default=True, help="verdicts to print")
@click.pass_context
def diagnose(
    ctx: click.Context,
    path: str,
    window_steps: int,
    job: str | None,
    json_out: str | None,
    top: int,
) -> None:
    """Diagnose a recorded job: L1-L3 over Avro files of step records and kernel batches
    (or kernel summaries), then the funnel; prints it and writes JSON findings.
    """
    from argus.detectors.config import DetectorsConfig
    from argus.diagnose import diagnose_path

    s = settings_from(ctx)
    cfg = DetectorsConfig.from_settings(s.section("detectors"))
    res = diagnose_path(path, config=cfg, window_steps=window_steps, job=job)
    p = Path(path)
    out = (
        Path(json_out)
        if json_out
        else (p / "findings.json" if p.is_dir() else p.with_suffix(".findings.json"))
    )
    doc = res.to_json()
    truth_file = (p if p.is_dir() else p.parent) / "truth.json"
    evaluation = None
    if truth_file.is_file():
        from argus.sim.evaluate import evaluate

        truth = json.loads(truth_file.read_text())
        if truth.get("job") in (None, res.job):
            evaluation = evaluate(res, truth)
            doc["evaluation"] = {k: _num(v) for k, v in evaluation.to_dict().items()}
            doc["truth"] = truth
    out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    _print(res, evaluation, top)
    click.echo(f"findings -> {out}")


def _num(v: Any) -> Any:
    return None if isinstance(v, float) and math.isnan(v) else v


def _print(res: Any, evaluation: Any, top: int) -> None:
    from collections import Counter

    from rich.console import Console
    from rich.table import Table
    from rich.tree import Tree

    from argus.detectors.funnel import summary

    con = Console()
    tree = Tree(
        f"[bold]{res.job}[/]: steps {res.steps[0]}-{res.steps[1]}, "
        f"{len(res.windows)} windows of {res.window_steps} steps, inputs {res.inputs}"
    )
    by = Counter((f.level, f.kind) for f in res.findings)
    for level in ("L1", "L2", "L3"):
        kinds = {k: n for (lv, k), n in by.items() if lv == level}
        label = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "[green]silent[/]"
        tree.add(f"[bold]{level}[/]: {label}")
    tree.add(
        f"[bold]funnel[/]: {len(res.verdicts)} culprit(s), "
        f"{sum(1 for a in res.alerts if a['action'] == 'trigger')} alert trigger(s)"
    )
    con.print(tree)
    if res.verdicts:
        t = Table(show_lines=False)
        for col in ("levels", "culprit", "phase / kernels", "steps", "pers.", "conf."):
            t.add_column(col)
        for v in res.verdicts[:top]:
            c = v.culprit
            who = (
                f"ranks {','.join(map(str, c.ranks[:8]))}{'...' if len(c.ranks) > 8 else ''}"
                if c.ranks
                else f"{c.group_kind} {c.group_id}"
            )
            what = c.phase or ""
            if c.kernels:
                what += (" / " if what else "") + ", ".join(c.kernels[:2])
            t.add_row(
                "+".join(c.levels),
                who,
                what or c.kind,
                f"{c.window_start_step}-{c.window_end_step}",
                str(v.persistence),
                f"{v.confidence:.2f}",
            )
        con.print(t)
        # the lines that were paged, as on argus.alerts (with hosts); else the verdicts'
        paged = [a["summary"] for a in res.alerts if a["action"] == "trigger"]
        con.print("[bold]alerts[/]" if paged else "[bold]verdicts[/] (no alert)")
        for line in paged[: min(top, 5)] or [summary(v) for v in res.verdicts[: min(top, 5)]]:
            con.print("  " + line, markup=False, highlight=False, soft_wrap=True)
    if evaluation is not None:
        e = evaluation
        con.print(
            f"[bold]ground truth[/] {e.scenario}: found={e.found} by {list(e.found_by)}, "
            f"precision={e.precision:.2f} recall={e.recall:.2f}, what_ok={e.what_ok}, "
            f"delay={e.delay_steps} steps"
        )
