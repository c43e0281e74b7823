"""A directory of Kineto trace files -> one job's step records and kernel batches.

:func:`ingest` reads every ``*.json``/``*.json.gz`` under a path (one or more files per rank),
resolves each file's rank and the world size, aligns relative clocks, and returns an
:class:`IngestResult` whose :meth:`~IngestResult.records` yields ``(topic suffix, key,
record)`` in event-time order (per step: every rank's ``step_record``, then their
``kernel_batch``) - what :func:`argus.sim.write_avro` and :func:`argus.sim.publish` take.

A file that cannot be read is a :class:`Skipped` entry with the reason (the other files are
still read); only when no file is left does :func:`ingest` raise :class:`IngestError`.

Rank of a file (``rank_from``): ``auto`` takes ``distributedInfo.rank``, else the first group
of ``rank_pattern`` in the file name, else rank 0 when it is the only file, else the file is
skipped; ``info`` and ``name`` use only one of them; ``order`` numbers the readable files in
sorted name order (one file per rank). World size: ``world_size`` when given, else the largest
``distributedInfo.world_size``, else the highest rank + 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from argus.errors import ArgusError
from argus.ingest.kineto import RankTrace, StepSpan, TraceError, group_by_step, read_kineto
from argus.sim.simulate import offline_collector

__all__ = [
    "RANK_FROM",
    "T0_NS",
    "IngestError",
    "IngestOptions",
    "IngestResult",
    "Skipped",
    "find_traces",
    "ingest",
]

RANK_FROM = ("auto", "info", "name", "order")
T0_NS = 1_780_000_000_000_000_000
"""Where a job whose every file has a relative clock starts (the simulator's fixed epoch)."""
_DIMS = ("dp", "tp", "pp", "ep", "cp")


class IngestError(ArgusError, ValueError):
    """Nothing could be ingested, or the options contradict the traces."""


@dataclass(frozen=True)
class IngestOptions:
    """How to ingest.

    Attributes
    ----------
    job : str
        Job name of the records (no ``/``).
    rank_from : str
        ``auto`` | ``info`` | ``name`` | ``order`` (module doc).
    rank_pattern : str
        Regex whose first group is the rank in a file name (searched, case-insensitive).
    world_size : int, optional
        Overrides ``distributedInfo.world_size``.
    layout : str, optional
        ``"dp=4,tp=2"``: the parallel layout (its world must be the world size); default
        data parallel only (``dp_size`` = world).
    kernels : bool
        Write kernel batches (False: step records only).
    max_phases : int
        Most phases per step record.
    """

    job: str
    rank_from: str = "auto"
    rank_pattern: str = r"rank[-_]?(\d+)"
    world_size: int | None = None
    layout: str | None = None
    kernels: bool = True
    max_phases: int = 64

    def __post_init__(self) -> None:
        if not self.job or "/" in self.job:
            raise IngestError(f"job name {self.job!r}: must be non-empty, without '/'")
        if self.rank_from not in RANK_FROM:
            raise IngestError(f"rank_from {self.rank_from!r}: one of {', '.join(RANK_FROM)}")
        try:
            rx = re.compile(self.rank_pattern)
        except re.error as exc:
            raise IngestError(f"rank pattern {self.rank_pattern!r}: {exc}") from exc
        if rx.groups < 1:
            raise IngestError(f"rank pattern {self.rank_pattern!r} has no group for the rank")
        if self.world_size is not None and self.world_size < 1:
            raise IngestError(f"world size must be >= 1, got {self.world_size}")


@dataclass(frozen=True)
class Skipped:
    """A file that was not ingested, and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class IngestResult:
    """The ingested job.

    Attributes
    ----------
    job : str
    world : int
    traces : list of RankTrace
        The files read, ``rank`` resolved, clocks aligned.
    skipped : list of Skipped
    warnings : list of str
    files : int
        Trace files found.
    """

    job: str
    world: int
    traces: list[RankTrace]
    skipped: list[Skipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    files: int = 0
    coords: dict[int, dict[str, int]] = field(default_factory=dict)
    kernels: bool = True
    _plan: list[tuple[RankTrace, StepSpan]] = field(default_factory=list, repr=False)

    @property
    def ranks(self) -> list[int]:
        return sorted({int(t.rank) for t in self.traces if t.rank is not None})

    @property
    def n_events(self) -> int:
        """Trace events in the files read."""
        return sum(t.n_events for t in self.traces)

    @property
    def n_steps(self) -> int:
        """Step records (rank x step)."""
        return len(self._plan)

    @property
    def n_kernels(self) -> int:
        """Kernel (or CPU op) events inside steps, before deduplication of repeated steps."""
        return int(sum(t.k_step.size for t in self.traces)) if self.kernels else 0

    @property
    def kernel_sources(self) -> list[str]:
        return sorted({t.kernel_source for t in self.traces})

    def summary(self) -> dict[str, Any]:
        """JSON-able account of the ingest (written as ``ingest.json`` beside the Avro)."""
        return {
            "job": self.job,
            "world": self.world,
            "ranks": self.ranks,
            "files": self.files,
            "read": [
                {
                    "path": str(t.path),
                    "rank": t.rank,
                    "steps": len(t.steps),
                    "kernels": int(t.k_step.size),
                    "kernel_source": t.kernel_source,
                    "events": t.n_events,
                }
                for t in self.traces
            ],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "warnings": list(self.warnings),
            "step_records": self.n_steps,
            "events": self.n_events,
        }

    def records(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """``(topic suffix, "job/rank", record)`` step by step: the steps, then the batches."""
        slices = {id(t): group_by_step(t) for t in self.traces}
        by_step: dict[int, list[tuple[RankTrace, StepSpan]]] = {}
        for tr, sp in self._plan:
            by_step.setdefault(sp.step, []).append((tr, sp))
        for step in sorted(by_step):
            rows = sorted(by_step[step], key=lambda x: int(x[0].rank or 0))
            batches: list[tuple[str, dict[str, Any]]] = []
            for tr, sp in rows:
                rank = int(tr.rank or 0)
                key = f"{self.job}/{rank}"
                sl = slices[id(tr)].get(step) if self.kernels else None
                if sl is not None:
                    batches.append((key, self._batch(tr, sp, sl)))
                yield "raw.steps", key, self._step(tr, sp, sl is not None)
            for key, b in batches:
                yield "raw.kernels", key, b

    def _step(self, tr: RankTrace, sp: StepSpan, kernels: bool) -> dict[str, Any]:
        rank = int(tr.rank or 0)
        return {
            "job": self.job,
            "rank": rank,
            "step": sp.step,
            "start_ns": sp.start_ns,
            "end_ns": sp.end_ns,
            "host": tr.host,
            "coords": self.coords[rank],
            "phases": [
                {
                    "name": p.name,
                    "stream_kind": p.stream_kind,
                    "start_ns": p.start_ns,
                    "duration_ns": p.duration_ns,
                    "timer": p.timer,
                }
                for p in sorted(tr.phases.get(sp.step, []), key=lambda p: (p.start_ns, p.name))
            ],
            "collector": offline_collector(kernels),
        }

    def _batch(self, tr: RankTrace, sp: StepSpan, sl: slice) -> dict[str, Any]:
        from argus.schemas.arrays import pack

        rank = int(tr.rank or 0)
        u, inv = np.unique(tr.k_name[sl], return_inverse=True)
        start, dur, stream = tr.k_start[sl], tr.k_dur[sl], tr.k_stream[sl]
        end = max(sp.end_ns, int((start + np.maximum(dur, 0)).max()))
        return {
            "job": self.job,
            "rank": rank,
            "window_id": sp.step,
            "window_start_ns": min(sp.start_ns, int(start.min())),
            "window_end_ns": end,
            "host": tr.host,
            "coords": self.coords[rank],
            "source": tr.kernel_source,
            "names": [tr.names[int(i)] for i in u],
            "name_idx": pack(inv, "uint32"),
            "stream": pack(stream, "uint32"),
            "start_ns": pack(start, "int64"),
            "duration_ns": pack(dur, "int64"),
            "streams": [
                {
                    "id": int(s),
                    "kind": tr.stream_kind.get(int(s), "unknown"),
                    "label": "thread" if tr.kernel_source == "cpu_ops" else "",
                }
                for s in np.unique(stream).tolist()
            ],
            "dropped": 0,
        }


def find_traces(path: str | Path) -> list[Path]:
    """Trace files under ``path`` (itself when a file): ``*.json`` and ``*.json.gz``, sorted,
    recursively, hidden files and argus's own outputs (``*findings.json``, ``ingest.json``,
    ``truth.json``) left out.

    Raises
    ------
    IngestError
        The path does not exist.
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise IngestError(f"{p} does not exist")
    own = ("findings.json", "ingest.json", "truth.json")
    return sorted(
        f
        for f in p.rglob("*")
        if f.is_file()
        and not f.name.startswith(".")
        and f.name.endswith((".json", ".json.gz"))
        and not f.name.endswith(own)
    )


