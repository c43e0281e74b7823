"""L3 block cost in the stream agent: wire records -> findings (issue 5's kernel-path profile).

One L3 block = one scope group's kernel summaries over ``l3_windows`` windows. Two input
paths in the same run, on the same encoded records:

* **objects**: one ``Summary`` per (rank, kernel, stream, window), merged per rank
  (``rank_kernels_from_summaries`` -> ``RankKernels``, as ``argus diagnose``): the first version;
* **columnar**: ``table_from_summaries`` straight from the wire columns (what the agent runs).

    .venv/bin/python bench/bench_l3_block.py --ranks 128 --windows 10 --events 3000
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np

from argus.detectors.kernel_inputs import rank_kernels_from_summaries
from argus.detectors.l3_window import detect_window, table_from_summaries
from argus.schemas import Codec
from argus.sim.layout import Layout
from argus.streams import synth
from argus.summaries.summary_record import KernelNames, summarize_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=128, help="ranks in the scope group")
    ap.add_argument("--windows", type=int, default=10, help="windows per L3 block")
    ap.add_argument("--events", type=int, default=3000, help="kernel events per rank-window")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    lay = Layout(dp=a.ranks, tp=1, pp=1, ep=1)
    mix = synth.default_mix(0)
    rng = np.random.default_rng(0)
    codec = Codec()
    wire = []
    for r in range(a.ranks):
        announced: set[int] = set()  # names travel once per rank, as from the compressor
        for w in range(a.windows):
            b = synth.kernel_batch(
                rng, mix, job="j", rank=r, window_id=w, n_events=a.events, coords=lay.coords(r)
            )
            rec = summarize_batch(b, announced=announced)
            announced.update(int(n["id"]) for n in rec["kernel_names"])
            wire.append(codec.encode("kernel_summary", rec))
    print(
        f"L3 block: {a.ranks} ranks x {a.windows} windows = {len(wire)} kernel_summary records, "
        f"{sum(map(len, wire)) / 1e6:.1f} MB"
    )
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(a.repeat):
        for path in ("objects", "columnar"):
            t0 = time.perf_counter()
            recs = [codec.decode_as("kernel_summary", v) for v in wire]
            book = KernelNames()
            book.update_many(recs)
            t1 = time.perf_counter()
            inp = (
                rank_kernels_from_summaries(recs, book)
                if path == "objects"
                else table_from_summaries(recs, book)
            )
            t2 = time.perf_counter()
            found = detect_window("j", inp, window=(0, a.windows - 1, 0, 1))
            t3 = time.perf_counter()
            times[path].append(t3 - t0)
            times[path + ":decode"].append(t1 - t0)
            times[path + ":input"].append(t2 - t1)
            times[path + ":detect"].append(t3 - t2)
    for path in ("objects", "columnar"):
        med = {k: float(np.median(times[f"{path}:{k}"])) for k in ("decode", "input", "detect")}
        print(
            f"  {path:9s} {np.median(times[path]):6.2f} s per block "
            f"(decode {med['decode']:.2f}, build input {med['input']:.2f}, detect {med['detect']:.2f}); "
            f"{len(found)} findings"
        )
    print(
        f"  speed-up columnar vs objects: {np.median(times['objects']) / np.median(times['columnar']):.1f}x"
    )


if __name__ == "__main__":
    main()
