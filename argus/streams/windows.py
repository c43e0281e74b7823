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

What these rules ask on every report (the partitions' watermarks and event times, how many
sources passed a step) is kept in an index next to the state (:class:`_Index`: sorted lists
updated as a source's watermark moves), a few bisections and list inserts per report where
recomputing it sorted every source. It is derived from the state alone and never persisted:
a state read back from its changelog gets it rebuilt by its next report.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

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
    srcs = state.get("src")
    ix = getattr(srcs, "ix", None)  # _own_index(state), inline (every report asks)
    if ix is None or ix.owner != id(state) or ix.pending is not state["pending"]:
        state.setdefault("src", {})  # a state of the version before watermarks
        ix = _index(state)
        srcs = state["src"]
    closed_steps = state["closed"]
    src = str(rank)
    # `closed` is ascending: a step above its last is neither closed nor below the bound
    if closed_steps and step <= closed_steps[-1] and _closed_or_below(closed_steps, step):
        if int(state["src"].get(src, -1)) >= step:
            return "dup", []  # the source had passed it: a replayed record
        state["late"] = int(state["late"]) + 1  # it closed without this source
        where = (state.get("part") or {}).get(src, "0")
        ix.move(state, src, step, where, where)
        return "late", []
    key = str(step)
    pend = state["pending"].get(key)
    if pend is None:
        pend = state["pending"][key] = {"exp": int(expected), "got": []}
        ix.open(step)
    got = ix.got[step]
    if rank in got:
        return "dup", []
    pend["got"].append(rank)
    got.add(rank)
    had = srcs.get(src)
    mark = -1 if had is None else int(had)
    if had is not None and mark > step:
        ix.ahead[step] += 1  # it had passed this step already
    exp, want = int(pend["exp"]), int(expected)
    pend["exp"] = want if want > exp else exp
    newest = int(state["newest"])
    state["newest"] = step if step > newest else newest
    parts = state.get("part")
    if parts is None:
        parts = state["part"] = {}
    was = parts.get(src, "0")
    if part != "0" or src in parts:
        parts[src] = part
    ix.move(state, src, mark if mark > step else step, was, part)
    if silent > 0:
        times = state.setdefault("t", {})
        t_new = max(int(times.get(src, 0)), int(t_ns))
        ix.time(part, src, times.get(src), t_new)
        times[src] = t_new
    return "new", _due(state, ix, lateness, max_pending, silent, silent_ns)


def _closed_or_below(closed_steps: list[int], step: int) -> bool:
    """Whether ``step`` closed already, or lies below the oldest of the bounded ``closed``
    list when it is full (ascending)."""
    at = bisect.bisect_left(closed_steps, step)
    return (at < len(closed_steps) and closed_steps[at] == step) or (
        len(closed_steps) >= _MAX_CLOSED and at == 0
    )


def flush(state: WindowState) -> list[ClosedStep]:
    """Close every pending step as incomplete (a processing-time bound or end of input)."""
    out = [
        _close(state, int(k), timed_out=False, incomplete=True)
        for k in sorted(state["pending"], key=int)
    ]
    ix = _own_index(state)
    if ix is not None:
        ix.order.clear()
        ix.got.clear()
        ix.ahead.clear()
    return out


class _Sources(dict[str, int]):
    """``WindowState["src"]`` with its :class:`_Index` attached: JSON (and ``==``) see the
    plain mapping, so the index is never persisted; a state restored from JSON holds a plain
    dict there, and the next :func:`add` rebuilds the index from it."""

    __slots__ = ("ix",)
    ix: _Index


class _Index:
    """What :func:`_due` asks of a key on every report, derived from its state and kept up
    to date by :func:`add` instead of recomputed (bisections and list inserts per report,
    not a sort of every source). Rebuilt from the state alone whenever absent or not this
    state's (a restore, a copy)."""

    __slots__ = ("ahead", "got", "marks", "order", "owner", "pending", "times", "wm")

    def __init__(self, state: WindowState) -> None:
        self.owner = id(state)
        self.pending = state["pending"]  # identity: a replaced mapping invalidates the index
        src = state["src"]
        parts = state.get("part") or {}
        self.order = sorted(int(k) for k in self.pending)  # pending steps, ascending
        self.got = {k: set(self.pending[str(k)]["got"]) for k in self.order}
        # per pending step: its reporters that have a newer step since
        self.ahead = {
            k: sum(1 for r in got if int(src.get(str(r), k)) > k) for k, got in self.got.items()
        }
        self.wm = sorted(int(n) for n in src.values())  # every source's watermark
        # per input partition: (watermark, source) of its sources, ascending
        self.marks: dict[str, list[tuple[int, str]]] = {}
        for s, n in src.items():
            self.marks.setdefault(parts.get(s, "0"), []).append((int(n), s))
        # per input partition: its sources' newest event times (ns), ascending
        self.times: dict[str, list[int]] = {}
        for s, n in (state.get("t") or {}).items():
            self.times.setdefault(parts.get(s, "0"), []).append(int(n))
        for v in self.marks.values():
            v.sort()
        for tv in self.times.values():
            tv.sort()

    def open(self, step: int) -> None:
        """A new pending step."""
        bisect.insort(self.order, step)
        self.got[step] = set()
        self.ahead[step] = 0

    def move(self, state: WindowState, src: str, mark: int, was: str, part: str) -> None:
        """Source ``src``'s watermark becomes ``mark`` (never lower) and its partition
        ``part`` (``was`` before); its event time follows it to the new partition."""
        marks = state["src"]
        had = marks.get(src)
        old = None if had is None else int(had)
        if old is None:
            bisect.insort(self.wm, mark)
            bisect.insort(self.marks.setdefault(part, []), (mark, src))
        else:  # _remove and _remove_in, inline (every report moves one)
            _replace(self.wm, old, mark)
            if was == part:
                _replace(self.marks[was], (old, src), (mark, src))
            else:
                v = self.marks[was]
                del v[bisect.bisect_left(v, (old, src))]
                if not v:
                    del self.marks[was]
                bisect.insort(self.marks.setdefault(part, []), (mark, src))
        marks[src] = mark
        times = state.get("t") or {}
        if was != part and src in times:
            _remove_in(self.times, was, int(times[src]))
            bisect.insort(self.times.setdefault(part, []), int(times[src]))
        # pending steps it reported and has passed now
        rank = int(src)
        lo = 0 if old is None else bisect.bisect_left(self.order, old)
        for k in self.order[lo : bisect.bisect_left(self.order, mark)]:
            if rank in self.got[k]:
                self.ahead[k] += 1

    def time(self, part: str, src: str, old: int | None, new: int) -> None:
        """Source ``src`` (on ``part``) has the event time ``new`` (ns), ``old`` before."""
        if old is not None:
            _replace(self.times[part], int(old), new)
        else:
            bisect.insort(self.times.setdefault(part, []), new)

    def passed(self, step: int) -> int:
        """Sources that did not report ``step`` and have a newer one."""
        return len(self.wm) - bisect.bisect_right(self.wm, step) - self.ahead[step]

    def watermark(self) -> int:
        """The key's watermark (module doc): the lowest partition's upper median."""
        marks = self.marks
        if len(marks) == 1:  # one input partition (the usual key): no generator
            for v in marks.values():
                return v[len(v) // 2][0]
        return min((v[len(v) // 2][0] for v in marks.values()), default=-1)


def _replace(values: list[Any], old: Any, new: Any) -> None:
    """Replace one ``old`` by ``new`` in the sorted ``values``: in place when that keeps
    them sorted (a watermark moving on by a step), else removed and inserted. The last of
    equal ``old`` values is the one replaced (many sources share a watermark): a larger
    ``new`` then stays in place unless it passes a larger value."""
    at = bisect.bisect_right(values, old) - 1
    if (at + 1 == len(values) or values[at + 1] >= new) and (at == 0 or values[at - 1] <= new):
        values[at] = new
    else:
        del values[at]
        bisect.insort(values, new)


def _remove(values: list[Any], value: Any) -> None:
    """Remove one ``value`` from the sorted ``values``."""
    del values[bisect.bisect_left(values, value)]


def _remove_in(by_part: dict[str, list[Any]], part: str, value: Any) -> None:
    """Remove one ``value`` from partition ``part``'s sorted list (dropped once empty)."""
    _remove(by_part[part], value)
    if not by_part[part]:
        del by_part[part]


def _own_index(state: WindowState) -> _Index | None:
    """``state``'s index, if it has one of its own."""
    ix: _Index | None = getattr(state.get("src"), "ix", None)
    if ix is None or ix.owner != id(state) or ix.pending is not state["pending"]:
        return None
    return ix


def _index(state: WindowState) -> _Index:
    """``state``'s index, rebuilt when absent (a restored state) or not its own."""
    ix = _own_index(state)
    if ix is None:
        src = _Sources(state["src"])
        state["src"] = src
        ix = src.ix = _Index(state)
    return ix


def _due(
    state: WindowState,
    ix: _Index,
    lateness: int,
    max_pending: int,
    silent: int = 0,
    silent_ns: int = 0,
) -> list[ClosedStep]:
    """Close the pending steps whose sources are all accounted for, in step order."""
    out: list[ClosedStep] = []
    steps = ix.order
    while len(steps) > max_pending:
        out.append(_close(state, steps.pop(0), timed_out=False, incomplete=True))
        del ix.got[out[-1].step], ix.ahead[out[-1].step]
    newest = ix.wm[-1]
    behind = bisect.bisect_right(steps, ix.watermark())  # pending steps at or below it
    sources = len(state["src"])
    pending = state["pending"]
    done = 0
    for i, step in enumerate(steps):
        exp = pending[str(step)]["exp"]
        got = ix.got[step]
        if len(got) >= exp or (newest > step and len(got) + ix.passed(step) >= exp):
            out.append(_close(state, step, timed_out=False))
        elif behind - i - 1 >= lateness * (1 if sources >= exp else 8):
            # the watermark passed `lateness` newer steps; while some expected source has
            # not reported at all (its partition not fetched yet: a late start, a restart),
            # 8 times that
            out.append(_close(state, step, timed_out=True))
        elif (
            silent > 0
            # one partition: its upper median is the key's watermark, `behind` pending
            # steps at or below it: what _all_silent tests first (most reports stop here)
            and (len(ix.marks) > 1 or behind - i - 1 >= silent)
            and _all_silent(state, ix, step, i, exp, (silent, silent_ns))
        ):
            out.append(_close(state, step, timed_out=True))
        else:
            break  # monotone: a later step is not closable either
        done += 1
        del ix.got[step], ix.ahead[step]
    del steps[:done]
    return out


def _all_silent(
    state: WindowState, ix: _Index, step: int, i: int, exp: int, silent: tuple[int, int]
) -> bool:
    """Whether every source not accounted for at ``step`` (pending index ``i``) is known and
    silent in its partition: the upper median of its partition's sources passed ``step`` by
    ``silent[0]`` pending steps and the source's own newest event time by ``silent[1]`` ns.
    Monotone in the step, as the other rules. Checked partition by partition, the cheap
    tests first: one failing ends it (the usual answer)."""
    own_t = state.get("t") or {}
    got = ix.got[step]
    behind = 0  # known sources that neither reported nor passed it
    for part, v in ix.marks.items():
        tv = ix.times.get(part)
        first = True
        for _, s in itertools.islice(v, bisect.bisect_left(v, (step,))):
            if int(s) in got:
                continue  # (only in a state of the version before watermarks)
            if first:
                if len(v) < 2:
                    return False  # alone on its partition: never silent
                if bisect.bisect_right(ix.order, v[len(v) // 2][0]) - i - 1 < silent[0]:
                    return False
                first = False
            if tv and tv[len(tv) // 2] - int(own_t.get(s, 0)) < silent[1]:
                return False
            behind += 1
    # else nobody to wait for (the other rules), or a source never seen
    return behind > 0 and len(got) + ix.passed(step) + behind >= exp


def _close(
    state: WindowState, step: int, *, timed_out: bool, incomplete: bool = False
) -> ClosedStep:
    pend = state["pending"].pop(str(step))
    closed = state["closed"]
    closed.append(step)
    closed.sort()
    if len(closed) > _MAX_CLOSED:
        del closed[: len(closed) - _MAX_CLOSED]
    return ClosedStep(step, tuple(sorted(pend["got"])), int(pend["exp"]), timed_out, incomplete)
