"""A worker says when a send or an input partition has been stuck, instead of going quiet."""

from __future__ import annotations

from argus.streams.app import stall_warnings, uncommitted_warnings


def test_a_send_not_taken_for_long_warns_and_a_fresh_one_does_not() -> None:
    out = stall_warnings(
        [("p.internal.steps-jobs", 0.0), ("p.anomalies", 95.0)], [], {}, 100.0, 10.0
    )
    assert out == [
        "send to p.internal.steps-jobs blocked for 100 s: the producer has not taken the record"
    ]


def test_a_partition_held_across_checks_warns_and_is_forgotten_once_fetched() -> None:
    since: dict[tuple[str, int], float] = {}
    tp = ("p.raw.steps", 0)
    assert stall_warnings([], [tp], since, 0.0, 10.0) == []  # first seen held: not yet
    assert stall_warnings([], [tp], since, 12.0, 10.0) == [
        "partition p.raw.steps[0] not fetched for 12 s (paused or buffer-full)"
    ]
    assert stall_warnings([], [], since, 20.0, 10.0) == [] and since == {}
    assert stall_warnings([], [tp], since, 25.0, 10.0) == []  # held again: counts anew


def test_fetched_records_not_committed_for_long_warn_until_commits_move() -> None:
    since: dict[tuple[str, int], tuple[int, float]] = {}
    tp = ("p.raw.steps", 0)
    assert uncommitted_warnings([(tp, 1920, 1088)], since, 0.0, 30.0) == []  # first seen
    assert uncommitted_warnings([(tp, 1920, 1088)], since, 20.0, 30.0) == []
    assert uncommitted_warnings([(tp, 1920, 1088)], since, 31.0, 30.0) == [
        "partition p.raw.steps[0] fetched to 1920 but committed at 1088 for 31 s: "
        "832 records fetched and not processed"
    ]
    assert uncommitted_warnings([(tp, 1990, 1400)], since, 40.0, 30.0) == []  # committing
    assert uncommitted_warnings([(tp, 1990, 1990)], since, 80.0, 30.0) == [] and since == {}
    # a busy partition whose commits move every check never warns; nor one with no commit yet
    busy = [
        uncommitted_warnings([(tp, 100 * i + 50, 100 * i)], since, 10.0 * i, 30.0)
        for i in range(10)
    ]
    assert busy == [[]] * 10
    assert uncommitted_warnings([(tp, 5, None)], {}, 100.0, 30.0) == []
