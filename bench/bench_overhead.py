"""Collector overhead on the real 4-rank CPU DDP demo: steps/s with channels on vs off.

    .venv/bin/python bench/bench_overhead.py                 # default: 3 rounds, 50-step blocks
    .venv/bin/python bench/bench_overhead.py --rounds 5 --block 50

One training run (4 ranks, gloo, CPU) switches the collector channels every block of steps,
on every rank at the same step, in the order ``off, all, off, phases, off, kernels, off,
stacks`` per round (A/B/A/B). The overhead of a mode is ``1 - sps(mode) / sps(ref)`` where
``ref`` is the mean of the two neighbouring ``off`` blocks; the figure reported is the median
over rounds (min and max shown). Blocks are a multiple of the kernel duty period (50 steps),
so every ``kernels``/``all`` block holds exactly one kernel window. ``stacks`` is the py-spy
sidecar (run here as a thread of the bench process, sampling the four ranks at the configured
rate, publishing to the broker), switched with the mode.

A second run points the collectors (and the sidecar) at a closed loopback port for the whole
run (the shared broker is not stopped: other engineers' tests use it) and alternates
``off``/``all``: overhead, RSS growth of rank 0 across the run, drops counted, and whether
the training loop completed without an exception.

"off" means the channels are switched off at runtime (the no-op hooks stay installed; their
cost is a flag test per hook call, ~0.1 µs, tens of calls per step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.collectors.producer import RecordProducer  # noqa: E402
from argus.collectors.registry import list_processes  # noqa: E402
from argus.collectors.stacks import StackSampler, Target  # noqa: E402
from argus.config import load_settings  # noqa: E402
from argus.kafka.admin import create_topics, delete_topics  # noqa: E402
from argus.topics import topic_name  # noqa: E402

ROUND = ["off", "all", "off", "phases", "off", "kernels", "off", "stacks"]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(
    schedule: list[tuple[str, int]],
    *,
    bootstrap: str,
    prefix: str,
    stacks_hz: float,
    period: int,
    state_dir: Path,
    label: str,
) -> dict[str, Any]:
    mode_file = state_dir / "mode"
    mode_file.write_text("off")
    out = state_dir / f"{label}.json"
    env = {
        **os.environ,
        "ARGUS_TOPIC_PREFIX": prefix,
        "ARGUS_STATE_DIR": str(state_dir),
        "ARGUS_KAFKA_BOOTSTRAP": bootstrap,
    }
    sched = ",".join(f"{m}:{n}" for m, n in schedule)
    cmd = [
        sys.executable,
        "-m",
        "examples.ddp_transformer",
        "--schedule",
        sched,
        "--job",
        f"bench-{label}",
        "--kernels-period-steps",
        str(period),
        "--mode-file",
        str(mode_file),
        "--out",
        str(out),
        "--log-every",
        "0",
        "--flush-s",
        "2",
    ]
    settings = load_settings(env=env)
    producer = RecordProducer(settings.kafka_config(), message_timeout_ms=5000)
    topic = topic_name("raw.stacks", prefix)

    def targets() -> list[Target]:
        return [Target(e.pid, e.job, e.rank, e.host) for e in list_processes(state_dir)]

    def rate_for(_t: Target) -> float:
        try:
            mode = mode_file.read_text()
        except OSError:
            return 0.0
        return stacks_hz if mode in ("all", "stacks") else 0.0

    def publish(rec: dict[str, Any]) -> None:
        producer.submit(
            topic,
            f"{rec['job']}/{rec['rank']}".encode(),
            "stack_batch",
            rec,
            128 + sum(len(x["stack"]) for x in rec["stacks"]),
        )

    sampler = StackSampler(targets, publish, rate_hz=stacks_hz, window_s=5.0, rate_for=rate_for)
    th = threading.Thread(target=sampler.run, daemon=True)
    th.start()
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    sampler.stop()
    th.join(10)
    producer.close(2)
    if proc.returncode != 0:
        raise SystemExit(f"{label} run failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    res = json.loads(out.read_text())
    res["wall_s"] = time.time() - t0
    res["stack_dumps"] = sampler.dumps
    res["stack_batches"] = sampler.published
    res["stack_dropped"] = producer.dropped_records
    res["stderr_tail"] = [
        ln
        for ln in proc.stderr.splitlines()
        if "Traceback" in ln or ("Error" in ln and "gpuGetDeviceCount" not in ln)
    ][-5:]
    return res


def _ratios(blocks: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per mode: overhead fractions, each against the mean of its neighbouring off blocks."""
    out: dict[str, list[float]] = {}
    for i, b in enumerate(blocks):
        if b["mode"] == "off" or b["mode"] == "warmup":
            continue
        refs = [
            blocks[j]["steps_per_s"]
            for j in (i - 1, i + 1)
            if 0 <= j < len(blocks) and blocks[j]["mode"] == "off"
        ]
        if not refs:
            continue
        out.setdefault(b["mode"], []).append(1.0 - b["steps_per_s"] / statistics.mean(refs))
    return out


