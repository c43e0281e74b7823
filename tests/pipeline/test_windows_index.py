"""The indexed step windows (:mod:`argus.streams.windows`) against the algorithm they replaced
(``windows_reference``, which recomputes everything per report): any interleaving of reports
(duplicates, late and out-of-order records, partitions that change, the silent rule on or off,
parameters that vary) and JSON round trips of the state (a faust table's restore) in between
give the same statuses, the same closed steps and the same state, report after report."""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from argus.streams import windows
from tests.pipeline import windows_reference as ref

Op = tuple[str, dict[str, Any]]


def _check_index(state: windows.WindowState) -> None:
    """The index kept up to date equals the one rebuilt from the state alone."""
    ix = windows._own_index(state)
    assert ix is not None
    fresh = windows._Index(state)
    for name in ("order", "got", "ahead", "wm", "marks", "times"):
        assert getattr(ix, name) == getattr(fresh, name), name


def _replay(ops: list[Op], start: dict[str, Any] | None = None) -> None:
    start = start or dict(windows.new_state())
    new, old = json.loads(json.dumps(start)), json.loads(json.dumps(start))
    for what, kw in ops:
        if what == "add":
            assert windows.add(new, **kw) == ref.add(old, **kw), kw
            _check_index(new)
        elif what == "flush":
            assert windows.flush(new) == ref.flush(old)
        else:  # a restore: the table's value read back from its changelog
            new, old = json.loads(json.dumps(new)), json.loads(json.dumps(old))
        assert json.dumps(new, sort_keys=True) == json.dumps(old, sort_keys=True)


_report = st.fixed_dictionaries(
    {
        "step": st.integers(-2, 14),
        "rank": st.integers(0, 5),
        "expected": st.integers(1, 7),
        "lateness": st.integers(0, 5),
        "max_pending": st.sampled_from([2, 5, windows.MAX_PENDING]),
        "part": st.sampled_from(["0", "1", "2"]),
        "silent": st.sampled_from([0, 0, 1, 2, 3]),
        "silent_ns": st.integers(0, 30),
        "t_ns": st.integers(-5, 60),
    }
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), _report),
            st.tuples(st.sampled_from(["json", "flush"]), st.just({})),
        ),
        max_size=80,
    )
)
def test_any_reports_give_what_the_reference_gives(ops: list[Op]) -> None:
    """Arbitrary reports over a few steps and sources: every rule and status meets every
    other, in any order."""
    _replay(ops)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(2, 24),  # sources
    st.integers(1, 4),  # input partitions
    st.integers(0, 6),  # lateness
    st.sampled_from([0, 2, 4]),  # silent steps (0: the rule off)
    st.sampled_from([0, 3, 10]),  # silent time (in steps' event time)
    st.integers(0, 2**32),  # the interleaving's seed
)
def test_streams_with_skew_stops_and_restores_give_what_the_reference_gives(
    sources: int, partitions: int, lateness: int, silent: int, silent_t: int, seed: int
) -> None:
    """Each source's steps in order (some skipped, some sources stopping, one moving to another
    partition), interleaved with skew, replays and records far behind, a restore now and
    then: the shapes the roles see."""
    rnd = random.Random(seed)
    stop = {r: rnd.choice([40, 40, 40, rnd.randrange(40)]) for r in range(sources)}
    part = {r: str(rnd.randrange(partitions)) for r in range(sources)}
    pos = dict.fromkeys(range(sources), 0)
    ops: list[Op] = []
    sent: list[dict[str, Any]] = []
    while any(pos[r] < stop[r] for r in pos):
        r = rnd.choice([q for q in pos if pos[q] < stop[q]])
        roll = rnd.random()
        if roll < 0.05 and sent:
            ops.append(("add", dict(rnd.choice(sent))))  # a replay or a record far behind
            continue
        if roll < 0.07:
            ops.append((rnd.choice(["json", "flush"]), {}))
            continue
        if roll < 0.08:
            part[r] = str(rnd.randrange(partitions))  # a repartition
        step = pos[r]
        pos[r] += rnd.choice([1, 1, 1, 1, 2])  # a dropped record now and then
        kw = {
            "step": step,
            "rank": r,
            "expected": sources,
            "lateness": lateness,
            "part": part[r],
            "silent": silent,
            "silent_ns": silent_t,
            "t_ns": step + rnd.randrange(3),
        }
        sent.append(kw)
        ops.append(("add", kw))
    ops.append(("flush", {}))
    _replay(ops)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.integers(0, 8), st.tuples(st.integers(1, 5), st.sets(st.integers(0, 5))), max_size=4
    ),
    st.lists(_report, max_size=40),
    st.booleans(),
)
@example(  # rank 1 reported step 5, then (its watermark unknown) step 2: not behind at 5
    {5: (5, {0, 1})},
    [
        {"step": k, "rank": r, "expected": 1 if k == 2 else 5, "lateness": 50, "silent": 1}
        for k, r in [(2, 1), (6, 2), (6, 3), (7, 2), (7, 3), (8, 2), (8, 3)]
    ],
    True,
)
def test_a_state_of_the_version_before_watermarks_loads(
    pending: dict[int, tuple[int, set[int]]], reports: list[dict[str, Any]], parts: bool
) -> None:
    """Pending steps whose reporters have no watermark (no ``src`` yet, nor ``part``, where
    the reference took only partition "0": it raised KeyError on another): the same as the
    reference from then on."""
    if not parts:
        reports = [{**kw, "part": "0"} for kw in reports]
    start: dict[str, Any] = {
        "pending": {str(k): {"exp": exp, "got": sorted(got)} for k, (exp, got) in pending.items()},
        "closed": [],
        "newest": max(pending, default=-1),
        "late": 0,
        **({"part": {}} if parts else {}),
    }
    _replay([("add", kw) for kw in reports], start)


def test_steps_older_than_the_closed_ones_kept_are_late() -> None:
    """Past the ``_MAX_CLOSED`` steps kept, an older step is late (or a replay), never new."""
    ops: list[Op] = [("add", {"step": k, "rank": 0, "expected": 1}) for k in range(300)]
    ops += [("add", {"step": k, "rank": r, "expected": 1}) for r in (1, 0) for k in (9, 43, 44)]
    _replay([*ops, ("json", {}), *ops[-4:]])
