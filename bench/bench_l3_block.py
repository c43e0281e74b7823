"""L3 block cost in the stream agent: wire records -> findings (issue 5's kernel-path profile).

One L3 block = one scope group's kernel summaries over ``l3_windows`` windows. Two input
paths in the same run, on the same encoded records:

* **objects**: one ``Summary`` per (rank, kernel, stream, window), merged per rank
  (``rank_kernels_from_summaries`` -> ``RankKernels``, as ``argus diagnose``): the first version;
* **columnar**: ``table_from_summaries`` straight from the wire columns (what the agent runs).

With ``--baseline DIR`` (e.g. ``git worktree add DIR <commit>``) the columnar path of the
``argus`` package under DIR runs in the same rounds on the same records (its modules loaded
beside this tree's), and ``detect_window`` of both trees is timed side by side on the same
table: the detect time per block of the two trees from one run, and whether their findings
are equal.

    .venv/bin/python bench/bench_l3_block.py --ranks 128 --windows 10 --events 3000
    .venv/bin/python bench/bench_l3_block.py --ranks 16 --baseline /tmp/wt_before

``--capture JOB --tables FILE`` runs ``argus diagnose JOB`` in this process and keeps every
table the L3 role judges (pickled to FILE); ``--tables FILE`` alone then times
``detect_window`` on those blocks, this tree's and ``--baseline``'s alternated per block
(the real job's layout: e.g. 512 ranks x 120 steps, 96 blocks of 16 cells of 64 ranks).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import sys
import time
from collections import defaultdict
from types import SimpleNamespace

import numpy as np

from argus.detectors.kernel_inputs import rank_kernels_from_summaries
from argus.detectors.l3_window import detect_window, table_from_summaries
from argus.schemas import Codec
from argus.sim.layout import Layout
from argus.streams import synth
from argus.summaries.summary_record import KernelNames, summarize_batch


def baseline_lib(path: str) -> SimpleNamespace:
    """``table_from_summaries``, ``detect_window`` and ``KernelNames`` of the ``argus`` package
    under ``path``: its modules imported while this tree's are set aside in ``sys.modules``,
    then this tree's put back (each tree's functions keep their own module globals)."""
    mine = {k: m for k, m in sys.modules.items() if k == "argus" or k.startswith("argus.")}
    for k in mine:
        del sys.modules[k]
    sys.path.insert(0, os.path.abspath(path))
    try:
        l3w = importlib.import_module("argus.detectors.l3_window")
        sr = importlib.import_module("argus.summaries.summary_record")
        return SimpleNamespace(
            table=l3w.table_from_summaries,
            detect=l3w.detect_window,
            names=sr.KernelNames,
            table_cls=l3w.KernelTable,
        )
    finally:
        sys.path.remove(os.path.abspath(path))
        for k in [k for k in sys.modules if k == "argus" or k.startswith("argus.")]:
            del sys.modules[k]
        sys.modules.update(mine)


def capture(job: str, out: str) -> None:
    """Run ``argus diagnose job`` here, pickling each (table, window, cfg, routing) L3 judges."""
    import argus.streams.roles.l3 as role
    from argus.cli import main as cli

    seen = []
    inner = role.detect_window

    def keep(job_id: str, table: object, **kw: object) -> object:
        seen.append((table, kw))
        return inner(job_id, table, **kw)  # type: ignore[arg-type]

    role.detect_window = keep  # type: ignore[assignment]
    try:
        cli(["diagnose", job, "--json", os.devnull])
    finally:
        role.detect_window = inner
    with open(out, "wb") as f:
        pickle.dump(seen, f)
    print(f"{len(seen)} L3 blocks -> {out}")


def replay(path: str, base: SimpleNamespace | None, repeat: int) -> None:
    """Time ``detect_window`` over captured blocks, this tree's and ``base``'s alternated."""
    with open(path, "rb") as f:
        blocks = pickle.load(f)
    print(f"{len(blocks)} L3 blocks from {path}; load {os.getloadavg()[0]:.2f}")
    trees = [("this tree", detect_window, lambda t: t)]
    if base:
        trees.append(("baseline", base.detect, lambda t: base.table_cls(**vars(t))))
    tot: dict[str, list[float]] = defaultdict(list)
    same = True
    for _ in range(repeat):
        acc = dict.fromkeys([n for n, _, _ in trees], 0.0)
        for table, kw in blocks:
            got = []
            for name, detect, conv in trees:
                t = conv(table)
                t0 = time.perf_counter()
                got.append([repr(x) for x in detect("j", t, **kw)])
                acc[name] += time.perf_counter() - t0
            same &= all(g == got[0] for g in got)
        for name, v in acc.items():
            tot[name].append(v)
    for name, v in tot.items():
        print(
            f"  {name:9s} detect_window {np.median(v):.3f} s over the blocks (median of {repeat})"
        )
    if base:
        ratio = np.median(tot["baseline"]) / np.median(tot["this tree"])
        print(f"  baseline / this tree: {ratio:.2f}x; findings equal: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=128, help="ranks in the scope group")
    ap.add_argument("--windows", type=int, default=10, help="windows per L3 block")
    ap.add_argument("--events", type=int, default=3000, help="kernel events per rank-window")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="a source tree whose columnar path runs alongside")
    ap.add_argument("--capture", metavar="JOB", help="record the L3 blocks of diagnosing JOB")
    ap.add_argument("--tables", metavar="FILE", help="L3 blocks recorded by --capture")
    a = ap.parse_args()
    if a.capture:
        capture(a.capture, a.tables)
        return
    base = baseline_lib(a.baseline) if a.baseline else None
    if a.tables:
        replay(a.tables, base, a.repeat)
        return
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
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    times: dict[str, list[float]] = defaultdict(list)
    found: dict[str, list[object]] = {}
    paths = ["objects", "columnar"] + (["baseline"] if base else [])
    for _ in range(a.repeat):
        for path in paths:
            names_cls = base.names if path == "baseline" and base else KernelNames
            t0 = time.perf_counter()
            recs = [codec.decode_as("kernel_summary", v) for v in wire]
            book = names_cls()
            book.update_many(recs)
            t1 = time.perf_counter()
            if path == "objects":
                inp = rank_kernels_from_summaries(recs, book)
            elif path == "baseline" and base:
                inp = base.table(recs, book)
            else:
                inp = table_from_summaries(recs, book)
            t2 = time.perf_counter()
            detect = base.detect if path == "baseline" and base else detect_window
            found[path] = detect("j", inp, window=(0, a.windows - 1, 0, 1))
            t3 = time.perf_counter()
            times[path].append(t3 - t0)
            times[path + ":decode"].append(t1 - t0)
            times[path + ":input"].append(t2 - t1)
            times[path + ":detect"].append(t3 - t2)
    for path in paths:
        med = {k: float(np.median(times[f"{path}:{k}"])) for k in ("decode", "input", "detect")}
        print(
            f"  {path:9s} {np.median(times[path]):6.2f} s per block "
            f"(decode {med['decode']:.2f}, build input {med['input']:.3f}, "
            f"detect {med['detect']:.3f}); {len(found[path])} findings"
        )
    print(
        f"  speed-up columnar vs objects: {np.median(times['objects']) / np.median(times['columnar']):.1f}x"
    )
    if base:
        ratio = np.median(times["baseline:detect"]) / np.median(times["columnar:detect"])
        same = [repr(f) for f in found["baseline"]] == [repr(f) for f in found["columnar"]]
        print(
            f"  detect per block: baseline {np.median(times['baseline:detect']) * 1e3:.1f} ms, "
            f"this tree {np.median(times['columnar:detect']) * 1e3:.1f} ms ({ratio:.2f}x); "
            f"findings equal: {same}"
        )


if __name__ == "__main__":
    main()
