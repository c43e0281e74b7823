"""CPU of the steps roles' two tiers, per record and per step, up to a 10,000-rank job.

The very roles of ``argus.streams.roles.steps`` (per-block :class:`StepBlocks`, per-job
:class:`JobSteps`, L1 + L2 on) over a simulated job's step records, driven offline as
``argus replay`` does (tables are dicts, topics lists: no Kafka, faust or changelog JSON, so
these are the agents' own costs; the live per-worker figure in BENCHMARKS.md includes those).

* tier 1 (scales out by rank block): µs of CPU per step record, including each block's
  close (its partial L2 group windows, encoded);
* tier 2 (one worker per job): ms per closed step (digests in, blocks' windows joined,
  L1, L2 over the sliding window).

``--block-ranks`` equal to the world size is the one-tier shape (every record in one key):
compare side by side.

    .venv/bin/python bench/bench_steps_tiers.py --ranks 1024,10240 --steps 12
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.detectors.config import DetectorsConfig  # noqa: E402
from argus.sim.simulate import SimRun, simulate  # noqa: E402
from argus.streams.memory import _MemoryCtx  # noqa: E402
from argus.streams.pipeline_config import PipelineConfig  # noqa: E402
from argus.streams.roles.steps import JobSteps, StepBlocks, route_step  # noqa: E402

STEP_PERIOD_S = 4.0  # 15 steps/min, the pipeline benchmark's working point


async def _measure(recs: list[dict[str, Any]], block_ranks: int, steps: int) -> dict[str, float]:
    ctx = _MemoryCtx(DetectorsConfig(), PipelineConfig(steps_block_ranks=block_ranks))
    job_tier = JobSteps(ctx)  # type: ignore[arg-type]
    job_tier.levels.update({"l1", "l2"})
    blocks = StepBlocks(ctx, job_tier.levels)  # type: ignore[arg-type]
    routed = [kv for r in recs for kv in route_step(r, block_ranks)]
    bstate: dict[str, Any] = {}
    jstate: dict[str, Any] = {}
    t1 = t2 = 0.0
    for key, item in routed:
        c0 = time.process_time()
        await blocks.add(key, bstate.setdefault(key, blocks.new(key)), item, 0.0)
        c1 = time.process_time()
        t1 += c1 - c0
        while ctx.queue:
            topic, job, msg = ctx.queue.popleft()
            if topic != "steps-by-job":
                continue
            c0 = time.process_time()
            st = jstate.setdefault(job, job_tier.new(job))
            for d in msg["items"]:
                await job_tier.add(job, st, d, 0.0)
            t2 += time.process_time() - c0
    return {
        "tier1_us_per_record": 1e6 * t1 / len(routed),
        "tier2_ms_per_step": 1e3 * t2 / steps,
        "anomalies": float(len(ctx.anomalies)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--ranks", default="1024,10240", help="comma-separated world sizes")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--block-ranks", type=int, default=PipelineConfig.steps_block_ranks)
    ap.add_argument("--scenario", default="compute-straggler")
    a = ap.parse_args()
    print(
        f"{'ranks':>6s} {'block':>6s} {'tier 1 us/record':>17s} {'tier 2 ms/step':>15s} "
        f"{'cores @15/min: tier 1':>22s} {'tier 2':>7s} {'anomalies':>9s}"
    )
    for world in (int(w) for w in a.ranks.split(",")):
        run = SimRun.make(a.scenario, ranks=world, steps=a.steps, seed=1, kernels=False)
        recs = [r for topic, _k, r in simulate(run) if topic == "raw.steps"]
        for block in (a.block_ranks, world):
            m = asyncio.run(_measure(recs, block, a.steps))
            rate = world / STEP_PERIOD_S
            print(
                f"{world:6d} {block:6d} {m['tier1_us_per_record']:17.0f} "
                f"{m['tier2_ms_per_step']:15.1f} "
                f"{rate * m['tier1_us_per_record'] / 1e6:22.2f} "
                f"{m['tier2_ms_per_step'] / 1e3 / STEP_PERIOD_S:7.2f} {m['anomalies']:9.0f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
