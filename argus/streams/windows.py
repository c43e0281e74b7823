"""Step windows on event time: a step closes when every expected source is accounted for.

Pure bookkeeping over a JSON-able :class:`WindowState` (a faust table holds it and its
changelog restores it); the roles keep the payloads elsewhere and ask this module which
steps closed. A *source* is whatever reports a step once: a rank (rank blocks, L3 scopes)
or a rank block (the job tier). A step is an event-time unit (a training step, a kernel
window id). Nothing here reads a clock: lag, a crash or a restart may delay a close, never
change what closes with which sources.

Each source's own records arrive in order (the raw topics are keyed by ``job/rank``, every
hop after keeps a key's order), so its newest step is its **watermark**. The key's
watermark is, per input partition (the Kafka partition a source's records arrive on), the
upper median of its sources' watermarks, then the lowest over the partitions: a consumer
catching up on one partition far ahead of another (a restart, a late start) holds it back,
and no single source moves it. A pending step ``k`` closes

* **complete**: every expected source reported ``k``;
* **with skipped sources**: every expected source either reported ``k`` or has a newer
  step (it went past ``k`` without reporting it: that record was dropped upstream, a real
  ``missing_rank``);
* **with stalled sources** (``timed_out``): the key's watermark passed ``lateness`` newer
  steps than ``k`` (steps some source reported: window ids may be sparse): the job went on
  without the sources that are not accounted for (a rank that stopped reporting). Arrival
  skew between sources within ``lateness`` steps changes nothing; a source further behind
  is reported missing and its records for the closed step are ``late`` (counted, and sent
  to the DLQ with the reason by the roles; they move no window). A source alone on its
  partition that stops holds the watermark back: its steps close only incomplete. While
  some expected source has not reported at all (a consumer that has not fetched its
  partition yet), the lateness is 8 times longer;
* **with silent sources** (``timed_out``, only when the caller passes ``silent``): every
  source not accounted for is *silent in its partition*: the upper median of the sources
  on its own input partition (itself included) passed ``k`` by ``silent`` newer steps, and
  its event time passed the source's newest report by ``silent_ns`` (a collector delivers
  a rank's records in bursts, a second's steps at a time: fast steps must not look
  silent between two bursts). One
  partition's records arrive in the order they were written, so a source that far behind
  the sources it shares a partition with stopped writing (a rank that died or hung) and
  is not merely read later (a consumer catching up, which moves a whole partition): no
  arrival skew between partitions can make a source silent, and a stopped rank is named
  ``silent`` steps after it stopped instead of ``lateness``. A source alone on its
  partition is never silent (it holds its partition's watermark, above).

Closability is monotone in the step (a source that reported ``k + 1`` passed ``k``), so steps
close in order. Two bounds are not event time and say so: ``max_pending`` caps memory (the
oldest pending step closes **incomplete**), and :func:`flush` closes every pending step
incomplete, for a driver whose key went idle in processing time (a finished or stalled job)
and for the offline driver at the end of its input. An incomplete step names no missing
source: who would have come is unknown.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict

__all__ = [
    "LATENESS_STEPS",
    "MAX_PENDING",
    "ClosedStep",
    "PendingStep",
    "Status",
    "WindowState",
    "add",
    "flush",
    "new_state",
]

_MAX_CLOSED = 256
LATENESS_STEPS = 32
"""Steps the peers' watermark must pass a step by before its silent sources are missing."""
MAX_PENDING = 512
"""Pending steps per key before the oldest closes incomplete (memory bound)."""

Status = Literal["new", "dup", "late"]


class PendingStep(TypedDict):
    """A step still open: how many sources are expected, which reported."""

    exp: int
    got: list[int]


class WindowState(TypedDict):
    """The windows of one key (JSON: string step keys and string source keys)."""

    pending: dict[str, PendingStep]
    closed: list[int]  # most recently closed steps, ascending, bounded
    newest: int  # newest step any source reported
    src: dict[str, int]  # source -> newest step it reported (its watermark)
    part: dict[str, str]  # source -> the input partition it arrives on (absent: "0")
    late: int  # reports for steps already closed (counted, not used)
    t: NotRequired[dict[str, int]]  # source -> event time of its newest step (ns; silent rule)


@dataclass(frozen=True)
class ClosedStep:
    """A step that closed: the sources that reported, and how many were expected.

    ``timed_out``: closed with stalled sources (the peers passed it by the lateness);
    ``incomplete``: closed by a processing-time or memory bound, who is missing is unknown.
    """

    step: int
    ranks: tuple[int, ...]
    expected: int
    timed_out: bool
    incomplete: bool = False

    @property
    def missing(self) -> int:
        """Sources known missing (0 for an incomplete step)."""
        return 0 if self.incomplete else max(0, self.expected - len(self.ranks))


def new_state() -> WindowState:
    return {"pending": {}, "closed": [], "newest": -1, "src": {}, "part": {}, "late": 0}


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
    """Record that source ``rank`` reported ``step`` (arriving on input partition ``part``;
    ``t_ns``: the step's event time, its end); mutates ``state``. ``silent`` > 0 turns the
    silent-source rule on (module doc): ``silent`` steps and ``silent_ns`` of event time.

    Returns
    -------
    status : ``"new"``, ``"dup"`` (a replayed record: this source already reported this
        step, or had passed it) or ``"late"`` (the step closed without this source: it was
        further behind than the lateness; the driver counts it and sends it to the DLQ).
    closed : the steps this report closed, in step order (see the module doc).
    """
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
