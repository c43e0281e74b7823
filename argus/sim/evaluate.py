"""Score a diagnosis against a scenario's ground truth (precision, recall, delay)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Evaluation", "evaluate"]


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
