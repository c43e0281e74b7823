"""``argus fidelity``: how faithful is the kernel-duration compression?

Without files: synthetic windows (``argus.streams.synth``) with injected slow ranks; per kernel
kind, the Spearman ρ of raw vs reconstructed pairwise W1 and the IQR detection F1 on both.
With Avro object-container files of ``kernel_batch`` records: per window (all ranks of a
``window_id``), the same comparison per kernel, without a ground truth.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

_METHODS = ("kde-p50p99", "kde-q4i", "kde-q7l")


def _configs(method: str) -> list[Any]:
    from argus.summaries.kde import config_for_method

    return [config_for_method(m) for m in (_METHODS if method == "all" else (method,))]


def _range(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition("-")
    try:
        a, b = float(lo), float(hi or lo)
    except ValueError:
        raise click.BadParameter(f"expected A-B (e.g. 1.5-3), got {text!r}") from None
    if not 0 < a <= b:
        raise click.BadParameter(f"need 0 < A <= B, got {text!r}")
    return a, b


@click.command()
@click.argument(
    "avro_files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--method",
    type=click.Choice([*_METHODS, "all"]),
    default="all",
    show_default=True,
    help="summary method(s) to check",
)
@click.option(
    "--ranks",
    type=click.IntRange(4, 4096),
    default=32,
    show_default=True,
    help="synthetic: ranks per window",
)
@click.option(
    "--windows",
    type=click.IntRange(1, 1000),
    default=2,
    show_default=True,
    help="synthetic: windows",
)
@click.option(
    "--events",
    type=click.IntRange(100, 10_000_000),
    default=30_000,
    show_default=True,
    help="synthetic: kernel events per rank-window",
)
@click.option(
    "--slow", "slow", default="1-3", show_default=True, help="synthetic: slow ranks per window, A-B"
)
@click.option(
    "--slow-factor",
    default="1.5-3",
    show_default=True,
    help="synthetic: slowdown factor range, A-B",
)
@click.option(
    "--rank-spread",
    type=click.FloatRange(0, 1),
    default=0.0,
    show_default=True,
    help="synthetic: sigma of a persistent per-rank speed factor (healthy GPUs differ by ~1-5%)",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--max-groups",
    type=click.IntRange(1),
    default=None,
    help="files: kernels checked per window (default all)",
)
@click.option(
    "--exact/--grid",
    default=True,
    show_default=True,
    help="exact raw W1 (slower) or the 512-point grid approximation",
)
def fidelity(
    avro_files: tuple[Path, ...],
    method: str,
    ranks: int,
    windows: int,
    events: int,
    slow: str,
    slow_factor: str,
    rank_spread: float,
    seed: int,
    max_groups: int | None,
    exact: bool,
) -> None:
    """Check that summaries rank and flag ranks as the raw kernel events do.

    Prints, per kernel kind (synthetic) or per kernel (files): Spearman rho of the raw vs
    reconstructed pairwise W1 matrices, and which ranks the IQR rule flags on each.
    """
    if avro_files:
        _files(avro_files, method, max_groups, exact)
        return
    from argus.streams.fidelity import evaluate_synthetic

    lo, hi = _range(slow)
    n_slow = (int(lo), int(hi))
    if n_slow[1] >= ranks:
        raise click.BadParameter(f"--slow {slow}: at most {ranks - 1} slow ranks of {ranks}")
    click.echo(
        f"synthetic: {ranks} ranks x {windows} windows x {events} events, {slow} slow ranks at "
        f"{slow_factor}x, rank spread {rank_spread:g}, seed {seed}, raw W1 {'exact' if exact else 'grid'}"
    )
    for cfg in _configs(method):
        rows = evaluate_synthetic(
            config=cfg,
            n_ranks=ranks,
            n_windows=windows,
            n_events=events,
            n_slow=n_slow,
            slow_factor=_range(slow_factor),
            seed=seed,
            exact_raw=exact,
            rank_spread=rank_spread,
        )
        click.echo(f"\n[{cfg.method}] levels {list(cfg.quantile_levels)}")
        click.echo(
            f"  {'kind':11s} {'groups':>6s} {'rho med':>8s} {'rho p10':>8s} {'raw F1':>7s} {'rec F1':>7s} {'agree':>6s}"
        )
        for r in rows:
            click.echo(
                f"  {r.kind:11s} {r.n_groups:6d} {r.spearman_median:8.3f} {r.spearman_p10:8.3f} "
                f"{r.raw_f1:7.3f} {r.recon_f1:7.3f} {r.flag_agreement:6.3f}"
            )


def _read_batches(paths: Iterable[Path]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    import fastavro

    from argus.errors import ArgusError

    windows: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for path in paths:
        with path.open("rb") as fh:
            try:
                reader = fastavro.reader(fh)
                for rec in reader:
                    if not isinstance(rec, dict) or "duration_ns" not in rec or "rank" not in rec:
                        raise click.UsageError(f"{path}: records are not kernel_batch records")
                    windows[(str(rec["job"]), int(rec["window_id"]))].append(rec)
            except (ValueError, EOFError, ArgusError) as exc:
                raise click.UsageError(
                    f"{path}: not a readable Avro container file ({exc})"
                ) from exc
    return windows


def _files(paths: tuple[Path, ...], method: str, max_groups: int | None, exact: bool) -> None:
    from argus.streams.fidelity import check_batches
    from argus.summaries.summary_record import BatchError, KernelNames

    windows = _read_batches(paths)
    if not windows:
        raise click.UsageError("no kernel_batch records in the given files")
    names = KernelNames()
    for recs in windows.values():
        for r in recs:
            names.update({"kernel_names": [{"id": _kid(n), "name": n} for n in r["names"]]})
    for cfg in _configs(method):
        click.echo(f"\n[{cfg.method}] levels {list(cfg.quantile_levels)}")
        for (job, wid), recs in sorted(windows.items()):
            recs = sorted(recs, key=lambda r: int(r["rank"]))
            try:
                rep = check_batches(recs, config=cfg, max_groups=max_groups, exact_raw=exact)
            except BatchError as exc:
                click.echo(f"  {job} window {wid}: skipped, bad batch ({exc})")
                continue
            if rep.n_groups == 0:
                click.echo(
                    f"  {job} window {wid}: {len(recs)} ranks, no kernel on >= 4 ranks with enough events"
                )
                continue
            click.echo(
                f"  {job} window {wid}: {len(recs)} ranks, {rep.n_groups} kernels, rho median "
                f"{rep.spearman_median:.3f} min {rep.spearman_min:.3f}, flag agreement {rep.flag_agreement:.3f}"
            )
            rank_ids = [int(r["rank"]) for r in recs]
            for (kid, stream), g in rep.groups:
                rf = [rank_ids[i] for i in g.raw_flags]
                cf = [rank_ids[i] for i in g.recon_flags]
                click.echo(
                    f"    {g.spearman:6.3f}  s{stream:<4d} raw {rf!s:14s} recon {cf!s:14s} {names.name(kid)[:70]}"
                )


def _kid(name: str) -> int:
    from argus.schemas.arrays import kernel_id

    return kernel_id(name)
