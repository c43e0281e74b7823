"""Offline diagnosis of a recorded job: Avro files -> compression -> L1-L3 -> funnel.

The same functions the stream agents call, fed from files:

* step records (``step_record``) -> :func:`argus.detectors.inputs.job_series` ->
  :func:`argus.detectors.l1.detect` (whole run), and per window of ``window_steps`` steps
  :func:`argus.detectors.inputs.group_windows` -> :func:`argus.detectors.l2.detect`;
* kernel batches (``kernel_batch``) -> :func:`argus.streams.kde.summarize_many` per record
  (the compressor's work), or kernel summaries (``kernel_summary``) as they are -> per window
  :func:`argus.detectors.l3_window.detect_window`;
* every window's findings -> :func:`argus.detectors.funnel.step`.

:func:`diagnose_path` reads a directory (every ``*.avro`` in it, the record type taken from
each file's schema) or one file.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus.detectors import funnel, l1, l2
from argus.detectors.config import DetectorsConfig
from argus.detectors.errors import DetectorInputError
from argus.detectors.findings import Finding, to_anomaly
from argus.detectors.funnel import FunnelState, Verdict
from argus.detectors.inputs import group_windows, job_series
from argus.detectors.kernel_inputs import rank_kernels, summary_groups
from argus.detectors.l3_window import detect_window
from argus.detectors.routing import Routing

__all__ = [
    "DiagnoseResult",
    "batch_summaries",
    "diagnose",
    "diagnose_path",
    "read_avro",
    "summary_groups",
]


@dataclass
class DiagnoseResult:
    """Everything one offline diagnosis found.

    Attributes
    ----------
    job : str
    steps : (first, last) step numbers
    window_steps : int
    findings : list of Finding
        L1 over the whole run, L2 and L3 per window.
    verdicts : list of Verdict
        The funnel's verdict per culprit (its last window: highest persistence).
    alerts : list of dict
        ``alert`` records in the order the funnel emitted them.
    windows : list of (start_step, end_step)
    inputs : dict
        Record counts read.
    """

    job: str
    steps: tuple[int, int]
    window_steps: int
    findings: list[Finding] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    windows: list[tuple[int, int]] = field(default_factory=list)
    inputs: dict[str, int] = field(default_factory=dict)
    first_step: dict[str, int] = field(default_factory=dict)
    """dedup key -> last step of the first window in which the culprit appeared."""

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict: anomaly records of every finding and verdict, and the alerts."""
        return {
            "job": self.job,
            "steps": list(self.steps),
            "window_steps": self.window_steps,
            "n_windows": len(self.windows),
            "inputs": self.inputs,
            "verdicts": [v.to_anomaly() for v in self.verdicts],
            "findings": [to_anomaly(f, detected_ns=f.window_end_ns) for f in self.findings],
            "alerts": [_jsonable(a) for a in self.alerts],
        }


def _jsonable(rec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (v if not isinstance(v, bytes) else v.hex()) for k, v in rec.items()}


def read_avro(path: str | Path) -> tuple[str, Iterator[dict[str, Any]]]:
    """``(schema short name, records)`` of an Avro object container file.

    Raises
    ------
    DetectorInputError
        The file is not an Avro container or holds no argus record.
    """
    import fastavro

    from argus.schemas.codec import load_schemas

    p = Path(path)
    by_full = {s.full_name: s.name for s in load_schemas().values()}
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed by the generator
        reader = fastavro.reader(fh)
    except (OSError, ValueError) as exc:
        raise DetectorInputError(f"{p}: not a readable Avro container file ({exc})") from exc
    schema = reader.writer_schema or {}
    full = schema.get("name", "") if isinstance(schema, dict) else ""
    if isinstance(schema, dict) and schema.get("namespace") and "." not in full:
        full = f"{schema['namespace']}.{full}"
    name = by_full.get(full)
    if name is None:
        fh.close()
        raise DetectorInputError(f"{p}: records of {full or 'unknown schema'}, not an argus record")

    def it() -> Iterator[dict[str, Any]]:
        try:
            for rec in reader:
                if isinstance(rec, dict):
                    yield rec
        finally:
            fh.close()

    return name, it()


def batch_summaries(rec: Mapping[str, Any], kde_config: Any = None) -> dict[str, Any]:
    """Compress one ``kernel_batch`` record into a ``kernel_summary`` record, like the
    compressor agent (:func:`argus.streams.summary_record.summarize_batch`).

    Raises
    ------
    DetectorInputError
        Inconsistent columns (the message says which).
    """
    from argus.streams.summary_record import BatchError, summarize_batch

    try:
        return summarize_batch(rec, config=kde_config)  # None: the compressor's default
    except BatchError as exc:
        raise DetectorInputError(
            f"kernel_batch {rec.get('job')}/{rec.get('rank')} window {rec.get('window_id')}: {exc}"
        ) from exc


