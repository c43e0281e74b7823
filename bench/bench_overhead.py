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
import resource
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

    sampler = StackSampler(targets, publish, rate_hz=stacks_hz, window_s=4.0, rate_for=rate_for)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    th = threading.Thread(target=sampler.run, daemon=True)
    th.start()
    t0 = time.time()
    log_path = state_dir / f"{label}.stderr"
    with open(log_path, "w") as errf:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=errf)
        # wait for the training run to exit WITHOUT reaping it, so that the children's
        # rusage read next holds the py-spy processes (reaped by the sampler) and not the
        # training processes
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        sampler.stop()
        th.join(30)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc.wait()
    stderr = log_path.read_text()
    producer.close(2)
    if proc.returncode != 0:
        raise SystemExit(f"{label} run failed (rc {proc.returncode}):\n{stderr[-4000:]}")
    res = json.loads(out.read_text())
    res["rank_blocks"] = [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(4)]
    res["sidecar_cpu_s"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    res["wall_s"] = time.time() - t0
    res["stack_dumps"] = sampler.dumps
    res["stack_batches"] = sampler.published
    res["stack_dropped"] = producer.dropped_records
    res["stderr_tail"] = [
        ln
        for ln in stderr.splitlines()
        if "Traceback" in ln or ("Error" in ln and "gpuGetDeviceCount" not in ln)
    ][-5:]
    return res


def _block_metrics(res: dict[str, Any], *, skip: int = 1) -> list[dict[str, Any]]:
    """Per block (after the first ``skip`` warm-up blocks): mode, steps/s, median step time,
    CPU seconds per step summed over the four ranks (+ the sidecar's share in stacks modes)."""
    rank_blocks = res["rank_blocks"]
    n = len(rank_blocks[0])
    stacks_steps = sum(b["steps"] for b in rank_blocks[0][skip:] if b["mode"] in ("all", "stacks"))
    sidecar_per_step = res["sidecar_cpu_s"] / stacks_steps if stacks_steps else 0.0
    out = []
    for i in range(skip, n):
        b0 = rank_blocks[0][i]
        cpu = sum(rb[i]["cpu_s"] for rb in rank_blocks) / b0["steps"]
        if b0["mode"] in ("all", "stacks"):
            cpu += sidecar_per_step
        acct = (
            sum(
                rb[i]["collector_threads_cpu_s"] + rb[i]["collector_train_thread_s"]
                for rb in rank_blocks
            )
            / b0["steps"]
        )
        if b0["mode"] in ("all", "stacks"):
            acct += sidecar_per_step
        out.append(
            {
                "mode": b0["mode"],
                "sps": b0["steps_per_s"],
                "accounted_s_per_step": acct,
                "median_step_s": max(rb[i]["median_step_s"] for rb in rank_blocks),
                "cpu_per_step_s": cpu,
            }
        )
    return out


def _overheads(blocks: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per mode and metric: overhead fractions, each block against the mean of its two
    neighbouring ``off`` blocks (A/B/A)."""
    out: dict[str, dict[str, list[float]]] = {}
    for i, b in enumerate(blocks):
        if b["mode"] == "off":
            continue
        refs = [
            blocks[j] for j in (i - 1, i + 1) if 0 <= j < len(blocks) and blocks[j]["mode"] == "off"
        ]
        if not refs:
            continue
        m = out.setdefault(
            b["mode"], {"throughput": [], "median_step": [], "cpu": [], "accounted": []}
        )
        m["accounted"].append(
            b["accounted_s_per_step"] / statistics.mean(r["cpu_per_step_s"] for r in refs)
        )
        m["throughput"].append(1.0 - b["sps"] / statistics.mean(r["sps"] for r in refs))
        m["median_step"].append(
            b["median_step_s"] / statistics.mean(r["median_step_s"] for r in refs) - 1.0
        )
        m["cpu"].append(
            b["cpu_per_step_s"] / statistics.mean(r["cpu_per_step_s"] for r in refs) - 1.0
        )
    return out


def _fmt(vals: list[float]) -> str:
    med = statistics.median(vals)
    return f"{100 * med:+6.2f}% [{100 * min(vals):+.1f}, {100 * max(vals):+.1f}] n={len(vals)}"


def _print_overheads(ov: dict[str, dict[str, list[float]]]) -> None:
    cols = [
        ("throughput", "steps/s (issue metric)"),
        ("median_step", "median step time"),
        ("cpu", "CPU s/step, 4 ranks+sidecar"),
        ("accounted", "accounted collector CPU"),
    ]
    print("  " + f"{'mode':8s}" + "".join(f"{title:>36s}" for _, title in cols))
    for mode in ("all", "phases", "kernels", "stacks"):
        if mode in ov:
            print("  " + f"{mode:8s}" + "".join(f"{_fmt(ov[mode][k]):>36s}" for k, _ in cols))


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
            blocks = _block_metrics(up)
            ov = _overheads(blocks)
            report["up"] = {
                "overheads": ov,
                "blocks": blocks,
                "collector": up["collector"],
                "stack_dumps": up["stack_dumps"],
                "sidecar_cpu_s": up["sidecar_cpu_s"],
                "wall_s": up["wall_s"],
            }
            off = [b for b in blocks if b["mode"] == "off"]
            print(
                f"\noff: {statistics.median(b['sps'] for b in off):.3f} steps/s, median step "
                f"{1e3 * statistics.median(b['median_step_s'] for b in off):.0f} ms, "
                f"{1e3 * statistics.median(b['cpu_per_step_s'] for b in off):.0f} ms CPU/step"
            )
            _print_overheads(ov)
            print(
                f"  collector (rank 0): {up['collector']}; sidecar: {up['stack_dumps']} samples, "
                f"{up['stack_batches']} batches, {up['sidecar_cpu_s']:.2f} s CPU"
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
                blocks = _block_metrics(down)
                ov = _overheads(blocks)
                rss = [b["rss_bytes"] for b in down["blocks"][1:]]
                report["down"] = {
                    "overheads": ov,
                    "blocks": blocks,
                    "collector": down["collector"],
                    "rss_bytes": rss,
                }
                _print_overheads(ov)
                print(f"  rank-0 RSS per block (MiB): {[round(x / 2**20, 1) for x in rss]}")
                print(
                    f"  dropped (rank 0, cumulative, per block): "
                    f"{[b.get('dropped') for b in down['blocks'][1:]]}"
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
