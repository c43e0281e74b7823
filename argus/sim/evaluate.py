"""Score a diagnosis against a scenario's ground truth (precision, recall, delay).

* :func:`evaluate` - the older verdict-level score of a :class:`argus.diagnose.DiagnoseResult`;
* :func:`run_engine_on` - a simulated run through the engine's roles in memory, streamed
  (``argus diagnose`` semantics without holding every record), with each alert's window;
* :func:`score_pages` - what on-call sees (issue 18): the *pages* (alert triggers), which
  ranks each names, culprits named, precision and recall over culprit ranks, pages on
  healthy ranks, false pages per 1,000 steps, delay in windows, and the bars.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EngineRun", "Evaluation", "PageScore", "evaluate", "run_engine_on", "score_pages"]


@dataclass(frozen=True)
class Evaluation:
    """How a diagnosis compares with the ground truth.

    Attributes
    ----------
    scenario : str
    n_verdicts, n_alerts, n_findings : int
        What the funnel produced (all must be 0 on ``healthy``).
    flagged : tuple of int
        Ranks named by any verdict (members, for a group verdict).
    precision, recall : float
        Over ranks (for ``jit-stalls``: over stall steps covered by L1 jitter windows).
        NaN when undefined (nothing flagged / nothing to find).
    found : bool
        A verdict names a culprit of the truth (rank overlap, or the truth's group).
    found_by : tuple of str
        Levels of the matching verdicts.
    what_ok : bool
        A matching verdict names a true phase, kernel or group.
    delay_steps : int or None
        Steps from fault onset to the end of the first window with a matching verdict.
    """

    scenario: str
    n_verdicts: int
    n_alerts: int
    n_findings: int
    flagged: tuple[int, ...]
    precision: float
    recall: float
    found: bool
    found_by: tuple[str, ...]
    what_ok: bool
    delay_steps: int | None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def _members(v: Any) -> set[int]:
    c = v.culprit
    if c.ranks:
        return set(c.ranks)
    out: set[int] = set()
    for f in c.findings:
        out |= set(json.loads(f.evidence.get("members", "[]")))
    return out


def evaluate(result: Any, truth: Mapping[str, Any]) -> Evaluation:
    """Compare a :class:`argus.diagnose.DiagnoseResult` with a ``truth.json`` dict."""
    nan = float("nan")
    verdicts = list(result.verdicts)
    name = str(truth.get("scenario", "?"))
    t_ranks = set(truth.get("ranks", []))
    t_phases = set(truth.get("phases", []))
    t_kernels = set(truth.get("kernels", []))
    grp = truth.get("group")
    t_group = (grp["kind"], grp["id"]) if grp else None
    flagged: set[int] = set()
    for v in verdicts:
        flagged |= _members(v)
    matching = []
    for v in verdicts:
        c = v.culprit
        if (t_group and (c.group_kind, c.group_id) == t_group) or (_members(v) & t_ranks):
            matching.append(v)
    what_ok = any(
        (v.culprit.phase in t_phases)
        or bool(set(v.culprit.kernels) & t_kernels)
        or (t_group is not None and (v.culprit.group_kind, v.culprit.group_id) == t_group)
        for v in matching
    )
    onset = truth.get("onset_step")
    delay = None
    if matching and onset is not None:
        delay = min(result.first_step.get(v.dedup_key, 10**9) for v in matching) - int(onset)
    fault_steps = list(truth.get("fault_steps", []))
    details: dict[str, Any] = {}
    if fault_steps:  # transient faults: judged on L1 jitter windows
        jit = [f for f in result.findings if f.level == "L1" and f.kind == "jitter"]
        covered = [
            s
            for s in fault_steps
            if any(f.window_start_step <= s <= f.window_end_step for f in jit)
        ]
        useful = [
            f
            for f in jit
            if any(f.window_start_step <= s <= f.window_end_step for s in fault_steps)
        ]
        recall = len(covered) / len(fault_steps)
        precision = len(useful) / len(jit) if jit else nan
        found = bool(covered)
        found_by = ("L1",) if covered else ()
        what_ok = found
        delay = 0 if covered else None
        details["stall_steps_covered"] = covered
    else:
        hit = flagged & t_ranks
        precision = len(hit) / len(flagged) if flagged else nan
        recall = len(hit) / len(t_ranks) if t_ranks else nan
        found = bool(matching)
        found_by = tuple(sorted({lv for v in matching for lv in v.culprit.levels}))
    return Evaluation(
        scenario=name,
        n_verdicts=len(verdicts),
        n_alerts=sum(1 for a in result.alerts if a.get("action") == "trigger"),
        n_findings=len(result.findings),
        flagged=tuple(sorted(flagged)),
        precision=precision,
        recall=recall,
        found=found,
        found_by=found_by,
        what_ok=what_ok,
        delay_steps=delay,
        details=details,
    )


# -- pages (issue 18) ---------------------------------------------------------------------------


@dataclass
class EngineRun:
    """A simulated run through the engine: ``alerts`` in emission order, ``page_window``
    (alert index -> funnel window index, ``first step // window_steps``), the anomaly
    records (``findings``: L1-L3; ``verdicts``: the funnel's), record counts, seconds."""

    job: str
    steps: int
    window_steps: int
    alerts: list[dict[str, Any]]
    page_window: dict[int, int]
    findings: list[dict[str, Any]]
    verdicts: list[dict[str, Any]]
    n_step_records: int
    n_kernel_batches: int
    seconds: float


def run_engine_on(
    run: Any,
    *,
    window_steps: int = 10,
    config: Any = None,
    pcfg: Any = None,
) -> EngineRun:
    """Feed a :class:`~argus.sim.simulate.SimRun` through the engine's roles in memory.

    The same roles, settings and order as :func:`argus.diagnose.diagnose` (which calls
    :func:`argus.streams.memory.run_engine`): funnel windows and L3 blocks of
    ``window_steps`` steps, kernel batches compressed as the compressor does, records in
    event order (a step's records, then its kernel windows) - but streamed from the
    simulator, so a 512-rank job of hundreds of steps need not fit in memory.
    """
    import asyncio
    import dataclasses
    import time

    from argus.detectors.config import DetectorsConfig
    from argus.sim.simulate import simulate
    from argus.streams import memory
    from argus.streams.pipeline_config import PipelineConfig

    base = pcfg or PipelineConfig()
    pc = dataclasses.replace(base, funnel_window_steps=window_steps, l3_windows=window_steps)
    ctx = memory._MemoryCtx(config or DetectorsConfig(), pc)
    eng = memory._Engine(ctx, funnel=True)
    counts = {"raw.steps": 0, "raw.kernels": 0}
    t0 = time.perf_counter()

    async def go() -> None:
        for suffix, _key, rec in simulate(run):
            counts[suffix] += 1
            if suffix == "raw.steps":
                await eng.step(rec)
            else:
                await eng.summary(memory.batch_summaries(rec))
        await eng.finish()

    asyncio.run(go())
    page_window: dict[int, int] = {}
    win_of: dict[tuple[str, str, int], int] = {}
    for ws, _we, out in eng.windows:
        for a in getattr(out, "alerts", ()):
            k = (str(a.get("dedup_key")), str(a.get("action")), int(a.get("last_seen_ns", 0)))
            win_of.setdefault(k, ws // window_steps)
    for i, a in enumerate(ctx.alerts):
        k = (str(a.get("dedup_key")), str(a.get("action")), int(a.get("last_seen_ns", 0)))
        if k in win_of:
            page_window[i] = win_of[k]
    return EngineRun(
        job=run.job,
        steps=run.steps,
        window_steps=window_steps,
        alerts=list(ctx.alerts),
        page_window=page_window,
        findings=[a for a in ctx.anomalies if a.get("level") != "funnel"],
        verdicts=[a for a in ctx.anomalies if a.get("level") == "funnel"],
        n_step_records=counts["raw.steps"],
        n_kernel_batches=counts["raw.kernels"],
        seconds=time.perf_counter() - t0,
    )


@dataclass(frozen=True)
class PageScore:
    """Pages (alert triggers) of one run against its ground truth.

    Attributes
    ----------
    scenario : str
    healthy : bool
        The truth names no culprit.
    steps : int
    pages : int
        Alert triggers.
    pages_healthy : int
        Pages naming a rank that is not a culprit, or naming no culprit (a job-wide page).
    false_per_1000 : float
        ``pages_healthy / steps * 1000``.
    healthy_ranks : tuple of int
        Non-culprit ranks named by any page.
    named : tuple of int
        Culprit ranks named by any page.
    precision, recall : float
        Over ranks: culprit ranks named / all ranks named, culprit ranks named / culprit
        ranks (a host fault counts as one culprit: recall 1 once a page names its host or
        one of its ranks). NaN when undefined.
    found : bool
        A page names a culprit (rank, or the truth's host or group).
    what_ok : bool
        A page naming a culprit names a true phase or kernel (or the truth names none).
    delay_windows : int or None
        Windows from the onset's window to the first page naming a culprit.
    passed : bool
        The issue 18 bar: healthy: no page; faulty: found, no healthy rank paged, what_ok,
        delay within ``truth.delay_windows``.
    false_pages : tuple of str
        ``"L1+L2 rank(s) 3,4 phase"`` of each page on healthy ranks (first 12).
    """

    scenario: str
    healthy: bool
    steps: int
    pages: int
    pages_healthy: int
    false_per_1000: float
    healthy_ranks: tuple[int, ...]
    named: tuple[int, ...]
    precision: float
    recall: float
    found: bool
    what_ok: bool
    delay_windows: int | None
    passed: bool
    false_pages: tuple[str, ...] = ()
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def _group_members(layout: Any) -> dict[tuple[str, str], list[int]]:
    from argus.routing import Routing

    routing = Routing.default()
    out: dict[tuple[str, str], list[int]] = {}
    coords = [layout.coords(r) for r in range(layout.world)]
    for kind in routing.groups:
        for r, c in enumerate(coords):
            out.setdefault((kind, routing.group_for_kind(c, kind)), []).append(r)
    return out


def _page_ranks(a: Mapping[str, Any], members: Mapping[tuple[str, str], list[int]]) -> set[int]:
    """Ranks a page names: its ``ranks``, else ``details.members``, else its group's
    members; none for a job-wide page (L1 alone names no rank)."""
    ranks = {int(r) for r in a.get("ranks") or ()}
    if ranks or a.get("group_kind") == "job":
        return ranks
    listed = (a.get("details") or {}).get("members")
    if listed:
        return {int(r) for r in (json.loads(listed) if isinstance(listed, str) else listed)}
    return set(members.get((str(a.get("group_kind")), str(a.get("group_id"))), []))


def score_pages(er: EngineRun, truth: Mapping[str, Any], layout: Any) -> PageScore:
    """Score the pages of ``er`` against ``truth`` (a ``truth_dict()``) on ``layout``."""
    nan = float("nan")
    members = _group_members(layout)
    t_ranks = {int(r) for r in truth.get("ranks", [])}
    t_phases = set(truth.get("phases", []))
    t_kernels = set(truth.get("kernels", []))
    host = truth.get("host")
    grp = truth.get("group")
    t_group = (grp["kind"], grp["id"]) if grp else None
    healthy = not t_ranks and t_group is None
    pages = [(i, a) for i, a in enumerate(er.alerts) if a.get("action") == "trigger"]
    named: set[int] = set()
    bad: set[int] = set()
    n_bad = 0
    false_txt: list[str] = []
    first_ok: int | None = None
    what_ok = False
    found = False
    for i, a in pages:
        rk = _page_ranks(a, members)
        text = f"{a.get('summary', '')} {json.dumps(a.get('details') or {}, default=str)}"
        by_host = bool(host) and str(host) in text
        by_group = t_group is not None and (a.get("group_kind"), a.get("group_id")) == t_group
        hit = rk & t_ranks
        named |= hit
        extra = rk - t_ranks
        if extra or not (hit or by_host or by_group):  # a page that names no culprit
            bad |= extra
            n_bad += 1
            if len(false_txt) < 12:
                lv = "+".join(a.get("levels") or ())
                shown = ",".join(str(x) for x in sorted(extra)[:8]) or "none"
                more = f"+{len(extra) - 8}" if len(extra) > 8 else ""
                false_txt.append(
                    f"w{er.page_window.get(i, '?')} {lv} {a.get('group_kind')} rank(s) "
                    f"{shown}{more} {a.get('phase') or '-'}"
                )
        if hit or by_host or by_group:
            found = True
            k = set(a.get("kernels") or ())
            if (
                (not t_phases and not t_kernels)
                or a.get("phase") in t_phases
                or bool(k & t_kernels)
            ):
                what_ok = True
            w = er.page_window.get(i)
            if w is not None and (first_ok is None or w < first_ok):
                first_ok = w
    all_named = named | bad
    precision = len(named) / len(all_named) if all_named else nan
    if healthy:
        recall = nan
    elif host:
        recall = 1.0 if found else 0.0
    else:
        recall = len(named) / len(t_ranks) if t_ranks else (1.0 if found else 0.0)
    onset = truth.get("onset_step")
    if onset is None and truth.get("fault_steps"):
        onset = min(truth["fault_steps"])
    delay = None
    if first_ok is not None and onset is not None:
        delay = first_ok - int(onset) // er.window_steps
    bar = int(truth.get("delay_windows", 2) or 2)
    why: list[str] = []
    if healthy:
        passed = not pages
        if pages:
            why.append(f"{len(pages)} page(s) on a healthy job")
    else:
        if not found:
            why.append("culprit not paged")
        if bad:
            why.append(f"{len(bad)} healthy rank(s) paged")
        elif n_bad:
            why.append(f"{n_bad} page(s) naming no rank")
        if found and not what_ok:
            why.append("wrong phase/kernel")
        if found and (delay is None or delay > bar):
            why.append(f"delay {delay} > {bar} windows")
        passed = not why
    return PageScore(
        scenario=str(truth.get("scenario", "?")),
        healthy=healthy,
        steps=er.steps,
        pages=len(pages),
        pages_healthy=n_bad,
        false_per_1000=n_bad / max(er.steps, 1) * 1000.0,
        healthy_ranks=tuple(sorted(bad)),
        named=tuple(sorted(named)),
        precision=precision,
        recall=recall,
        found=found,
        what_ok=what_ok,
        delay_windows=delay,
        passed=passed,
        false_pages=tuple(false_txt),
        why="; ".join(why),
    )