def _resolve_ranks(
    traces: list[RankTrace], opts: IngestOptions, skipped: list[Skipped], warnings: list[str]
) -> list[RankTrace]:
    rx = re.compile(opts.rank_pattern, re.I)
    out: list[RankTrace] = []
    for i, tr in enumerate(traces):
        rank: int | None = None
        if opts.rank_from == "order":
            rank = i
        if opts.rank_from in ("auto", "info"):
            rank = tr.rank
        if rank is None and opts.rank_from in ("auto", "name"):
            m = rx.search(tr.path.name)
            rank = int(m.group(1)) if m and m.group(1) and m.group(1).isdigit() else None
        if rank is None and opts.rank_from == "auto" and len(traces) == 1:
            rank = 0
            warnings.append(f"{tr.path}: no rank in distributedInfo or the file name; rank 0")
        if rank is None:
            how = {
                "auto": "no distributedInfo.rank and the file name does not match "
                f"{opts.rank_pattern!r} (give --rank-from order or --rank-pattern)",
                "info": "no distributedInfo.rank",
                "name": f"the file name does not match {opts.rank_pattern!r}",
            }[opts.rank_from]
            skipped.append(Skipped(str(tr.path), how))
            continue
        if tr.rank is not None and tr.rank != rank:
            warnings.append(f"{tr.path}: distributedInfo says rank {tr.rank}; using {rank}")
        tr.rank = rank
        out.append(tr)
    return out


