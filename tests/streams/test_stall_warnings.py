"""A worker says when a send or an input partition has been stuck, instead of going quiet."""

from __future__ import annotations

from argus.streams.app import stall_warnings


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
