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
  (training threads + ``argus-*``/``rdk:*`` threads of both ranks) over the job's CPU;
* the same A/B on CPU time (``cpu_slower``): both ranks' process CPU (every thread) per step,
  on blocks against their off neighbours, per cycle. Other tenants' load stretches wall time
  (ranks wait for a core) but not the CPU a step burns, so on a loaded shared machine this
  reading resolves what the wall A/B cannot; it holds every extra cycle the channels cost
  the ranks (hooks, step records, kernel windows, delivery), accounted or not.

Bar: ``slower`` median <= 2 %. ``--resummarize FILE`` recomputes the figures from a
``--json`` file.
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
    _pct,
    block_metrics,
    cycle_length,
    median_ci,
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


def cpu_paired(blocks: list[dict[str, Any]], cycle: int) -> list[float]:
    """Per cycle of ``cycle`` on blocks: ``1 - sum(reference CPU/step) / sum(on CPU/step)``,
    CPU of both ranks' processes per step (s), an on block's reference being the mean of its
    two off neighbours (:func:`bench_overhead.paired`'s pairing, on CPU instead of wall)."""
    rows = [
        (
            b["cpu_per_step_s"],
            (blocks[i - 1]["cpu_per_step_s"] + blocks[i + 1]["cpu_per_step_s"]) / 2,
        )
        for i, b in enumerate(blocks)
        if b["mode"] == "all"
        and 0 < i < len(blocks) - 1
        and blocks[i - 1]["mode"] == blocks[i + 1]["mode"] == "off"
    ]
    return [
        1.0 - sum(r for _, r in rows[k : k + cycle]) / sum(o for o, _ in rows[k : k + cycle])
        for k in range(0, len(rows) - cycle + 1, cycle)
    ]


def summarize_blocks(blocks: list[dict[str, Any]], cycle: int) -> dict[str, Any]:
    """``bench_overhead``'s summary of the on mode plus ``cpu_slower``; step times (s)."""
    summ = summarize(paired(blocks, cycle))
    cpu = cpu_paired(blocks, cycle)
    summ["all"]["cpu_slower"] = {"n": len(cpu), "median_ci": median_ci(cpu)}
    for m in ("off", "all"):
        summ[f"step_s_{m}"] = statistics.median(b["step_s"] for b in blocks if b["mode"] == m)
    # what the A/B leaves out: collectors running with channels off (control consumer,
    # Kafka client, hooks that find the channels off); an upper bound, since an off block
    # also holds delivery work spilled from the on block before it
    summ["off_accounted"] = statistics.median(
        b["accounted_s"] / b["cpu_per_step_s"] for b in blocks if b["mode"] == "off"
    )
    return summ


def print_blocks_summary(summ: dict[str, Any]) -> None:
    print(
        f"  step (median block): off {1e3 * summ['step_s_off']:.1f} ms, "
        f"on {1e3 * summ['step_s_all']:.1f} ms"
    )
    print_summary(summ)
    print(
        f"  CPU per step, on vs off (both ranks): {_pct(summ['all']['cpu_slower']['median_ci'])}; "
        f"collectors' CPU in off blocks (median): {100 * summ['off_accounted']:.2f}%"
    )


def load() -> list[str]:
    return Path("/proc/loadavg").read_text().split()[:3]


def run_example(
    module: str,
    sched: list[tuple[str, int]],
    period: int,
    env: dict[str, str],
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One job of ``module`` with the block schedule; rank 0's summary plus every rank's blocks."""
    out = Path(tempfile.mkdtemp(prefix="argus-bench-int-")) / "s.json"
    cmd = [
        *(sys.executable, "-m", module, "--out", str(out)),
        *("--schedule", ",".join(f"{m}:{n}" for m, n in sched)),
        *("--kernels-period-steps", str(period), "--job", f"bench-{uuid.uuid4().hex[:6]}"),
        *extra,
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
    ap.add_argument("--example-args", default="", help="more options for the example(s)")
    ap.add_argument("--json", default=None, help="write all figures here")
    ap.add_argument("--resummarize", default=None, help="recompute from this --json file")
    args = ap.parse_args(argv)
    if args.resummarize:
        old = json.loads(Path(args.resummarize).read_text())
        for module, row in old.items():
            if module.startswith("examples."):
                print(f"\n{module}: {row['steps']} steps, {row['blocks']} blocks of {row['block']}")
                print_blocks_summary(summarize_blocks(row["blocks_detail"], row["cycle"]))
        return 0
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
        res = run_example(module, sched, args.period, env, tuple(args.example_args.split()))
        blocks = block_metrics(res)
        summ = summarize_blocks(blocks, cyc)
        row = {
            "steps": res["steps"],
            "blocks": len(sched),
            "block": block,
            "cycle": cyc,
            "summary": summ,
            "collector": res["collector"],
            "start": t0,
            "loadavg_start": load0,
            "loadavg_end": load(),
            "blocks_detail": blocks,
        }
        report[module] = row
        print(f"  load {load0} -> {row['loadavg_end']}; collector rank 0: {res['collector']}")
        print_blocks_summary(summ)
        if args.json:  # after each example: a later failure keeps the earlier figures
            Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
