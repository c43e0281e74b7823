"""The overhead budget: the collectors watch their own cost and back off past a limit.

Pure bookkeeping, no clocks: the caller feeds one ``(overhead_ns, step_ns)`` pair per step.
Over a sliding window of steps the ratio ``sum(overhead) / sum(step time)`` is compared with
the budget (default 1%). Past it, the *level* rises by one (each level halves the kernel
duty cycle); when the ratio stays under a quarter of the budget, the level falls back one.
Changes are at least ``window // 2`` steps apart so one expensive kernel window does not
flip the state back and forth.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["BudgetDecision", "OverheadBudget"]


@dataclass(frozen=True)
class BudgetDecision:
    """What :meth:`OverheadBudget.observe` concluded: the new level and whether it changed."""

    level: int
    changed: bool
    ratio: float


class OverheadBudget:
    """Sliding-window overhead ratio with hysteresis.

    Parameters
    ----------
    budget : float
        Allowed fraction of step time (0.01 = 1%).
    window_steps : int
        Steps in the sliding window (should cover at least one kernel duty period).
    max_level : int
        Deepest back-off level (each level halves the kernel duty cycle).
    """

    def __init__(self, budget: float = 0.01, *, window_steps: int = 100, max_level: int = 10):
        self.budget = budget
        self.window_steps = max(4, window_steps)
        self.max_level = max_level
        self.level = 0
        self._pairs: deque[tuple[int, int]] = deque()
        self._over = 0
        self._total = 0
        self._since_change = 0

    @property
    def backed_off(self) -> bool:
        return self.level > 0

    def observe(self, overhead_ns: int, step_ns: int) -> BudgetDecision:
        """Add one step; return the (possibly new) back-off level.

        Parameters
        ----------
        overhead_ns : int
            Collector time on the training thread during the step, ns.
        step_ns : int
            Wall duration of the step, ns.
        """
        self._pairs.append((overhead_ns, step_ns))
        self._over += overhead_ns
        self._total += step_ns
        if len(self._pairs) > self.window_steps:
            o, s = self._pairs.popleft()
            self._over -= o
            self._total -= s
        self._since_change += 1
        ratio = self._over / self._total if self._total > 0 else 0.0
        changed = False
        if (
            len(self._pairs) >= self.window_steps // 2
            and self._since_change >= self.window_steps // 2
        ):
            if ratio > self.budget and self.level < self.max_level:
                self.level += 1
                changed = True
            elif ratio < self.budget / 4 and self.level > 0:
                self.level -= 1
                changed = True
            if changed:
                self._since_change = 0
        return BudgetDecision(self.level, changed, ratio)
