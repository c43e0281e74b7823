"""Collector overhead on the real CPU DDP demo: steps/s with channels on vs off, in one job.

    .venv/bin/python bench/bench_overhead.py --world-sizes 2 --rounds 40 --down-rounds 20
    .venv/bin/python bench/bench_overhead.py --world-sizes 4 --rounds 20 --down-rounds 20

Method (one training job per world size and broker state; A and B never restart):

* The demo (``examples/ddp_transformer.py``) runs a schedule of ``--block``-step blocks
  (default 10) and switches the channels at the first step of each block, on every rank at
  the same step (``Collector.set_channels``, what an ``argus control enable/disable``
  command flips). Per round: ``off, all, off, phases, off, kernels, off, stacks``: every on
  block sits between two off blocks (A/B/A), about a second apart.
* Kernel windows stay at the default (one step in ``--period`` = 50, aligned on the step
  number). Blocks of one mode start 80 steps apart, so their offsets modulo 50 cycle through
  all five 10-step slots: a *cycle* of 5 consecutive on blocks of a mode holds exactly one
  kernel window, the default duty cycle. Figures are per cycle.
* Per block: wall time of its steps (rank 0; DDP keeps the ranks in step). Per cycle:
  ``slower = 1 - sum(reference time) / sum(on time)``, where an on block's reference is the
  mean of its two neighbouring off blocks (cancels drift of other tenants' load). Reported:
  the median over cycles with a percentile-bootstrap 95% CI of the median (10,000
  resamples).
* Stacks: the sidecar is a separate process and has no in-job switch; it runs here as in
  production (``StackSampler``, ``py-spy record --nonblocking``, 1 Hz, 10 s windows,
  publishing ``stack_batch`` records) and the bench SIGSTOPs its py-spy processes during
  blocks without stacks and SIGCONTs them in blocks with stacks (a recording whose window has
  elapsed is let finish). py-spy's timer catches up missed samples after SIGCONT, and its
  start-ups fall in on blocks too, so on blocks carry *all* of the sidecar's work: stacks is
  on in 1/4 of the blocks, so the sidecar runs at ~4x its default load in them (the samples
  per on-second are printed). Conservative.
* Also per mode and cycle: the collectors' self-measured training-thread time (what step
  records carry in ``collector.overhead_ns``) / step time (mean over ranks), and the
  accounted collector CPU (training threads + background ``argus-*``/``rdk:*`` threads of
  all ranks + the sidecar) / the reference blocks' CPU per step.

A second run per world size points the collectors and the sidecar at a closed loopback port
(the shared broker is not stopped) and alternates ``off``/``all``: the same ratio, every
rank's RSS per block, drop counters, and whether the training loop completed (exit 0, no
traceback). Run it under ``flock /tmp/argus-bench.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.collectors.producer import RecordProducer  # noqa: E402
from argus.collectors.registry import list_processes  # noqa: E402
from argus.collectors.stacks import StackSampler, Target  # noqa: E402
from argus.config import load_settings  # noqa: E402
from argus.kafka.admin import create_topics, delete_topics  # noqa: E402
from argus.topics import topic_name  # noqa: E402

ROUND = ["off", "all", "off", "phases", "off", "kernels", "off", "stacks"]
STACK_MODES = ("all", "stacks")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _py_spy_children() -> list[int]:
    """Pids of this process's ``py-spy`` children (the sidecar's recordings)."""
    pids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        try:
            kids = Path(f"/proc/self/task/{task}/children").read_text().split()
        except OSError:
            continue
        for k in kids:
            try:
                if Path(f"/proc/{k}/comm").read_text().strip() == "py-spy":
                    pids.append(int(k))
            except OSError:
                continue
    return pids


class StacksToggle:
    """The stacks sidecar as in production, paused while the job's mode has stacks off.

    A :class:`StackSampler` (``record`` method, ``rate_hz``, ``window_s`` windows, publishing
    ``stack_batch`` records) runs for the whole job; a second thread polls the mode file rank 0
    writes at each block switch (every ``poll_s``) and sends SIGSTOP to the sampler's py-spy
    processes while stacks are off, SIGCONT while they are on (a py-spy started during an off
    block is stopped within ``poll_s``).
    """

    def __init__(
        self,
        mode_file: Path,
        state_dir: Path,
        publish: Any,
        *,
        rate_hz: float,
        window_s: float,
        poll_s: float = 0.005,
    ) -> None:
        self.mode_file = mode_file
        self.poll_s = poll_s
        self.window_s = window_s
        self.on_s = 0.0
        self.switches = 0

        def targets() -> list[Target]:
            return [Target(e.pid, e.job, e.rank, e.host) for e in list_processes(state_dir)]

        self.sampler = StackSampler(targets, publish, rate_hz=rate_hz, window_s=window_s)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self.sampler.run, daemon=True),
            threading.Thread(target=self._toggle, daemon=True),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        self._threads[1].join(10)
        self.sampler.stop()
        self._threads[0].join(60)

    def _toggle(self) -> None:
        stopped: set[int] = set()
        seen: dict[int, float] = {}
        on_since: float | None = None
        while not self._stop.is_set():
            try:
                mode = self.mode_file.read_text()
            except OSError:
                mode = "off"
            on = mode in STACK_MODES
            now = time.monotonic()
            if on and on_since is None:
                on_since = now
                self.switches += 1
            elif not on and on_since is not None:
                self.on_s += now - on_since
                on_since = None
            for pid in _py_spy_children():
                # a recording whose window has elapsed is let run: it only writes its output
                # (stopping it would make the sampler time it out and lose the window)
                done = now - seen.setdefault(pid, now) >= self.window_s
                try:
                    if (on or done) and pid in stopped:
                        os.kill(pid, signal.SIGCONT)
                        stopped.discard(pid)
                    elif not (on or done) and pid not in stopped:
                        os.kill(pid, signal.SIGSTOP)
                        stopped.add(pid)
                except ProcessLookupError:
                    stopped.discard(pid)
            self._stop.wait(self.poll_s)
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if on_since is not None:
            self.on_s += time.monotonic() - on_since


def _run(
    schedule: list[tuple[str, int]],
    *,
    world: int,
    bootstrap: str,
    prefix: str,
    stacks_hz: float,
    stacks_window_s: float,
    period: int,
    state_dir: Path,
    label: str,
) -> dict[str, Any]:
    """One training job with the given block schedule; returns rank 0's summary plus every
    rank's per-block figures and the sidecar's CPU."""
    mode_file = state_dir / "mode"
    mode_file.write_text("off")
    out = state_dir / f"{label}.json"
    env = {
        **os.environ,
        "ARGUS_TOPIC_PREFIX": prefix,
        "ARGUS_STATE_DIR": str(state_dir),
        "ARGUS_KAFKA_BOOTSTRAP": bootstrap,
    }
    cmd = [
        sys.executable,
        "-m",
        "examples.ddp_transformer",
        "--world-size",
        str(world),
        "--schedule",
        ",".join(f"{m}:{n}" for m, n in schedule),
        "--job",
        f"bench-{label}-{uuid.uuid4().hex[:6]}",
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

    samples = [0]

    def publish(rec: dict[str, Any]) -> None:
        samples[0] += sum(x["count"] for x in rec["stacks"])
        size = 128 + sum(len(x["stack"]) for x in rec["stacks"])
        producer.submit(topic, f"{rec['job']}/{rec['rank']}".encode(), "stack_batch", rec, size)

    toggle = StacksToggle(
        mode_file, state_dir, publish, rate_hz=stacks_hz, window_s=stacks_window_s
    )
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    toggle.start()
    t0 = time.time()
    log_path = state_dir / f"{label}.stderr"
    with open(log_path, "w") as errf:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=errf)
        # wait WITHOUT reaping, so that the children's rusage read next holds the py-spy
        # processes (reaped by the toggle) and not the training processes
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        toggle.stop()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc.wait()
    stderr = log_path.read_text()
    producer.close(2)
    if proc.returncode != 0:
        raise SystemExit(f"{label} run failed (rc {proc.returncode}):\n{stderr[-4000:]}")
    res: dict[str, Any] = json.loads(out.read_text())
    res["rank_blocks"] = [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(world)]
    res["sidecar_cpu_s"] = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    res["sidecar_on_s"] = toggle.on_s
    res["wall_s"] = time.time() - t0
    res["stack_samples"] = samples[0]
    res["stack_batches"] = toggle.sampler.published
    res["stack_dropped"] = producer.dropped_records
    res["tracebacks"] = [ln for ln in stderr.splitlines() if "Traceback" in ln][-5:]
    return res


def block_metrics(res: dict[str, Any], *, skip: int = 1) -> list[dict[str, Any]]:
    """Per block after the first ``skip`` warm-up blocks: mode, steps/s, mean step time (s),
    collector training-thread time per step (s, mean over ranks), CPU per step summed over
    ranks (+ the sidecar's share in stacks modes), accounted collector CPU per step."""
    rank_blocks = res["rank_blocks"]
    world = len(rank_blocks)
    n = len(rank_blocks[0])
    stack_blocks = [b for b in rank_blocks[0][skip:] if b["mode"] in STACK_MODES]
    stack_steps = sum(b["steps"] for b in stack_blocks)
    sidecar_per_step = res["sidecar_cpu_s"] / stack_steps if stack_steps else 0.0
    out = []
    for i in range(skip, n):
        b0 = rank_blocks[0][i]
        steps = b0["steps"]
        side = sidecar_per_step if b0["mode"] in STACK_MODES else 0.0
        train = sum(rb[i]["collector_train_thread_s"] for rb in rank_blocks) / steps
        bg = sum(rb[i]["collector_threads_cpu_s"] for rb in rank_blocks) / steps
        out.append(
            {
                "mode": b0["mode"],
                "sps": b0["steps_per_s"],
                "step_s": b0["seconds"] / steps,
                "median_step_s": b0["median_step_s"],
                "train_thread_s": train / world,
                "cpu_per_step_s": sum(rb[i]["cpu_s"] for rb in rank_blocks) / steps + side,
                "accounted_s": train + bg + side,
                "bg_s": bg,
                "rss_bytes": [rb[i]["rss_bytes"] for rb in rank_blocks],
                "dropped": [rb[i].get("dropped") for rb in rank_blocks],
                "errors": [rb[i].get("errors") for rb in rank_blocks],
            }
        )
    return out


def paired(blocks: list[dict[str, Any]], cycle: int) -> dict[str, dict[str, list[float]]]:
    """Per on-mode, one value per *cycle* of ``cycle`` consecutive on blocks of that mode (a
    cycle holds exactly one kernel window per period of steps, see :func:`cycle_length`):

    * ``slower``: ``1 - steps/s(on) / steps/s(ref)`` over the cycle, where each on block's
      reference is the mean step time of its two neighbouring off blocks;
    * ``self``: the collectors' training-thread time / step time (mean over ranks);
    * ``accounted``: collector CPU (all ranks' training threads + background threads + the
      sidecar) / the reference blocks' CPU per step;
    * ``accounted_spill``: the same plus the background CPU the block's records cost after
      it ended, in the next (off) block: that block's background CPU above the idle level
      (the median of off blocks that follow ``stacks`` blocks, which queue no records). The
      delivery thread drains once a second (``delivery_interval_ms``), longer than a block,
      so without it a mode's encoding and hand-off land partly in its neighbour.
    """
    idle_bg = [
        blocks[i]["bg_s"]
        for i in range(1, len(blocks))
        if blocks[i]["mode"] == "off" and blocks[i - 1]["mode"] == "stacks"
    ]
    idle = statistics.median(idle_bg) if idle_bg else 0.0
    acc: dict[str, list[tuple[float, float, float, float, float, float]]] = {}
    for i, b in enumerate(blocks):
        if b["mode"] == "off" or i == 0 or i + 1 >= len(blocks):
            continue
        refs = [blocks[i - 1], blocks[i + 1]]
        if any(r["mode"] != "off" for r in refs):
            continue
        acc.setdefault(b["mode"], []).append(
            (
                b["step_s"],
                statistics.mean(r["step_s"] for r in refs),
                b["train_thread_s"],
                b["accounted_s"],
                statistics.mean(r["cpu_per_step_s"] for r in refs),
                b["accounted_s"] + max(0.0, blocks[i + 1]["bg_s"] - idle),
            )
        )
    out: dict[str, dict[str, list[float]]] = {}
    for mode, rows in acc.items():
        m = out.setdefault(mode, {"slower": [], "self": [], "accounted": [], "accounted_spill": []})
        for k in range(0, len(rows) - cycle + 1, cycle):
            a = np.asarray(rows[k : k + cycle])
            m["slower"].append(float(1.0 - a[:, 1].sum() / a[:, 0].sum()))
            m["self"].append(float(a[:, 2].sum() / a[:, 0].sum()))
            m["accounted"].append(float(a[:, 3].sum() / a[:, 4].sum()))
            m["accounted_spill"].append(float(a[:, 5].sum() / a[:, 4].sum()))
    return out


def cycle_length(block: int, period: int, round_blocks: int) -> int:
    """On blocks of one mode per cycle such that the cycle holds exactly one kernel window per
    ``period`` steps of that mode: blocks of one mode start ``round_blocks * block`` steps
    apart, so their offsets modulo ``period`` repeat every ``period / gcd(...)`` blocks."""
    if block % period == 0:
        return 1
    if period % block:
        raise SystemExit("--block must divide --period or be a multiple of it")
    return period // math.gcd(round_blocks * block, period)


def median_ci(
    vals: list[float], *, n_boot: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """Median of ``vals`` and a percentile-bootstrap 95% confidence interval of the median."""
    a = np.asarray(vals, dtype=float)
    rng = np.random.default_rng(seed)
    boots = np.median(rng.choice(a, size=(n_boot, a.size), replace=True), axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return float(np.median(a)), float(lo), float(hi)


def _pct(t: tuple[float, float, float]) -> str:
    return f"{100 * t[0]:+.2f}% [{100 * t[1]:+.2f}, {100 * t[2]:+.2f}]"


def summarize(ov: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    """Median + CI per mode and reading."""
    return {
        mode: {k: {"n": len(v), "median_ci": median_ci(v)} for k, v in m.items()}
        for mode, m in ov.items()
    }


def print_summary(summary: dict[str, dict[str, Any]]) -> None:
    print(
        f"  {'mode':8s} {'n':>3s} {'steps/s slower, median [95% CI]':>34s} "
        f"{'train-thread self-time / step':>34s} {'accounted CPU / job CPU':>30s} "
        f"{'+ spill into next block':>30s}"
    )
    for mode in ("all", "phases", "kernels", "stacks"):
        if mode not in summary:
            continue
        s = summary[mode]
        print(
            f"  {mode:8s} {s['slower']['n']:3d} {_pct(s['slower']['median_ci']):>34s} "
            f"{_pct(s['self']['median_ci']):>34s} {_pct(s['accounted']['median_ci']):>30s} "
            f"{_pct(s['accounted_spill']['median_ci']) if 'accounted_spill' in s else '':>30s}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--world-sizes", default="4,2", help="comma-separated rank counts")
    ap.add_argument("--rounds", type=int, default=40, help="rounds of --round (multiple of 5)")
    ap.add_argument(
        "--round",
        default=",".join(ROUND),
        help="the modes of one round, off between on modes (off,all: the bar alone, more cycles)",
    )
    ap.add_argument("--block", type=int, default=10, help="steps per block")
    ap.add_argument("--period", type=int, default=50, help="kernel window every N steps")
    ap.add_argument("--stacks-hz", type=float, default=1.0)
    ap.add_argument("--stacks-window-s", type=float, default=10.0)
    ap.add_argument("--down-rounds", type=int, default=40, help="rounds of (off, all)")
    ap.add_argument("--skip-up", action="store_true")
    ap.add_argument("--skip-down", action="store_true")
    ap.add_argument("--json", default=None, help="write all figures here")
    args = ap.parse_args()
    round_modes = args.round.split(",")
    bad = set(round_modes) - {"off", "all", "phases", "kernels", "stacks"}
    if bad or round_modes[0] != "off":
        raise SystemExit(f"--round: modes off/all/phases/kernels/stacks, starting off; got {bad}")
    cyc_up = cycle_length(args.block, args.period, len(round_modes))
    cyc_down = cycle_length(args.block, args.period, 2)
    worlds = [int(w) for w in args.world_sizes.split(",")]
    settings = load_settings()
    prefix = f"bench{uuid.uuid4().hex[:8]}.argus"
    created = create_topics(settings, prefix=prefix, partitions=1)
    report: dict[str, Any] = {
        "args": vars(args),
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "cpus": os.cpu_count(),
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }
    # warm-up: a whole number of blocks, so kernel windows (every period steps) fall at fixed
    # offsets inside blocks and each cycle of on blocks holds exactly one per period
    warm = [("off", args.block * max(1, -(-10 // args.block)))]
    try:
        for world in worlds:
            if not args.skip_up:
                sched = warm + [(m, args.block) for _ in range(args.rounds) for m in round_modes]
                sched += [("off", args.block)]
                print(f"\n[{world} ranks] broker up: {len(sched)} blocks ...", flush=True)
                with tempfile.TemporaryDirectory() as td:
                    up = _run(
                        sched,
                        world=world,
                        bootstrap=settings.bootstrap_servers,
                        prefix=prefix,
                        stacks_hz=args.stacks_hz,
                        stacks_window_s=args.stacks_window_s,
                        period=args.period,
                        state_dir=Path(td),
                        label=f"up{world}",
                    )
                blocks = block_metrics(up)
                summ = summarize(paired(blocks, cyc_up))
                off = [b for b in blocks if b["mode"] == "off"]
                print(
                    f"  off: median {statistics.median(b['sps'] for b in off):.2f} steps/s, "
                    f"{1e3 * statistics.median(b['step_s'] for b in off):.1f} ms/step; "
                    f"load {Path('/proc/loadavg').read_text().split()[:3]}; "
                    f"wall {up['wall_s']:.0f} s"
                )
                print_summary(summ)
                print(
                    f"  sidecar: {up['stack_samples']} samples in {up['stack_batches']} "
                    f"batches over {up['sidecar_on_s']:.0f} s on, {up['sidecar_cpu_s']:.2f} s "
                    f"CPU; collector rank 0: {up['collector']}",
                    flush=True,
                )
                report[f"up{world}"] = {
                    "summary": summ,
                    "blocks": blocks,
                    **{k: up[k] for k in ("collector", "wall_s", "sidecar_cpu_s", "sidecar_on_s")},
                    **{k: up[k] for k in ("stack_samples", "stack_batches", "stack_dropped")},
                    "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
                }
            if not args.skip_down:
                port = _closed_port()
                sched = warm + [
                    (m, args.block) for _ in range(args.down_rounds) for m in ("off", "all")
                ]
                sched += [("off", args.block)]
                print(
                    f"\n[{world} ranks] broker unreachable (127.0.0.1:{port}): "
                    f"{len(sched)} blocks ...",
                    flush=True,
                )
                with tempfile.TemporaryDirectory() as td:
                    down = _run(
                        sched,
                        world=world,
                        bootstrap=f"127.0.0.1:{port}",
                        prefix=prefix,
                        stacks_hz=args.stacks_hz,
                        stacks_window_s=args.stacks_window_s,
                        period=args.period,
                        state_dir=Path(td),
                        label=f"down{world}",
                    )
                blocks = block_metrics(down)
                summ = summarize(paired(blocks, cyc_down))
                print_summary(summ)
                rss = [[round(x / 2**20) for x in b["rss_bytes"]] for b in blocks]
                print(f"  RSS per block, MiB, per rank: {rss}")
                print(
                    f"  dropped per block (cumulative, per rank): {[b['dropped'] for b in blocks]}"
                )
                print(
                    f"  training loop: {down['steps']} steps, exit 0, tracebacks "
                    f"{down['tracebacks'] or 'none'}; collector rank 0: {down['collector']}; "
                    f"sidecar records dropped {down['stack_dropped']}",
                    flush=True,
                )
                report[f"down{world}"] = {
                    "summary": summ,
                    "blocks": blocks,
                    "collector": down["collector"],
                    "tracebacks": down["tracebacks"],
                    "stack_dropped": down["stack_dropped"],
                    "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
                }
    finally:
        delete_topics(settings, created)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
