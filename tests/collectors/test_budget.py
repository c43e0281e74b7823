"""The overhead budget backs off past its limit and recovers below a quarter of it."""

from __future__ import annotations

from argus.collectors.budget import OverheadBudget


def test_backs_off_when_over_budget_and_recovers() -> None:
    b = OverheadBudget(0.01, window_steps=20)
    levels = []
    for _ in range(40):  # 5% overhead
        levels.append(b.observe(5_000_000, 100_000_000).level)
    assert b.backed_off and max(levels) >= 2
    assert levels[:9] == [0] * 9  # no decision before half a window
    for _ in range(200):  # 0.1% overhead
        b.observe(100_000, 100_000_000)
    assert b.level == 0 and not b.backed_off


def test_under_budget_never_backs_off() -> None:
    b = OverheadBudget(0.01, window_steps=10)
    for _ in range(100):
        assert not b.observe(500_000, 100_000_000).changed  # 0.5%
    assert b.level == 0


def test_one_expensive_window_among_cheap_steps_is_averaged() -> None:
    # a kernel window costing 20% of one step, every 50 steps = 0.4% on average
    b = OverheadBudget(0.01, window_steps=100)
    for i in range(500):
        b.observe(20_000_000 if i % 50 == 0 else 10_000, 100_000_000)
    assert b.level == 0
