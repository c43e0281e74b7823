"""Step-time spikes no rank made page nobody (issue 18): a checkpoint every 50 steps (every
rank 8x) is an L1 ``jitter`` window with no L2 finding; before, its margin (8x against 2x)
alone gave the job-level culprit confidence 0.56 and a page (``argus.sim`` mega-checkpoint).
A spike a rank made still pages, through L2 (:func:`argus.detectors.l2.spikes`)."""

from __future__ import annotations

import numpy as np

from argus.detectors import funnel, l1, l2
from tests.detectors.l2_noise import Fault, group_windows, simulate


def _triggers(job_steps: int, faults: tuple[Fault, ...]) -> list[dict[str, object]]:
    job = simulate(64, job_steps, seed=6, checkpoint_every=50, hiccups=0.03, faults=faults)
    it = job.iter_ms.max(axis=0) * 1e6
    wins: dict[int, list[l2.GroupWindow]] = {}
    for w in group_windows(job, 4, slide=1):
        wins.setdefault(int(w.steps[-1]), []).append(w)
    seen: set[str] = set()
    buckets: dict[int, list[object]] = {}
    for st in range(job_steps):
        fs = l1.detect(np.arange(st + 1), it[: st + 1], job="noise") if st else []
        for w in wins.get(st, []):
            fs += l2.detect(w)
        for f in fs:
            if f.id not in seen:
                seen.add(f.id)
                buckets.setdefault(f.window_end_step // 10, []).append(f)
    state, out = funnel.FunnelState(), []
    for k in range(job_steps // 10 + 3):
        state, o = funnel.step(state, buckets.get(k, []))  # type: ignore[arg-type]
        out += [a for a in o.alerts if a["action"] == "trigger"]
    return out


def test_checkpoints_page_nobody_and_a_stall_pages_its_rank() -> None:
    assert _triggers(110, ()) == []
    stall = (Fault(21, "backward", stall_ms=1500.0, steps=(33, 78)),)
    pages = _triggers(110, stall)
    assert pages and all(a["ranks"] == [21] for a in pages)
