"""Kernel noise of real profiler traces, to calibrate :class:`argus.sim.mega.Noise`.

``python -m argus.sim.calibrate [--min-us 50] TRACE.json.gz ...`` prints, per Kineto
(Chrome trace JSON) file, the spread of each compute kernel across profiler steps:

* per launch: a name's launches of one step sorted by duration are matched with the same
  quantile of the other steps (launch order differs between steps), CV across steps;
* per name: CV of the name's summed time per step;
* outliers: launches more than 1.5x / 2x their matched median.

The first step (warm-up) and NCCL kernels (their time is mostly waiting) are left out, and
so are names whose launch count differs between steps. Figures: ``docs/simulator.md``.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["KernelSpread", "kernel_spread", "main"]


@dataclass(frozen=True)
class KernelSpread:
    """Spread of a trace's compute kernels across steps (fractions)."""

    file: str
    steps: int
    names: int
    launches: int
    launch_cv: tuple[float, float, float, float]  # p25, p50, p75, p90
    total_cv: tuple[float, float, float, float]
    over_1_5x: float
    over_2x: float


def _load(path: str | Path) -> dict[str, Any]:
    opener: Any = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def kernel_spread(path: str | Path, *, min_us: float = 50.0) -> KernelSpread:
    """The spread of one trace's compute kernels (launches of at least ``min_us`` µs mean).

    Raises
    ------
    ValueError
        Fewer than three ``ProfilerStep#`` annotations, or no kernel repeats in every step.
    """
    ev = _load(path).get("traceEvents", [])
    steps = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in ev
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    )
    if len(steps) < 3:
        raise ValueError(f"{path}: {len(steps)} profiler steps; need >= 3")
    launch = {
        e["args"].get("correlation"): float(e["ts"])
        for e in ev
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e
    }
    per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for k in ev:
        if k.get("cat") != "kernel" or k.get("ph") != "X" or "nccl" in k["name"].lower():
            continue
        t = launch.get(k.get("args", {}).get("correlation"), float(k["ts"]))
        for i, (a, b) in enumerate(steps):
            if i > 0 and a <= t < b:  # step 0: warm-up
                per[k["name"]][i].append(float(k["dur"]))
                break
    cvs: list[float] = []
    tots: list[float] = []
    ratios: list[float] = []
    names = 0
    for bystep in per.values():
        if len(bystep) < len(steps) - 1 or len({len(v) for v in bystep.values()}) != 1:
            continue
        arr = np.sort(np.array([bystep[i] for i in sorted(bystep)]), axis=1)  # (S, n)
        if arr.mean() < min_us:
            continue
        names += 1
        cvs.extend((arr.std(axis=0, ddof=1) / arr.mean(axis=0)).tolist())
        tot = arr.sum(axis=1)
        tots.append(float(tot.std(ddof=1) / tot.mean()))
        ratios.extend((arr / np.median(arr, axis=0)).ravel().tolist())
    if not names:
        raise ValueError(f"{path}: no compute kernel of >= {min_us} us repeats in every step")
    q = (25, 50, 75, 90)
    lc = np.percentile(cvs, q)
    tc = np.percentile(tots, q)
    r = np.asarray(ratios)
    return KernelSpread(
        Path(path).name,
        len(steps),
        names,
        len(cvs),
        (float(lc[0]), float(lc[1]), float(lc[2]), float(lc[3])),
        (float(tc[0]), float(tc[1]), float(tc[2]), float(tc[3])),
        float((r > 1.5).mean()),
        float((r > 2.0).mean()),
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--min-us", type=float, default=50.0, help="mean launch length, us")
    args = ap.parse_args(argv)
    print(f"compute kernels >= {args.min_us:g} us; CV p25/p50/p75/p90")
    for p in args.traces:
        s = kernel_spread(p, min_us=args.min_us)
        lc = "/".join(f"{x:.3f}" for x in s.launch_cv)
        tc = "/".join(f"{x:.3f}" for x in s.total_cv)
        print(
            f"{s.file[:44]:44s} steps {s.steps} names {s.names:3d} launches {s.launches:4d}  "
            f"per launch {lc}  per name-step {tc}  >1.5x {s.over_1_5x:.2%} >2x {s.over_2x:.2%}"
        )


if __name__ == "__main__":
    main()
