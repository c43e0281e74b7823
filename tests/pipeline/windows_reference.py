"""The step windows' algorithm as it was before :mod:`argus.streams.windows` kept an index
(commit a77280f, verbatim but for the imports): every report recomputes the watermarks from
the whole state. The reference that ``test_windows_index.py`` holds the indexed version to."""

from __future__ import annotations

import bisect
from typing import Literal

from argus.streams.windows import (
    _MAX_CLOSED,
    LATENESS_STEPS,
    MAX_PENDING,
    ClosedStep,
    PendingStep,
    Status,
    WindowState,
)


def add(
    state: WindowState,
    *,
    step: int,
    rank: int,
    expected: int,
    lateness: int = LATENESS_STEPS,
    max_pending: int = MAX_PENDING,
    part: str = "0",
    silent: int = 0,
    silent_ns: int = 0,
    t_ns: int = 0,
) -> tuple[Status, list[ClosedStep]]:
    """:func:`argus.streams.windows.add`, as it was."""
    step, rank = int(step), int(rank)
    state.setdefault("src", {})  # a state of the version before watermarks
    closed_steps = state["closed"]
    src = str(rank)
    if step in closed_steps or (len(closed_steps) >= _MAX_CLOSED and step < closed_steps[0]):
        if int(state["src"].get(src, -1)) >= step:
            return "dup", []  # the source had passed it: a replayed record
        state["late"] = int(state["late"]) + 1  # it closed without this source
        state["src"][src] = step
        return "late", []
    key = str(step)
    pend = state["pending"].get(key)
    if pend is None:
        pend = state["pending"][key] = {"exp": int(expected), "got": []}
    if rank in pend["got"]:
        return "dup", []
    pend["got"].append(rank)
    pend["exp"] = max(int(pend["exp"]), int(expected))
    state["newest"] = max(int(state["newest"]), step)
    if part != "0" or src in state.setdefault("part", {}):
        state["part"][src] = part
    state["src"][src] = max(int(state["src"].get(src, -1)), step)
    if silent > 0:
        times = state.setdefault("t", {})
        times[src] = max(int(times.get(src, 0)), int(t_ns))
    return "new", _due(state, lateness, max_pending, silent, silent_ns)


def flush(state: WindowState) -> list[ClosedStep]:
    """Close every pending step as incomplete (a processing-time bound or end of input)."""
    return [_close(state, k, timed_out=False, incomplete=True) for k in _pending_steps(state)]


def _pending_steps(state: WindowState) -> list[str]:
    return sorted(state["pending"], key=int)


def _due(
    state: WindowState, lateness: int, max_pending: int, silent: int = 0, silent_ns: int = 0
) -> list[ClosedStep]:
    """Close the pending steps whose sources are all accounted for, in step order."""
    out: list[ClosedStep] = []
    order = _pending_steps(state)
    while len(order) > max_pending:
        out.append(_close(state, order.pop(0), timed_out=False, incomplete=True))
    newest = max(state["src"].values())
    watermark = _watermark(state)
    steps = [int(k) for k in order]
    behind = bisect.bisect_right(steps, watermark)  # pending steps at or below the watermark
    marks = _partition_marks(state, "src") if silent > 0 else {}
    times = _partition_marks(state, "t") if silent > 0 else {}
    for i, k in enumerate(order):
        pend = state["pending"][k]
        step = steps[i]
        got = set(pend["got"])
        if len(got) >= pend["exp"] or (
            newest > step  # else no source passed it
            and len(got) + sum(1 for s, n in state["src"].items() if n > step and int(s) not in got)
            >= pend["exp"]
        ):
            out.append(_close(state, k, timed_out=False))
        elif behind - i - 1 >= lateness * (1 if len(state["src"]) >= pend["exp"] else 8):
            # the watermark passed `lateness` newer steps; while some expected source has
            # not reported at all (its partition not fetched yet: a late start, a restart),
            # 8 times that
            out.append(_close(state, k, timed_out=True))
        elif silent > 0 and _all_silent(
            state, pend, got, step, (marks, times), steps, i, (silent, silent_ns)
        ):
            out.append(_close(state, k, timed_out=True))
        else:
            break  # monotone: a later step is not closable either
    return out


def _partition_marks(state: WindowState, what: Literal["src", "t"]) -> dict[str, list[int]]:
    """Per input partition, its sources' newest steps (``src``) or their event times
    (``t``, ns), ascending."""
    parts = state.get("part") or {}
    by_part: dict[str, list[int]] = {}
    for s, n in (state.get(what) or {}).items():
        by_part.setdefault(parts.get(s, "0"), []).append(int(n))
    return {p: sorted(v) for p, v in by_part.items()}


def _all_silent(
    state: WindowState,
    pend: PendingStep,
    got: set[int],
    step: int,
    marks: tuple[dict[str, list[int]], dict[str, list[int]]],
    steps: list[int],
    i: int,
    silent: tuple[int, int],
) -> bool:
    """Whether every source not accounted for at ``step`` (pending index ``i``) is known and
    silent in its partition: the upper median of its partition's sources passed ``step`` by
    ``silent[0]`` pending steps and the source's own newest event time by ``silent[1]`` ns
    (``marks``: the partitions' steps and times). Monotone in the step, as the other rules."""
    parts = state.get("part") or {}
    behind = [
        s for s, n in state["src"].items() if int(n) < step and int(s) not in got
    ]  # known sources that neither reported nor passed it
    passed = sum(1 for s, n in state["src"].items() if int(n) > step and int(s) not in got)
    if not behind or len(got) + passed + len(behind) < pend["exp"]:
        return False  # nobody to wait for (the other rules), or a source never seen
    own_t = state.get("t") or {}
    for s in behind:
        v = marks[0].get(parts.get(s, "0"), [])
        if len(v) < 2:
            return False  # alone on its partition: never silent
        if bisect.bisect_right(steps, v[len(v) // 2]) - i - 1 < silent[0]:
            return False
        tv = marks[1].get(parts.get(s, "0"), [])
        if tv and tv[len(tv) // 2] - int(own_t.get(s, 0)) < silent[1]:
            return False
    return True


def _watermark(state: WindowState) -> int:
    """The key's watermark: per input partition the upper median of its sources' newest
    steps, then the lowest partition's (a partition a consumer has not caught up on holds
    it back; one source, fast or slow, never moves it)."""
    marks = _partition_marks(state, "src")
    if not marks:
        return -1
    return min(v[len(v) // 2] for v in marks.values())


def _close(
    state: WindowState, key: str, *, timed_out: bool, incomplete: bool = False
) -> ClosedStep:
    pend = state["pending"].pop(key)
    closed = state["closed"]
    closed.append(int(key))
    closed.sort()
    if len(closed) > _MAX_CLOSED:
        del closed[: len(closed) - _MAX_CLOSED]
    return ClosedStep(int(key), tuple(sorted(pend["got"])), int(pend["exp"]), timed_out, incomplete)
