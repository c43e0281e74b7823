"""``windows.add`` alone (issue 21): the indexed version against the algorithm it replaced.

One key with ``--sources`` sources on ``--partitions`` input partitions reports ``--steps``
steps: within a step the sources arrive in a random order, and a quarter of them run one
step ahead of the rest (arrival skew), as a rank block sees them; the silent rule is on
(8 steps, 10 s), as in the steps roles. The same reports go through
:func:`argus.streams.windows.add` and through the reference (``tests/pipeline/
windows_reference.py``, the algorithm of a77280f), alternately per repetition, in one
process; CPU per report, medians, and a check that both closed the same steps.

    .venv/bin/python bench/bench_windows_add.py --sources 256 --steps 40 --reps 3
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.streams import windows  # noqa: E402
from tests.pipeline import windows_reference  # noqa: E402


def _reports(sources: int, partitions: int, steps: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    ahead = set(rnd.sample(range(sources), sources // 4))
    out: list[dict[str, Any]] = []
    for k in range(steps + 1):
        batch = [(k, r) for r in range(sources) if r in ahead and k < steps]
        batch += [(k - 1, r) for r in range(sources) if r not in ahead and k > 0]
        rnd.shuffle(batch)
        out += [
            {
                "step": step,
                "rank": r,
                "expected": sources,
                "part": str(r % partitions),
                "silent": 8,
                "silent_ns": 10 * 10**9,
                "t_ns": step * 10**9,
            }
            for step, r in batch
        ]
    return out


def _run(add: Callable[..., Any], reports: list[dict[str, Any]]) -> tuple[float, list[int]]:
    state = windows.new_state()
    closed: list[int] = []
    c0 = time.process_time()
    for kw in reports:
        closed += [c.step for c in add(state, **kw)[1]]
    return 1e6 * (time.process_time() - c0) / len(reports), closed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", type=int, default=256)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    reports = _reports(a.sources, a.partitions, a.steps, seed=1)
    new: list[float] = []
    ref: list[float] = []
    for _ in range(a.reps):
        t_new, c_new = _run(windows.add, reports)
        t_ref, c_ref = _run(windows_reference.add, reports)
        assert c_new == c_ref, "the indexed add closed other steps than the reference"
        new.append(t_new)
        ref.append(t_ref)
    n, r = statistics.median(new), statistics.median(ref)
    print(
        f"sources {a.sources} partitions {a.partitions} steps {a.steps} reports {len(reports)}:"
        f" add {n:.1f} us/report, reference (a77280f) {r:.1f} us/report, {r / n:.1f}x"
    )


if __name__ == "__main__":
    main()
