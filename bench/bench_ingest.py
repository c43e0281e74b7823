"""``argus ingest`` throughput (trace events/s per core) and a 64-rank job end to end.

Writes a synthetic data-parallel GPU job in the Kineto trace format
(:func:`argus.ingest.synth.write_synthetic_job`: one ``.json.gz`` per rank, ``ProfilerStep#N``,
DDP/optimizer annotations, autograd ops, ``cudaLaunchKernel`` + kernels, an NCCL all-reduce),
one rank's forward ``--slow-factor`` times longer; then, as ``argus ingest DIR --out OUT &&
argus diagnose OUT`` do:

1. parse every file (:func:`argus.ingest.ingest`), CPU time of this one process = one core;
   the JSON decode (``json.loads``, the floor of any pure-Python reader) is timed apart;
2. write ``steps.avro`` / ``kernels.avro`` with the simulator's writer;
3. diagnose: the top verdict must name the slowed rank (exit status 1 otherwise).

With ``shared/data/kineto`` present, the real HolisticTraceAnalysis traces are parsed too.

    .venv/bin/python bench/bench_ingest.py                  # 64 ranks, 30 steps
    .venv/bin/python bench/bench_ingest.py --ranks 8 --steps 12 --kernels 64   # quick
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.diagnose import diagnose_path  # noqa: E402
from argus.ingest import IngestOptions, ingest  # noqa: E402
from argus.ingest.synth import write_synthetic_job  # noqa: E402
from argus.sim import write_avro  # noqa: E402


def _cpu() -> float:
    return time.process_time()


def _decode_s(files: list[Path]) -> float:
    """CPU seconds of gunzip + json.loads alone over ``files``."""
    t = _cpu()
    for f in files:
        raw = f.read_bytes()
        json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return _cpu() - t


def _real(kineto: Path) -> None:
    files = sorted(kineto.glob("*.json.gz"))
    t = _cpu()
    n = 0
    for f in files:
        res = ingest(f, IngestOptions(job="real"))
        n += res.n_events
    cpu = _cpu() - t
    dec = _decode_s(files)
    print(
        f"real HTA traces: {len(files)} files, {n:,} events, {cpu:.2f} s CPU -> "
        f"{n / cpu:,.0f} events/s/core (JSON decode {dec / cpu:.0%} of it)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--kernels", type=int, default=256, help="GPU kernels per rank and step")
    ap.add_argument("--slow-rank", type=int, default=None, help="default: ranks * 3 // 5")
    ap.add_argument("--slow-factor", type=float, default=1.3)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    slow = a.slow_rank if a.slow_rank is not None else a.ranks * 3 // 5
    work = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    try:
        t = time.monotonic()
        files = write_synthetic_job(
            work / "traces",
            ranks=a.ranks,
            steps=a.steps,
            kernels_per_step=a.kernels,
            slow_rank=slow,
            slow_factor=a.slow_factor,
        )
        size = sum(f.stat().st_size for f in files)
        print(
            f"wrote {a.ranks} ranks x {a.steps} steps x {a.kernels} kernels "
            f"({size / 2**20:.1f} MiB gzipped) in {time.monotonic() - t:.1f} s; rank {slow} "
            f"forward x{a.slow_factor}"
        )
        c0, w0 = _cpu(), time.monotonic()
        res = ingest(work / "traces", IngestOptions(job="bench-ingest"))
        c1, w1 = _cpu(), time.monotonic()
        counts = write_avro(res.records(), work / "job")
        c2 = _cpu()
        dec = _decode_s(files)
        parse = c1 - c0
        n = res.n_events
        print(
            f"parse: {n:,} events in {parse:.2f} s CPU ({w1 - w0:.2f} s wall) -> "
            f"{n / parse:,.0f} events/s/core; JSON decode alone {dec:.2f} s "
            f"({dec / parse:.0%} of the parse, {n / dec:,.0f} events/s)"
        )
        print(
            f"records: {counts} in {c2 - c1:.2f} s CPU; parse + write "
            f"{n / (c2 - c0):,.0f} events/s/core; {res.n_kernels:,} kernels"
        )
        t = time.monotonic()
        d = diagnose_path(work / "job")
        dt = time.monotonic() - t
        top = d.verdicts[0].culprit if d.verdicts else None
        named = top is not None and list(top.ranks) == [slow]
        print(
            f"diagnose: {dt:.1f} s, {len(d.verdicts)} culprit(s); top: "
            + (f"ranks {list(top.ranks)} {top.phase} ({'+'.join(top.levels)})" if top else "none")
            + (" -- the slowed rank" if named else f" -- NOT rank {slow}")
        )
        print(f"end to end (parse + write + diagnose): {time.monotonic() - w0:.1f} s wall")
        kineto = ROOT.parent / "shared" / "data" / "kineto"
        if kineto.is_dir():
            _real(kineto)
        return 0 if named else 1
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
