"""``argus ingest PATH``: PyTorch profiler (Kineto) traces -> recorded argus job (Avro or Kafka)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from argus.cli import settings_from

EXIT_PARTIAL = 3
"""Exit status when some files were skipped (the rest was still written); see --skip-bad."""


def _job_name(path: str) -> str:
    name = Path(path).resolve().name or "traces"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "traces"


@click.command()
@click.argument("path", type=click.Path(exists=True))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="write steps.avro, kernels.avro and ingest.json here (what argus diagnose reads)",
)
@click.option("--kafka", "to_kafka", is_flag=True, help="publish to the raw topics instead")
@click.option("--job", default=None, help="job name (default: the directory's name)")
@click.option(
    "--rank-from",
    type=click.Choice(["auto", "info", "name", "order"]),
    default="auto",
    show_default=True,
    help="where a file's rank comes from: distributedInfo, else the file name (auto); "
    "only one of them; or the sorted file order (one file per rank)",
)
@click.option(
    "--rank-pattern",
    default=r"rank[-_]?(\d+)",
    show_default=True,
    help="regex whose first group is the rank in a file name",
)
@click.option("--world-size", type=int, default=None, help="overrides distributedInfo.world_size")
@click.option("--layout", default=None, help='parallel layout, e.g. "dp=4,tp=2" (default: all dp)')
@click.option("--no-kernels", is_flag=True, help="step records only (no kernel batches)")
@click.option(
    "--skip-bad",
    is_flag=True,
    help=f"exit 0 when some files could not be read (default: exit {EXIT_PARTIAL}, "
    "after writing what could be)",
)
@click.option(
    "-j",
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="processes parsing files at once",
)
@click.option("--prefix", default=None, help="topic prefix with --kafka (default: settings')")
@click.pass_context
def ingest(
    ctx: click.Context,
    path: str,
    out_dir: str | None,
    to_kafka: bool,
    job: str | None,
    rank_from: str,
    rank_pattern: str,
    world_size: int | None,
    layout: str | None,
    no_kernels: bool,
    skip_bad: bool,
    workers: int,
    prefix: str | None,
) -> int:
    """Ingest the PyTorch profiler traces under PATH (.json / .json.gz, one or more per rank)
    as a recorded job: ProfilerStep#N -> step records with phases, GPU kernels (or CPU ops
    of a CPU-only trace) -> kernel batches per rank and step. Then `argus diagnose OUT`.

    A file that cannot be read is named with the reason and skipped; the others are written,
    and the exit status is 3 (0 with --skip-bad).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from argus.ingest import IngestOptions
    from argus.ingest import ingest as run_ingest
    from argus.ingest.kineto import RankTrace

    if bool(out_dir) == to_kafka:
        raise click.UsageError("choose exactly one of --out DIR and --kafka")
    opts = IngestOptions(
        job=job or _job_name(path),
        rank_from=rank_from,
        rank_pattern=rank_pattern,
        world_size=world_size,
        layout=layout,
        kernels=not no_kernels,
    )
    t0 = time.monotonic()
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), transient=True
    ) as bar:
        task: Any = None

        def on_file(f: Path, tr: RankTrace | None, total: int) -> None:
            nonlocal task
            if task is None:
                task = bar.add_task("reading traces", total=total)
            bar.update(task, advance=1, description=f"read {f.name[:40]}")

        res = run_ingest(path, opts, on_file=on_file, workers=workers)
    t_read = time.monotonic() - t0
    from argus.ranks import rank_ranges

    for s in res.skipped:
        click.secho(f"skipped {s}", fg="red", err=True)
    for w in res.warnings:
        click.secho(f"warning: {w}", fg="yellow", err=True)
    click.echo(
        f"read {len(res.traces)} of {res.files} trace files ({res.n_events:,} events, "
        f"{t_read:.1f} s): job {res.job}, world {res.world}, ranks {rank_ranges(res.ranks)}; "
        f"kernels from {'/'.join(res.kernel_sources)}"
    )
    if out_dir:
        from argus.sim import write_avro

        counts = write_avro(res.records(), out_dir)
        (Path(out_dir) / "ingest.json").write_text(json.dumps(res.summary(), indent=1) + "\n")
        for name, n in sorted(counts.items()):
            click.echo(f"  {n:>9d} records -> {out_dir}/{name}")
    else:
        from argus.sim import publish

        if not no_kernels:
            _check_sizes(res.traces)  # before anything is published
        counts = publish(_fits_a_message(res.records()), settings_from(ctx), prefix=prefix)
        for topic, n in sorted(counts.items()):
            click.echo(f"  {n:>9d} records -> {topic}")
    click.echo(f"done in {time.monotonic() - t0:.1f} s")
    if res.skipped:
        click.secho(
            f"skipped {len(res.skipped)} of {res.files} files (named above)",
            fg="red",
            err=True,
        )
        if not skip_bad:
            ctx.exit(EXIT_PARTIAL)
    return 0


MAX_MESSAGE_BYTES = 950_000
"""A kernel batch larger than this does not fit the producer's 1 MB message (``--kafka``)."""


def _check_sizes(traces: list[Any]) -> None:
    """Fail before publishing when a rank's step holds more kernels than one message carries
    (24 bytes an event; the names are checked as records are built)."""
    import numpy as np

    from argus.ingest.assemble import IngestError

    for tr in traces:
        if tr.k_step.size:
            steps, n = np.unique(tr.k_step, return_counts=True)
            i = int(n.argmax())
            if int(n[i]) * 24 > MAX_MESSAGE_BYTES:
                raise IngestError(
                    f"{tr.path}: rank {tr.rank} step {int(steps[i])} has {int(n[i]):,} kernel "
                    "events, more than one Kafka message carries; use --out DIR (argus "
                    "diagnose reads any size) or --no-kernels"
                )


def _fits_a_message(records: Iterator[tuple[str, str, dict[str, Any]]]) -> Iterator[Any]:
    """Pass records through; a kernel batch over one Kafka message is an error naming it
    (``--out`` files take any size; the collectors' part splitting is not used here yet)."""
    from argus.ingest.assemble import IngestError

    for item in records:
        rec = item[2]
        if item[0] == "raw.kernels":
            size = sum(len(rec[c]) for c in ("name_idx", "stream", "start_ns", "duration_ns"))
            size += sum(len(n) + 2 for n in rec["names"])
            if size > MAX_MESSAGE_BYTES:
                raise IngestError(
                    f"rank {rec['rank']} step {rec['window_id']}: {len(rec['duration_ns']) // 8:,} "
                    f"kernel events (~{size / 1e6:.1f} MB) do not fit one Kafka message; "
                    "use --out DIR (argus diagnose reads any size) or --no-kernels"
                )
        yield item
