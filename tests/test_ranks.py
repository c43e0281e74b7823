"""Rank lists as text (argus.ranks): the one formatter of reports, alerts and commands."""

from __future__ import annotations

from argus.ranks import rank_ranges


def test_runs_of_consecutive_ranks() -> None:
    assert rank_ranges([7, 1, 2, 3, 3]) == "1-3, 7"
    assert rank_ranges([]) == ""
    assert rank_ranges([5]) == "5"


def test_separator_and_cap() -> None:
    ranks = list(range(0, 40, 2))  # 20 runs of one rank
    assert rank_ranges(ranks[:3], sep=",", most=16) == "0,2,4"
    assert rank_ranges(ranks, sep=",", most=16).endswith(",28,30,... (20 ranks)")
    assert rank_ranges([0, 1, 2, 4], sep=",", most=1) == "0-2,... (4 ranks)"
