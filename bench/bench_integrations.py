"""Collector overhead of the framework integrations in their CPU examples (issue 22).

    .venv/bin/python bench/bench_integrations.py --pairs 2 --steps 60

For each example (``examples/hf_trainer.py``, ``examples/lightning_ddp.py``,
``examples/megatron_timers.py``, ``examples/fsdp2_mlp.py``; 2 ranks over gloo, one core per
rank on a 2-core machine, no straggler): ``--pairs`` pairs of runs, collectors off then on (the callback or
``instrument_timers`` present or not; fresh processes each run), against the real local
broker under a private topic prefix. Per run, rank 0's training time (inside ``train()``/
``fit()``, start-up excluded) and, with collectors on, their own CPU: the training thread's
(``overhead_total_ns``, what step records carry as ``collector.overhead_ns``) and the
collectors' background threads' (``examples/threadcpu.py``), over the run's training time.

Reported per example: ``cpu_share`` = collectors' CPU / training wall time (median of the on
runs; the 2 % bar), and ``wall_ratio`` = median on time / median off time - 1 (whole runs
on a shared machine: noisy, a check only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = (
    "examples.hf_trainer",
    "examples.lightning_ddp",
    "examples.megatron_timers",
    "examples.fsdp2_mlp",
)


def run_once(module: str, steps: int, collect: bool, env: dict[str, str]) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix="argus-bench-int-")) / "s.json"
    cmd = [sys.executable, "-m", module, "--steps", str(steps), "--out", str(out)]
    if not collect:
        cmd.append("--no-collect")
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=900)
    s = json.loads(Path(f"{out}.rank0").read_text())
    col = s.get("collector") or {}
    train_thread = col.get("train_thread_s", s.get("collector_train_thread_s", 0.0))
    return {
        "seconds": s["seconds"],
        "train_thread_s": train_thread,
        "bg_s": col.get("bg_s", 0.0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--only", default=None, help="one example module")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    env = {
        **os.environ,
        "ARGUS_TOPIC_PREFIX": f"bench-int-{uuid.uuid4().hex[:8]}",
        "PYTHONWARNINGS": "ignore",
    }
    results = {}
    for module in [args.only] if args.only else EXAMPLES:
        off, on = [], []
        for _ in range(args.pairs):
            off.append(run_once(module, args.steps, False, env))
            on.append(run_once(module, args.steps, True, env))
        share = [(r["train_thread_s"] + r["bg_s"]) / r["seconds"] for r in on]
        res = {
            "steps": args.steps,
            "pairs": args.pairs,
            "off_s": [round(r["seconds"], 3) for r in off],
            "on_s": [round(r["seconds"], 3) for r in on],
            "cpu_share": statistics.median(share),
            "train_thread_share": statistics.median(r["train_thread_s"] / r["seconds"] for r in on),
            "wall_ratio": statistics.median(r["seconds"] for r in on)
            / statistics.median(r["seconds"] for r in off)
            - 1.0,
        }
        results[module] = res
        print(module, json.dumps(res), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
