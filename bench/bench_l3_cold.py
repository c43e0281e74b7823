"""A live L3 block's cost in a fresh process: the first block a worker judges, and the next.

The L3 worker judges a block of a 512-rank scope every 10 windows, its arrays (60-70 MB) in
fresh memory each time, so a warm median of repeats in one process (``bench_l3_block.py``)
hides what the first touch of that memory costs. Each round here starts one child process
per tree (alternating), which decodes a block's ``kernel_summary`` records, then times
``table_from_wire`` + ``detect_window`` on it twice: ``cold`` (the first block) and ``warm``.
A tree runs with its own worker settings: those :func:`argus.streams.app.build_app` applies
(:func:`argus.malloc.no_numpy_hugepages` where the tree has it).

    git worktree add /tmp/wt_before <commit>
    .venv/bin/python bench/bench_l3_cold.py --trees /tmp/wt_before . --rounds 4 --ranks 512

The records (512 ranks x 10 windows x 3,000 events, two ranks 1.5x slower: findings to
emit) are made once by this tree and pickled to ``--records``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

_CHILD = r"""
import json, pickle, sys, time
import argus.malloc as m
if hasattr(m, "no_numpy_hugepages"):
    m.no_numpy_hugepages()  # what build_app does in a worker of this tree
from argus.detectors.l3_window import detect_window, table_from_wire, wire_summary
from argus.schemas import Codec
from argus.summaries.summary_record import KernelNames
codec = Codec()
with open(sys.argv[1], "rb") as f:
    wire = pickle.load(f)
out = []
for _ in range(2):
    t0 = time.perf_counter()
    recs = [codec.decode_as("kernel_summary", v) for v in wire]
    book = KernelNames()
    book.update_many(recs)
    items = [wire_summary(r) for r in recs]
    t1 = time.perf_counter()
    table = table_from_wire(items, book)
    t2 = time.perf_counter()
    found = detect_window("j", table, window=(0, 9, 0, 1))
    t3 = time.perf_counter()
    out.append({"decode": t1 - t0, "table": t2 - t1, "detect": t3 - t2, "n": len(found)})
    del recs, items, table, found
print(json.dumps(out))
"""


def make_records(path: Path, ranks: int, windows: int, events: int) -> None:
    """A scope's block of encoded ``kernel_summary`` records, ranks 5 and 6 1.5x slower."""
    from argus.schemas import Codec
    from argus.sim.layout import Layout
    from argus.streams import synth
    from argus.summaries.summary_record import summarize_batch

    lay = Layout(dp=ranks, tp=1, pp=1, ep=1)
    mix = synth.default_mix(0)
    rng = np.random.default_rng(0)
    codec = Codec()
    wire = []
    for r in range(ranks):
        announced: set[int] = set()
        for w in range(windows):
            b = synth.kernel_batch(
                rng, mix, job="j", rank=r, window_id=w, n_events=events, coords=lay.coords(r)
            )
            if r in (5, 6):
                d = np.frombuffer(b["duration_ns"], "<i8") * 3 // 2
                b["duration_ns"] = d.astype("<i8").tobytes()
            rec = summarize_batch(b, announced=announced)
            announced.update(int(n["id"]) for n in rec["kernel_names"])
            wire.append(codec.encode("kernel_summary", rec))
    with open(path, "wb") as f:
        pickle.dump(wire, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trees", nargs="+", default=["."], help="source trees, alternated")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--events", type=int, default=3000)
    ap.add_argument("--records", default="/tmp/bench_l3_cold.pkl")
    a = ap.parse_args()
    rec = Path(a.records)
    if not rec.exists():
        make_records(rec, a.ranks, a.windows, a.events)
    print(f"block: {rec} ({rec.stat().st_size / 1e6:.0f} MB pickled); load {os.getloadavg()}")
    got: dict[str, list[list[dict[str, float]]]] = {t: [] for t in a.trees}
    for r in range(a.rounds):
        for tree in a.trees:
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            env.pop("NUMPY_MADVISE_HUGEPAGE", None)
            out = subprocess.run(
                [sys.executable, "-c", _CHILD, str(rec)],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            runs = json.loads(out.stdout)
            got[tree].append(runs)
            cells = "; ".join(
                f"{k} {x['decode']:.2f} + {x['table']:.2f} + {x['detect']:.2f} s"
                f" ({x['n']} findings)"
                for k, x in zip(("cold", "warm"), runs, strict=True)
            )
            print(f"  round {r + 1} {tree}: decode + table + detect: {cells}", flush=True)
    for tree, runs in got.items():
        for i, k in enumerate(("cold", "warm")):
            tot = [x[i]["table"] + x[i]["detect"] for x in runs]
            print(f"  {tree} {k}: table + detect median {np.median(tot):.2f} s")


if __name__ == "__main__":
    main()