def _align(traces: list[RankTrace], warnings: list[str]) -> None:
    """Shift ranks whose clock is not since the epoch so that their first step starts with
    the same step of the epoch-clocked ranks (the earliest such start), else at T0_NS."""
    ref: dict[int, int] = {}
    for tr in traces:
        if tr.epoch_clock:
            for s in tr.steps:
                ref[s.step] = min(ref.get(s.step, s.start_ns), s.start_ns)
    for tr in traces:
        if tr.epoch_clock or not tr.steps:
            continue
        first = min(tr.steps, key=lambda s: s.start_ns)
        target = ref.get(first.step)
        if target is None:
            target = T0_NS
            ref.setdefault(first.step, T0_NS)
        tr.shift(target - first.start_ns)
        warnings.append(
            f"{tr.path}: timestamps are not since the Unix epoch (no baseTimeNanoseconds); "
            f"aligned step {first.step} to {target} ns"
        )


def _coords(world: int, layout: str | None) -> Callable[[int], dict[str, int]]:
    if layout:
        from argus.sim.layout import Layout, LayoutError

        try:
            lay = Layout.parse(layout)
        except LayoutError as exc:
            raise IngestError(str(exc)) from exc
        if lay.world != world:
            raise IngestError(
                f"layout {layout!r} has {lay.world} ranks; the traces say world {world}"
            )
        return lay.coords

    def dp_only(rank: int) -> dict[str, int]:
        c = {f"{d}_{k}": (0 if k == "rank" else 1) for d in _DIMS for k in ("rank", "size")}
        c["dp_rank"], c["dp_size"] = rank, world
        return c

    return dp_only


def _read_one(f: Path, max_phases: int) -> RankTrace | str:
    try:
        return read_kineto(f, max_phases=max_phases)
    except TraceError as exc:
        return exc.reason


