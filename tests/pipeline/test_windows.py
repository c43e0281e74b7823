"""Step windows: close on completion, on a stall, or when the job went on without a rank."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from argus.streams import windows


def test_closes_when_every_rank_reported_and_counts_dups_and_late() -> None:
    s = windows.new_state()
    assert windows.add(s, step=0, rank=0, expected=2, now_s=0.0) == ("new", [])
    assert windows.add(s, step=0, rank=0, expected=2, now_s=0.1) == ("dup", [])
    status, closed = windows.add(s, step=0, rank=1, expected=2, now_s=0.2)
    assert status == "new" and closed == [windows.ClosedStep(0, (0, 1), 2, False)]
    assert windows.add(s, step=0, rank=1, expected=2, now_s=0.3) == ("late", [])
    assert s["late"] == 1 and s["pending"] == {}
    json.dumps(s)  # a faust table holds it as JSON


def test_a_stalled_job_times_out_with_the_missing_rank() -> None:
    s = windows.new_state()
    windows.add(s, step=5, rank=0, expected=3, now_s=100.0)
    windows.add(s, step=5, rank=2, expected=3, now_s=100.5)
    assert windows.expire(s, now_s=105.0, grace_s=10.0) == []
    (c,) = windows.expire(s, now_s=111.0, grace_s=10.0)
    assert c.step == 5 and c.ranks == (0, 2) and c.missing == 1 and c.timed_out


def test_a_lagging_consumer_does_not_declare_queued_ranks_missing() -> None:
    s = windows.new_state()
    windows.add(s, step=0, rank=0, expected=2, now_s=0.0)
    # reports keep arriving (other steps), 20 s later, but only 3 newer steps: still open
    for t, step in ((10.0, 1), (15.0, 2), (20.0, 3)):
        windows.add(s, step=step, rank=0, expected=2, now_s=t)
    assert windows.expire(s, now_s=20.0, grace_s=10.0, skew_steps=8) == []
    # the job went on 8 steps without rank 1: step 0 (and 1, 2, 3) are old enough to close
    for step in range(4, 9):
        windows.add(s, step=step, rank=0, expected=2, now_s=21.0)
    closed = windows.expire(s, now_s=21.0, grace_s=10.0, skew_steps=8)
    assert [c.step for c in closed] == [0]
    assert closed[0].missing == 1


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), max_size=60))
def test_every_step_closes_at_most_once_and_reports_each_rank_once(
    reports: list[tuple[int, int]],
) -> None:
    s = windows.new_state()
    closed: list[windows.ClosedStep] = []
    for i, (step, rank) in enumerate(reports):
        closed += windows.add(s, step=step, rank=rank, expected=4, now_s=float(i))[1]
    closed += windows.expire(s, now_s=1e9, grace_s=1.0)
    steps = [c.step for c in closed]
    assert len(steps) == len(set(steps))
    assert set(steps) == {step for step, _ in reports}
    for c in closed:
        assert len(set(c.ranks)) == len(c.ranks)
        assert set(c.ranks) <= {r for st_, r in reports if st_ == c.step}