def diagnose(
    steps: Iterable[Mapping[str, Any]],
    *,
    kernel_batches: Iterable[Mapping[str, Any]] = (),
    kernel_summaries: Iterable[Mapping[str, Any]] = (),
    config: DetectorsConfig | None = None,
    window_steps: int = 10,
    job: str | None = None,
) -> DiagnoseResult:
    """Run compression, L1-L3 and the funnel over recorded records.

    Parameters
    ----------
    steps : iterable of step_record dicts
    kernel_batches : iterable of kernel_batch dicts
        Compressed here, one record at a time, like the compressor agent does.
    kernel_summaries : iterable of kernel_summary dicts
    config : DetectorsConfig
    window_steps : int
        Steps per L2/L3/funnel window.
    job : str, optional
        Select one job when the records hold several.

    Raises
    ------
    DetectorInputError
        No step records, several jobs without ``job``, or malformed records.
    """
    if window_steps < 1:
        raise DetectorInputError(f"window_steps must be >= 1, got {window_steps}")
    cfg = config or DetectorsConfig()
    routing = Routing.from_config(cfg.routing)
    step_recs = [r for r in steps if job is None or r.get("job") == job]
    series = job_series(step_recs)
    the_job = series.job
    res = DiagnoseResult(the_job, (int(series.steps[0]), int(series.steps[-1])), window_steps)
    res.inputs["step_records"] = len(step_recs)
    l1_findings = l1.detect(
        series.steps,
        series.iter_ns,
        job=the_job,
        cfg=cfg.l1,
        start_ns=series.start_ns,
        end_ns=series.end_ns,
    )
    res.findings.extend(l1_findings)
    # kernel summaries per (window, rank)
    first = int(series.steps[0])

    def win_of(step: int) -> int:
        return (step - first) // window_steps

    kern: dict[int, dict[int, dict[tuple[str, int], list[Any]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    coords_of: dict[int, Mapping[str, Any]] = {}
    skinds: dict[int, dict[int, str]] = defaultdict(dict)
    from argus.streams.summary_record import KernelNames

    book = KernelNames()
    n_kb = n_ks = 0

    def add_summary(rec: Mapping[str, Any]) -> None:
        rk = int(rec["rank"])
        coords_of[rk] = rec.get("coords") or {}
        w = win_of(int(rec["window_id"]))
        for key, s in summary_groups(rec, book).items():
            kern[w][rk][key].append(s)

    for rec in kernel_batches:
        if rec.get("job") != the_job:
            continue
        n_kb += 1
        for si in rec.get("streams", []):
            skinds[int(rec["rank"])][int(si["id"])] = si.get("kind", "unknown")
        add_summary(batch_summaries(rec))  # the compressor's work, then the L3 agent's
    for rec in kernel_summaries:
        if rec.get("job") != the_job:
            continue
        n_ks += 1
        for si in rec.get("streams", []):  # summaries carry their batch's stream kinds
            skinds[int(rec["rank"])][int(si["id"])] = si.get("kind", "unknown")
        add_summary(rec)
    res.inputs["kernel_batches"] = n_kb
    res.inputs["kernel_summaries"] = n_ks
    # windows
    by_win: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for rec in step_recs:
        by_win[win_of(int(rec["step"]))].append(rec)
    state = FunnelState()
    last: dict[str, Verdict] = {}
    for w in sorted(set(by_win) | set(kern)):
        recs = by_win.get(w, [])
        ws, we = first + w * window_steps, first + (w + 1) * window_steps - 1
        mask = (series.steps >= ws) & (series.steps <= we)
        wsn = int(series.start_ns[mask].min()) if mask.any() else 0
        wen = int(series.end_ns[mask].max()) if mask.any() else 0
        res.windows.append((ws, we))
        found: list[Finding] = []
        for gw in group_windows(recs, routing, job=the_job):
            found.extend(l2.detect(gw, cfg.l2))
        if w in kern:
            rks = rank_kernels(kern[w], coords_of, skinds)
            found.extend(
                detect_window(the_job, rks, window=(ws, we, wsn, wen), cfg=cfg.l3, routing=routing)
            )
        res.findings.extend(found)
        overlapping = [
            f for f in l1_findings if f.window_start_step <= we and f.window_end_step >= ws
        ]
        state, out = funnel.step(state, [*found, *overlapping], cfg.funnel, groups=routing.groups)
        for v in out.verdicts:
            last[v.dedup_key] = v
            res.first_step.setdefault(v.dedup_key, min(we, int(series.steps[-1])))
        res.alerts.extend(out.alerts)
    res.verdicts = sorted(last.values(), key=lambda v: (-v.confidence, v.dedup_key))
    return res


def diagnose_path(
    path: str | Path,
    *,
    config: DetectorsConfig | None = None,
    window_steps: int = 10,
    job: str | None = None,
) -> DiagnoseResult:
    """:func:`diagnose` over a directory of Avro files (or one file).

    Raises
    ------
    DetectorInputError
        The path does not exist, holds no ``.avro`` files, or no step records.
    """
    p = Path(path)
    if not p.exists():
        raise DetectorInputError(f"{p} does not exist")
    files: Sequence[Path] = sorted(p.glob("*.avro")) if p.is_dir() else [p]
    if not files:
        raise DetectorInputError(f"{p} holds no .avro files")
    streams: dict[str, list[Iterator[dict[str, Any]]]] = defaultdict(list)
    for f in files:
        name, it = read_avro(f)
        streams[name].append(it)

    def chain(name: str) -> Iterator[dict[str, Any]]:
        for it in streams.get(name, []):
            yield from it

    if "step_record" not in streams:
        raise DetectorInputError(f"{p}: no step_record file (L1/L2 need the raw steps)")
    return diagnose(
        chain("step_record"),
        kernel_batches=chain("kernel_batch"),
        kernel_summaries=chain("kernel_summary"),
        config=config,
        window_steps=window_steps,
        job=job,
    )
