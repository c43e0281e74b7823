"""Collector overhead of the framework integrations in their CPU examples, in-job A/B (issue 22).

    flock /tmp/argus-bench.lock .venv/bin/python bench/bench_integrations.py --rounds 100

Each example (``examples/hf_trainer.py``, ``lightning_ddp.py``, ``megatron_timers.py``,
``fsdp2_mlp.py``; 2 ranks over gloo, one core per rank on a 2-core machine, no straggler)
runs as **one** training job, one example at a time, against the real local broker under a
private topic prefix, measured as ``bench/bench_overhead.py`` measures the DDP demo:

* the integration stays installed for the whole job (callback, ``instrument_timers``,
  ``instrument_fsdp``; hooks fire throughout); its collector's channels are switched at the
  first step of every ``--block`` steps, on every rank at the same step, through
  ``Collector.set_channels`` (what ``argus control enable/disable`` flips; the example's
  ``--schedule`` hook, ``examples/_common.py``): ``off`` (phases and kernels off: no step
  records, no kernel windows) and ``all`` (phases, CPU-op kernel windows 1 in
  ``--period`` = 50 steps), alternating, so every on block sits between two off blocks;
* warm-up: ``block * k - 1`` off steps (at least 10), so kernel windows (steps ``50 n``)
  fall on the **second** step of a block: with Megatron's auto steps the collector's step
  opens at the previous ``optimizer`` timer stop, before the loop top where the channels
  switch, so a window on a block's first step would be missed there;
* per block: rank 0's wall time of its steps (step start to the next block's first step
  start, so the step's end-of-step work is in); per *cycle* of on blocks holding exactly
  one kernel window per 50 steps: ``slower = 1 - sum(reference) / sum(on)``, an on block's
  reference being the mean of its two neighbouring off blocks; reported: the median over
  cycles and a percentile-bootstrap 95 % CI of the median (``bench_overhead.median_ci``),
  with the collectors' own training-thread time per step and their accounted CPU
  (training threads + ``argus-*``/``rdk:*`` threads of both ranks) over the job's CPU.

Bar: ``slower`` median <= 2 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_overhead import (  # noqa: E402
    block_metrics,
    cycle_length,
    paired,
    print_summary,
    summarize,
)

#: example module -> default steps per block (a block lasts ~0.5-1 s on the quiet 2-core VM)
EXAMPLES = {
    "examples.hf_trainer": 10,
    "examples.lightning_ddp": 10,
    "examples.megatron_timers": 50,
    "examples.fsdp2_mlp": 10,
}


def schedule(block: int, rounds: int) -> list[tuple[str, int]]:
    """Warm-up (off, ``block * k - 1`` >= 10 steps: windows on a block's second step), then
    ``rounds`` x (off, all) blocks and a closing off block."""
    warm = block * -(-11 // block) - 1
    return (
        [("off", warm)]
        + [(m, block) for _ in range(rounds) for m in ("off", "all")]
        + [("off", block)]
    )


def load() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def run_example(
    module: str, sched: list[tuple[str, int]], period: int, env: dict[str, str]
) -> dict[str, Any]:
    """One job of ``module`` with the block schedule; rank 0's summary plus every rank's blocks."""
    out = Path(tempfile.mkdtemp(prefix="argus-bench-int-")) / "s.json"
    cmd = [
        *(sys.executable, "-m", module, "--out", str(out)),
        *("--schedule", ",".join(f"{m}:{n}" for m, n in sched)),
        *("--kernels-period-steps", str(period), "--job", f"bench-{uuid.uuid4().hex[:6]}"),
    ]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"{module} failed (rc {r.returncode}):\n{r.stderr[-4000:]}")
    res: dict[str, Any] = json.loads(out.read_text())
    res["rank_blocks"] = [json.loads(Path(f"{out}.rank{k}").read_text())["blocks"] for k in (0, 1)]
    res["sidecar_cpu_s"] = 0.0  # no stacks sidecar in these examples
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=100, help="(off, all) block pairs per job")
    ap.add_argument(
        "--block", type=int, default=None, help="steps per block (default: per example)"
    )
    ap.add_argument("--period", type=int, default=50, help="kernel window every N steps")
    ap.add_argument("--only", default=None, help="comma-separated example modules")
    ap.add_argument("--json", default=None, help="write all figures here")
    args = ap.parse_args(argv)
    env = {
        **os.environ,
        "ARGUS_TOPIC_PREFIX": f"bench-int-{uuid.uuid4().hex[:8]}",
        "PYTHONWARNINGS": "ignore",
    }
    modules = args.only.split(",") if args.only else list(EXAMPLES)
    report: dict[str, Any] = {"args": vars(args), "cpus": os.cpu_count()}
    for module in modules:
        block = args.block or EXAMPLES[module]
        cyc = cycle_length(block, args.period, 2)
        sched = schedule(block, args.rounds)
        t0, load0 = time.strftime("%H:%M:%S", time.gmtime()), load()
        print(
            f"\n{module}: {sum(n for _, n in sched)} steps, {len(sched)} blocks of {block} "
            f"(cycle {cyc} on blocks), load {load0} at {t0} UTC ...",
            flush=True,
        )
        res = run_example(module, sched, args.period, env)
        blocks = block_metrics(res)
        summ = summarize(paired(blocks, cyc))
        step = {
            m: statistics.median(b["step_s"] for b in blocks if b["mode"] == m)
            for m in ("off", "all")
        }
        row = {
            "steps": res["steps"],
            "blocks": len(sched),
            "block": block,
            "cycle": cyc,
            "step_s_off": step["off"],
            "step_s_on": step["all"],
            "summary": summ,
            "collector": res["collector"],
            "start": t0,
            "loadavg_start": load0,
            "loadavg_end": load(),
            "blocks_detail": blocks,
        }
        report[module] = row
        print(
            f"  step (median block): off {1e3 * step['off']:.1f} ms, on {1e3 * step['all']:.1f} ms; "
            f"load {load0} -> {row['loadavg_end']}; collector rank 0: {res['collector']}"
        )
        print_summary(summ)
        if args.json:  # after each example: a later failure keeps the earlier figures
            Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
