"""Step windows that close when every expected rank reported or a grace period passed.

Pure bookkeeping over a JSON-able ``dict`` (so a faust table can hold it and its changelog
can restore it): the stream agents keep the payloads elsewhere and ask this module which
steps are complete. A rank that never reports does not hang a window: the step closes
with that rank listed as missing (itself a finding) once it is ``grace_s`` old (processing
time) **and** either the key went quiet for ``grace_s`` (the job stalled: a dead rank stops
synchronous training) or ``skew_steps`` newer steps arrived (the job went on without the
rank). The second condition keeps a lagging consumer, whose records arrive late but keep
arriving, from declaring ranks missing that are merely queued.

State layout::

    {"pending": {"<step>": {"t0": <s>, "exp": <n>, "got": [<rank>, ...]}},
     "closed": [<step>, ...],     # most recent closed steps, bounded
     "newest": <step>, "t_last": <s>,   # newest step seen, time of the last report
     "late": <n>}                 # records for steps already closed (counted, not used)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["SKEW_STEPS", "ClosedStep", "add", "expire", "new_state"]

_MAX_CLOSED = 256
SKEW_STEPS = 8
"""Newer steps after which a timed-out step closes even while its key is not quiet."""


@dataclass(frozen=True)
class ClosedStep:
    """A step that closed: the ranks that reported, and how many were expected."""

    step: int
    ranks: tuple[int, ...]
    expected: int
    timed_out: bool

    @property
    def missing(self) -> int:
        return max(0, self.expected - len(self.ranks))


def new_state() -> dict[str, Any]:
    return {"pending": {}, "closed": [], "newest": -1, "t_last": 0.0, "late": 0}


def add(
    state: dict[str, Any], *, step: int, rank: int, expected: int, now_s: float
) -> tuple[str, list[ClosedStep]]:
    """Record that ``rank`` reported ``step``; mutates ``state``.

    Returns
    -------
    status : str
        ``"new"``, ``"dup"`` (this rank already reported this step: a replayed record) or
        ``"late"`` (the step already closed).
    closed : list of ClosedStep
        The step, when this report completed it.
    """
    key = str(step)
    state["t_last"] = now_s
    state["newest"] = max(int(state.get("newest", -1)), int(step))
    if step in state["closed"]:
        state["late"] = int(state.get("late", 0)) + 1
        return "late", []
    pend = state["pending"].get(key)
    if pend is None:
        pend = state["pending"][key] = {"t0": now_s, "exp": int(expected), "got": []}
    if rank in pend["got"]:
        return "dup", []
    pend["got"].append(int(rank))
    pend["exp"] = max(int(pend["exp"]), int(expected))
    if len(pend["got"]) >= pend["exp"]:
        return "new", [_close(state, key, timed_out=False)]
    return "new", []


def expire(
    state: dict[str, Any], *, now_s: float, grace_s: float, skew_steps: int = SKEW_STEPS
) -> list[ClosedStep]:
    """Close the pending steps that timed out (see the module doc); mutates ``state``."""
    quiet = now_s - float(state.get("t_last", 0.0)) >= grace_s
    newest = int(state.get("newest", -1))
    due = [
        k
        for k, p in state["pending"].items()
        if now_s - float(p["t0"]) >= grace_s and (quiet or newest - int(k) >= skew_steps)
    ]
    return [_close(state, k, timed_out=True) for k in sorted(due, key=int)]


def _close(state: dict[str, Any], key: str, *, timed_out: bool) -> ClosedStep:
    pend = state["pending"].pop(key)
    closed: list[int] = state["closed"]
    closed.append(int(key))
    if len(closed) > _MAX_CLOSED:
        del closed[: len(closed) - _MAX_CLOSED]
    return ClosedStep(int(key), tuple(sorted(pend["got"])), int(pend["exp"]), timed_out)