def _read_all(
    files: list[Path], max_phases: int, workers: int
) -> Iterator[tuple[Path, RankTrace | str]]:
    """``(file, trace or the reason it was skipped)`` in file order (``workers`` == 1) or as
    each finishes (a process pool); the caller sorts what it keeps."""
    if workers <= 1 or len(files) < 2:
        for f in files:
            yield f, _read_one(f, max_phases)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # forkserver: no fork of a process with threads (the CLI's progress bar runs one)
    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(min(workers, len(files)), mp_context=ctx) as pool:
        futs = {pool.submit(_read_one, f, max_phases): f for f in files}
        for fut in as_completed(futs):
            yield futs[fut], fut.result()


def ingest(
    path: str | Path | Sequence[str | Path],
    options: IngestOptions,
    *,
    on_file: Callable[[Path, RankTrace | None, int], None] | None = None,
    workers: int = 1,
) -> IngestResult:
    """Read the trace files under ``path`` (or the given files) into one job.

    Parameters
    ----------
    path : path or sequence of paths
        A directory (searched recursively), a file, or a list of files.
    options : IngestOptions
    on_file : callable, optional
        ``on_file(file, trace or None when skipped, number of files)`` after each file: a
        progress hook.
    workers : int
        Processes parsing files at once (1: this process). Results are the same whatever
        the number; files are reported as they finish.

    Raises
    ------
    IngestError
        No trace file, none readable, or a world size / layout the ranks contradict.
    """
    if isinstance(path, (str, Path)):
        files = find_traces(path)
        where = str(path)
    else:
        files = sorted(Path(p) for p in path)
        where = ", ".join(map(str, files[:3])) + (" ..." if len(files) > 3 else "")
    if not files:
        raise IngestError(f"{where}: no .json or .json.gz trace files")
    skipped: list[Skipped] = []
    warnings: list[str] = []
    read: list[RankTrace] = []
    for f, got in _read_all(files, options.max_phases, workers):
        tr = got if isinstance(got, RankTrace) else None
        if tr is None:
            skipped.append(Skipped(str(f), str(got)))
        else:
            read.append(tr)
        if on_file is not None:
            on_file(f, tr, len(files))
    pos = {str(f): i for i, f in enumerate(files)}
    read.sort(key=lambda t: pos[str(t.path)])
    skipped.sort(key=lambda x: pos[x.path])
    traces = _resolve_ranks(read, options, skipped, warnings)
    if not traces:
        raise IngestError(
            f"{where}: no trace could be ingested ("
            + "; ".join(str(s) for s in skipped[:5])
            + (f"; {len(skipped) - 5} more" if len(skipped) > 5 else "")
            + ")"
        )
    top = max(int(t.rank or 0) for t in traces)
    worlds = sorted({t.world for t in traces if t.world is not None})
    if len(worlds) > 1:
        warnings.append(f"distributedInfo world sizes disagree: {worlds}; using {worlds[-1]}")
    world = options.world_size or (worlds[-1] if worlds else top + 1)
    if world <= top:
        raise IngestError(f"world size {world} but a trace is rank {top}")
    _align(traces, warnings)
    coords = _coords(world, options.layout)
    res = IngestResult(
        options.job,
        world,
        traces,
        skipped,
        warnings,
        files=len(files),
        coords={r: coords(r) for r in sorted({int(t.rank or 0) for t in traces})},
        kernels=options.kernels,
    )
    seen: dict[tuple[int, int], str] = {}
    dups = 0
    for tr in traces:
        for sp in tr.steps:
            k = (int(tr.rank or 0), sp.step)
            if k in seen:
                dups += 1
                continue
            seen[k] = str(tr.path)
            res._plan.append((tr, sp))
    if dups:
        warnings.append(
            f"{dups} (rank, step) pairs appear in more than one file; the first file's kept"
        )
    missing = world - len(res.ranks)
    if missing:
        warnings.append(
            f"traces for {len(res.ranks)} of {world} ranks: the other {missing} are absent "
            "from the records (diagnose compares the ranks present)"
        )
    outside = sum(t.outside for t in traces)
    if outside:
        warnings.append(f"{outside} kernel events outside every ProfilerStep were not ingested")
    return res