def _fmt(vals: list[float]) -> str:
    med = statistics.median(vals)
    return (
        f"{100 * med:+6.2f}%  (min {100 * min(vals):+.2f}%, max {100 * max(vals):+.2f}%, "
        f"n={len(vals)})"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block", type=int, default=50, help="steps per block (multiple of period)")
    ap.add_argument("--period", type=int, default=50, help="kernel window every N steps")
    ap.add_argument("--stacks-hz", type=float, default=1.0)
    ap.add_argument("--down-rounds", type=int, default=3)
    ap.add_argument("--skip-down", action="store_true")
    ap.add_argument("--json", default=None, help="write all figures here")
    args = ap.parse_args()
    if args.block % args.period:
        raise SystemExit("--block must be a multiple of --period")
    settings = load_settings()
    prefix = f"bench{uuid.uuid4().hex[:8]}.argus"
    created = create_topics(settings, prefix=prefix, partitions=1)
    report: dict[str, Any] = {
        "args": vars(args),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpus": os.cpu_count(),
    }
    try:
        with tempfile.TemporaryDirectory() as td:
            sched = (
                [("warmup_off", 10)]
                + [(m, args.block) for _ in range(args.rounds) for m in ROUND]
                + [("off", args.block)]
            )
            sched = [("off" if m == "warmup_off" else m, n) for m, n in sched]
            print(f"run 1: broker up, {len(sched)} blocks of {args.block} steps ...", flush=True)
            up = _run(
                sched,
                bootstrap=settings.bootstrap_servers,
                prefix=prefix,
                stacks_hz=args.stacks_hz,
                period=args.period,
                state_dir=Path(td),
                label="up",
            )
            blocks = up["blocks"][1:]  # drop the warm-up block
            r = _ratios(blocks)
            report["up"] = {
                "ratios": r,
                "blocks": up["blocks"],
                "collector": up["collector"],
                "stack_dumps": up["stack_dumps"],
                "wall_s": up["wall_s"],
            }
            print(
                f"\nsteps/s off (median of blocks): "
                f"{statistics.median(b['steps_per_s'] for b in blocks if b['mode'] == 'off'):.3f}"
            )
            for mode in ("all", "phases", "kernels", "stacks"):
                if mode in r:
                    print(f"  overhead {mode:8s} {_fmt(r[mode])}")
            print(
                f"  collector: {up['collector']}, stack dumps {up['stack_dumps']}, "
                f"batches {up['stack_batches']}"
            )
        if not args.skip_down:
            with tempfile.TemporaryDirectory() as td:
                port = _closed_port()
                sched = (
                    [("off", 10)]
                    + [(m, args.block) for _ in range(args.down_rounds) for m in ("off", "all")]
                    + [("off", args.block)]
                )
                print(f"\nrun 2: broker unreachable (127.0.0.1:{port}) ...", flush=True)
                down = _run(
                    sched,
                    bootstrap=f"127.0.0.1:{port}",
                    prefix=prefix,
                    stacks_hz=args.stacks_hz,
                    period=args.period,
                    state_dir=Path(td),
                    label="down",
                )
                blocks = down["blocks"][1:]
                r = _ratios(blocks)
                rss = [b["rss_bytes"] for b in blocks]
                report["down"] = {
                    "ratios": r,
                    "blocks": down["blocks"],
                    "collector": down["collector"],
                    "rss_bytes": rss,
                }
                print(f"  overhead all     {_fmt(r['all'])}")
                print(f"  rank-0 RSS per block (MiB): {[round(x / 2**20, 1) for x in rss]}")
                print(
                    f"  dropped (rank 0, cumulative, per block): "
                    f"{[b.get('dropped') for b in blocks]}"
                )
                print(
                    f"  training loop completed {down['steps']} steps, exit 0; "
                    f"collector {down['collector']}"
                )
    finally:
        delete_topics(settings, created)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
