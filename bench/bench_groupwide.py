"""Group-wide and host faults on the production-hard simulator (issue 18), offline.

Run: ``.venv/bin/python bench/bench_groupwide.py [--ranks 256] [--steps 40] [--only a,b]``

The stream engine runs the same comparison at its job tier (``argus/streams/roles/transfer.py``);
this runs it directly: every scenario's step records (``argus.sim``, no kernels) cut into
funnel windows of ``--window`` steps, each window's
:func:`argus.detectors.inputs.group_windows` of every group and its records' pipeline receives
(:func:`argus.detectors.groupwide.receive_rows`), hosts from the records. ``--layout`` runs
another layout (e.g. ``dp=8,tp=2,pp=4,ep=8``, the MoE one). Prints,
per scenario, the truth (host, ranks, onset) and per window what was named (kind/id, ratio,
z) and the seconds per window.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from argus.detectors import groupwide
from argus.detectors.inputs import group_windows
from argus.routing import Routing
from argus.sim import SimRun, simulate

SCENARIOS = (
    "mega-slow-nic",
    "mega-noise",
    "mega-jitter",
    "mega-uneven",
    "mega-checkpoint",
    "mega-hiccups",
    "mega-prod",
    "mega-two-stragglers",
    "mega-data-stall",
    "mega-gemm-gpu",
    "mega-moe-expert",
)


def run(
    name: str, ranks: int, steps: int, window: int, seed: int, layout: str | None = None
) -> dict[str, Any]:
    """Named groups/hosts per window of one scenario."""
    sim = SimRun.make(
        name, ranks=None if layout else ranks, layout=layout, steps=steps, seed=seed, kernels=False
    )
    recs = [rec for topic, _k, rec in simulate(sim) if topic == "raw.steps"]
    hosts = groupwide.hosts_of(recs)
    by: dict[int, list[dict[str, Any]]] = {}
    for rec in recs:
        by.setdefault(int(rec["step"]) // window, []).append(rec)
    named: list[list[str]] = []
    secs: list[float] = []
    for _w, rs in sorted(by.items()):
        t0 = time.perf_counter()
        fs = groupwide.detect(group_windows(rs, Routing.default()), hosts, records=rs)
        secs.append(time.perf_counter() - t0)
        named.append(
            [f"{f.group_kind}/{f.group_id} {f.evidence['ratio']}x z{f.score:.0f}" for f in fs]
        )
    t = sim.truth
    return {
        "scenario": name,
        "host": getattr(t, "host", None),
        "truth": t.to_dict(),
        "named": named,
        "s_per_window": max(secs) if secs else 0.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--only", default="")
    ap.add_argument("--layout", default=None)
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    print(f"bench_groupwide  ranks {args.ranks}  steps {args.steps}  window {args.window}")
    for n in names:
        r = run(n, args.ranks, args.steps, args.window, args.seed, args.layout)
        wins = "; ".join(f"w{i}: {', '.join(x) or '-'}" for i, x in enumerate(r["named"]))
        onset = r["truth"].get("onset_step", r["truth"].get("onset"))
        print(
            f"{n:22s} host {r['host'] or '-':9s} onset {onset}  {wins}"
            f"  ({r['s_per_window']:.1f} s/window)",
            flush=True,
        )


if __name__ == "__main__":
    main()
