"""`argus diagnose` CPU of several source trees, runs alternated (issue 21's command bar).

Each run is a fresh process ``python -m argus.cli diagnose JOB --json OUT`` with
``PYTHONPATH`` and cwd the tree (a ``git worktree`` of the commit); it prints per run the
tree's commit, the load average before it, CPU s (user + sys of the child) and wall s, and
whether its JSON equals that of tree ``--ref`` (an index into the trees, default the last)
in the same round.

    .venv/bin/argus simulate compute-straggler --ranks 512 --steps 120 --seed 1 --out /tmp/diag/job
    git worktree add /tmp/wt_cd32 cd32e70; git worktree add /tmp/wt_now HEAD
    .venv/bin/python bench/bench_diagnose_ab.py /tmp/diag/job /tmp/wt_cd32 /tmp/wt_now --rounds 2 --ref 1
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_once(job: Path, tree: Path, out: Path) -> tuple[float, float]:
    """CPU s (user + sys) and wall s of one diagnose run of ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "argus.cli", "diagnose", str(job), "--json", str(out)],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("job", type=Path)
    ap.add_argument("trees", type=Path, nargs="+")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--ref", type=int, default=-1, help="tree whose JSON the others are compared to"
    )
    a = ap.parse_args()
    cpus: list[list[float]] = []  # per round, per tree
    with tempfile.TemporaryDirectory() as d:
        for i in range(1, a.rounds + 1):
            bodies: dict[int, bytes] = {}
            cpus.append([])
            for j, tree in enumerate(a.trees):
                rev = subprocess.run(
                    ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.strip()
                load = os.getloadavg()[0]
                out = Path(d) / f"{i}-{rev}.json"
                cpu, wall = run_once(a.job, tree, out)
                cpus[-1].append(cpu)
                bodies[j] = out.read_bytes()
                print(
                    f"{time.strftime('%H:%M:%S', time.gmtime())} UTC round {i} {rev}"
                    f" load {load:.2f} cpu {cpu:.1f} s wall {wall:.1f} s",
                    flush=True,
                )
            ref = bodies[a.ref % len(a.trees)]
            same = [j for j, b in bodies.items() if b == ref]
            print(f"round {i}: JSON equal to tree {a.ref % len(a.trees)}'s: trees {same}")
    # tree 0's CPU over each tree's, in the same round (the bar's ratio when tree 0 is the base)
    for j, tree in enumerate(a.trees):
        ratios = " ".join(f"{c[0] / c[j]:.2f}x" for c in cpus)
        print(f"tree {j} {tree}: tree 0's CPU / its CPU per round: {ratios}")


if __name__ == "__main__":
    main()
