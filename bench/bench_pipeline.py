"""Pipeline benchmarks on the real local broker (issue 5).

1. **Latency**: a simulated job published in real time (one step's records when the step
   ends), the workers running as in production (step roles | kernel roles, two processes).
   Latency of a step = arrival of its L2 anomaly on ``argus.anomalies`` minus the moment the
   step's records were published (the collectors publish at step end). L3: arrival of an
   L3 anomaly minus the publish time of the last step of its block. Also the funnel's
   verdicts (when a funnel window closed, from its last step) and the alert's first trigger
   on ``argus.alerts`` (from the culprit's first faulty step, and from the end of the window
   that triggered it); ``--runs`` pools runs, ``--kernels off`` drops L3 (the funnel then
   waits on the steps alone), ``--kernels both`` alternates run by run.
2. **Sustained load** (``--load``): R ranks at 15 steps/min with 3,000 kernel events per
   rank-step for ``--minutes``; consumer lag sampled every 10 s must not grow; the RSS of
   each worker and the broker, 2nd third vs last third. ``--faulty`` adds a compute straggler
   (its kernels slower too) and prints L2/L3 detection latency under that load.

    .venv/bin/python bench/bench_pipeline.py                      # latency, 64 ranks
    .venv/bin/python bench/bench_pipeline.py --runs 4 --kernels both
    .venv/bin/python bench/bench_pipeline.py --load --ranks 1024 --minutes 5
    .venv/bin/python bench/bench_pipeline.py --load --ranks 4096 --minutes 30 --split 3 --faulty
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from _loadgen import (
    LOAD_ENV,
    PERIOD_S,
    SPLIT,
    BatchTemplate,
    load_producer,
    metric,
    produce,
    publish_steps,
    scrape,
    split_roles,
    start_stack,
)

from argus.kafka.admin import delete_prefixed
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher, WorkerProcess
from argus.streams.pipeline_config import PipelineConfig

ENV = {
    "ARGUS_STREAMS__INTERNAL_PARTITIONS": "2",
    "ARGUS_STREAMS__FUNNEL_GRACE_S": "5",
    "ARGUS_STREAMS__FUNNEL_IDLE_S": "10",
    "ARGUS_STREAMS__IDLE_CLOSE_S": "8",
}


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


_STEPS = re.compile(r"; steps (\d+)-(\d+);")


def _latency_run(ranks: int, steps: int, rate: float, kernels: bool) -> dict[str, Any]:
    """One latency run on a fresh prefix; returns the samples (s) of :func:`latency`."""
    st = start_stack("bench", partitions=2, env=ENV, roles=SPLIT)
    s, prefix, workers = st.settings, st.prefix, st.workers
    w = PipelineConfig().funnel_window_steps
    arrivals: dict[tuple[str, str], float] = {}
    lock = threading.Lock()

    def on_record(suffix: str, _key: str, rec: dict[str, Any]) -> None:
        with lock:
            arrivals.setdefault((suffix, str(rec["id"])), time.time())

    watch = Watcher(s, ["anomalies", "alerts"], prefix=prefix, on_record=on_record)
    published: dict[int, float] = {}
    run = SimRun.make("compute-straggler", ranks=ranks, steps=steps, seed=11, kernels=kernels)
    try:
        time.sleep(8)  # workers join their groups
        publish(
            simulate(run),
            s,
            prefix=prefix,
            step_rate=rate,
            on_step=lambda st: published.__setitem__(st, time.time()),
        )
        watch.wait_for(
            lambda _: metric(workers[0], "argus_windows_closed_total", role="steps") >= steps, 120
        )
        time.sleep(25)
    finally:  # a failed run leaves no worker or topic behind
        for wp in workers:
            wp.stop()
        watch.close()
        delete_prefixed(s, prefix)  # wire, re-key and changelog topics
    out: dict[str, Any] = {"L2": [], "L3": [], "verdict": [], "alert_onset": [], "alert_window": []}
    out["alerts"] = []
    first: set[tuple[str, int]] = set()
    for rec in watch.get("anomalies"):
        t = arrivals.get(("anomalies", str(rec["id"])))
        end = int(rec["window_end_step"])
        level = str(rec["level"])
        if level == "funnel":  # a verdict: when its funnel window closed
            end = (end // w + 1) * w - 1
            level = "verdict"
        if t is None or end not in published or (level, end) in first:
            continue
        first.add((level, end))
        if level in out:
            out[level].append(t - published[end])
    onset = int(run.truth.onset_step or 0)
    seen: set[str] = set()
    for rec in watch.get("alerts"):  # the first trigger of each dedup key
        t = arrivals.get(("alerts", str(rec["id"])))
        if rec["action"] != "trigger" or rec["dedup_key"] in seen or t is None:
            continue
        seen.add(rec["dedup_key"])
        m = _STEPS.search(str(rec["summary"]))
        wend = (int(m.group(2)) // w + 1) * w - 1 if m else -1
        out["alert_onset"].append(t - published[onset])
        if wend in published:
            out["alert_window"].append(t - published[wend])
        span = f"{m.group(1)}-{m.group(2)}" if m else "?"
        out["alerts"].append(f"{'+'.join(rec['levels'])} steps {span}")
    return out


def latency(
    ranks: int, steps: int, rate: float, runs: int = 1, kernels: tuple[bool, ...] = (True,)
) -> None:
    """Detection and alert latency of a compute straggler published in real time.

    Per level (L2, L3): arrival of a finding on ``argus.anomalies`` minus the publish of its
    last step (L3: of its block), first finding per (level, last step). ``verdict``: the
    funnel's verdict (level ``funnel``) of a window minus the publish of the window's last
    step: when the funnel closed it. ``alert``: the first trigger on ``argus.alerts`` minus
    the publish of the culprit's first faulty step (``onset``), and of the last step of the
    funnel window that triggered it (``window``). ``runs`` runs on fresh prefixes, pooled;
    with ``kernels=(True, False)`` each run is one with kernel batches then one without,
    so both see the same machine load.
    """
    pooled: dict[bool, dict[str, list[float]]] = {k: {} for k in kernels}
    run = SimRun.make("compute-straggler", ranks=ranks, steps=steps, seed=11)
    print(
        f"latency, {ranks} ranks, {steps} steps at {rate:g} steps/s (compute-straggler from step"
        f" {run.truth.onset_step}), {runs} run(s) each",
        flush=True,
    )
    for i in range(runs):
        for kern in kernels:
            r = _latency_run(ranks, steps, rate, kern)
            print(
                f"  run {i + 1}, kernels {'on' if kern else 'off'}: "
                + ", ".join(f"{k} {_fmt(v)}" for k, v in r.items() if k != "alerts"),
                f"triggers {r['alerts']}",
                flush=True,
            )
            for k, v in r.items():
                if k != "alerts":
                    pooled[kern].setdefault(k, []).extend(v)
    for kern, by in pooled.items():
        print(f" kernels {'on' if kern else 'off'}, pooled:")
        for k, v in by.items():
            print(
                f"  {k}: n={len(v)} p50={_pct(v, 50):.2f} s p95={_pct(v, 95):.2f} s"
                f" max={max(v, default=float('nan')):.2f} s"
            )


def _fmt(xs: list[float]) -> str:
    """Up to 6 samples as they are (in arrival order: window by window), else p50 and p95."""
    if len(xs) <= 6:
        return "[" + " ".join(f"{x:.2f}" for x in xs) + "]"
    return f"p50 {_pct(xs, 50):.2f} p95 {_pct(xs, 95):.2f} (n={len(xs)})"


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _lag(workers: list[WorkerProcess], *roles: str) -> float:
    return sum(metric(w, "argus_consumer_lag", role=r) for w in workers for r in roles)


def _lag_s(workers: list[WorkerProcess], role: str) -> float:
    """The largest ``argus_consumer_lag_seconds`` of ``role`` over its topics and partitions
    (s: how long ago the oldest record waiting for it was produced)."""
    worst = 0.0
    for w in workers:
        if role not in w.roles:
            continue
        for line in scrape(w.metrics_port).splitlines():
            if line.startswith("argus_consumer_lag_seconds{") and f'role="{role}"' in line:
                worst = max(worst, float(line.rsplit(" ", 1)[1]))
    return worst


def _ages(workers: list[WorkerProcess], prefix: str) -> dict[str, tuple[float, float]]:
    """Per input topic (prefix dropped): the sum (s) and count of ``argus_input_age_seconds``
    over the workers (how long records waited between their producer and the role); one
    scrape a worker."""
    out: dict[str, tuple[float, float]] = {}
    for w in workers:
        for m in re.finditer(
            r'^argus_input_age_seconds_(sum|count)\{topic="([^"]*)"\} (\S+)$',
            scrape(w.metrics_port),
            re.M,
        ):
            short = m.group(2).removeprefix(prefix).lstrip(".-_")
            s, n = out.get(short, (0.0, 0.0))
            v = float(m.group(3))
            out[short] = (s + v, n) if m.group(1) == "sum" else (s, n + v)
    return out


def load(
    ranks: int,
    minutes: float,
    events: int,
    profile: bool,
    split: int = 2,
    linger_s: float = 0.01,
    steps_workers: int = 0,
    faulty: bool = False,
    nice_kernels: int = 0,
    layout: str | None = None,
    nice_generator: int = 0,
) -> None:
    """R ranks at 15 steps/min, ``events`` kernel events per rank-step; lag must not grow.

    ``linger_s``: the workers' producer linger, s (0.01: the default; 0: every record sent at once).
    ``steps_workers`` > 0: step records only, into that many step-role processes of one
    consumer group (how far one job's L1/L2 spreads over workers).
    ``faulty``: from step 3 two adjacent DP replicas compute 8x slower (the simulator's
    compute straggler) and the first of them runs every kernel 1.5x longer, so L2 and L3
    find something in every window: their detection latency is measured as in
    :func:`latency` (arrival on ``argus.anomalies`` minus the publish of the window's last
    step; L3: of its block's last kernel batches), the issue's p95 bars (L2 <= 5 s, L3 <= 60 s).
    ``nice_kernels`` > 0: the compressor and L3 processes (every thread) run at that nice
    value, so on a shared host the step roles (L2's latency) and the broker go first.
    ``nice_generator`` > 0: this process (the generator, every thread) runs at that nice
    value once the workers have started: it stands for the collectors, which run on the
    training hosts, so the pipeline and broker go first; whether it still kept the schedule
    is printed (the latest step start, and the run's wall time against the plan).
    ``layout``: the job's layout (``dp=..,tp=..,pp=..,ep=..,cp=..``) instead of
    ``Layout.for_ranks(ranks)`` (e.g. larger L3 scopes at a lower rate).
    """
    from argus.schemas import Codec
    from argus.schemas.arrays import pack, unpack
    from argus.sim.layout import Layout
    from argus.sim.scenarios import build
    from argus.streams import synth

    env = {
        **LOAD_ENV,
        "ARGUS_STREAMS__PRODUCER_LINGER_S": str(linger_s),
        # the product's idle bounds are minutes; LOAD_ENV's 8 s (quick flushes for short
        # benches) is less than the L3 worker's pause while it judges a block round at
        # 4,096 ranks, which then cut blocks short on processing time
        "ARGUS_STREAMS__IDLE_CLOSE_S": "60",
        "ARGUS_STREAMS__FUNNEL_IDLE_S": "70",
    }  # 4 partitions
    roles = [SPLIT[0]] * steps_workers if steps_workers else split_roles(split)
    st = start_stack("load", roles=roles, env=env)
    if nice_kernels:
        for w in st.workers:
            if w.proc and {"compressor", "l3"} & set(w.roles):
                _renice(w.proc.pid, nice_kernels)
    s, prefix, workers, broker_pid = st.settings, st.prefix, st.workers, st.broker_pid
    tmp = st.log_dir
    lay = Layout.parse(layout) if layout else Layout.for_ranks(ranks)
    if faulty:  # the straggler's onset at step 3 (a 12-step scenario's), the run as long as any
        sc = build("compute-straggler", lay, 12, 3)
        run = SimRun(sc, lay, 10_000, 3, f"load-{ranks}", False, 1)
    else:
        run = SimRun.make(
            "healthy", layout=lay, steps=10_000, seed=3, job=f"load-{ranks}", kernels=False
        )
    steps_iter = simulate(run)
    mix = synth.default_mix(0)
    rng = np.random.default_rng(0)
    base = [
        synth.kernel_batch(
            rng, mix, job=run.job, rank=r, window_id=0, n_events=events, coords=lay.coords(r)
        )
        for r in range(0 if steps_workers else lay.world)
    ]
    slow = int(run.truth.ranks[0]) if faulty and base else None
    if slow is not None:  # every kernel of the straggler 1.5x longer
        d = unpack(base[slow]["duration_ns"], "int64")
        base[slow] = dict(base[slow], duration_ns=pack((d * 1.5).astype(np.int64), "int64"))
    arrivals: list[tuple[str, int, float]] = []  # (level, window_end_step, arrival time)
    lock = threading.Lock()

    def on_record(_suffix: str, _key: str, rec: dict[str, Any]) -> None:
        with lock:
            arrivals.append((str(rec["level"]), int(rec["window_end_step"]), time.time()))

    watch = Watcher(s, ["anomalies"], prefix=prefix, on_record=on_record) if faulty else None
    published: dict[int, float] = {}  # step -> its step records published
    published_k: dict[int, float] = {}  # step -> its kernel batches published
    rss: list[list[float]] = []  # per sample: each worker's and the broker's RSS, MB
    codec = Codec()
    templates = [BatchTemplate(codec, b) for b in base]
    prod = load_producer(s)
    if nice_generator:  # after the workers started (they would inherit it)
        _renice(os.getpid(), nice_generator)
    time.sleep(8)
    period = PERIOD_S  # 15 steps/min
    n_steps = int(minutes * 60 / period)
    samples: list[tuple[float, float, float]] = []  # (t, steps lag, kernels lag)
    lag_s: dict[str, list[float]] = {"steps": [], "compressor": [], "l3": []}  # s, per sample
    cpu0 = [_cpu_s(w.proc.pid) for w in workers if w.proc]
    broker0 = _cpu_s(broker_pid) if broker_pid else 0.0
    self0 = sum(os.times()[:2])
    t_start = time.monotonic()
    bytes_k = 0
    ages0: dict[str, tuple[float, float]] = {}
    pending: tuple[str, str, dict[str, Any]] | None = next(steps_iter)
    behind_s = 0.0  # the latest a step's records started leaving, against the schedule
    for step in range(n_steps):
        t_step = t_start + step * period
        behind_s = max(behind_s, time.monotonic() - t_step)
        pending, _, _ = publish_steps(prod, codec, prefix, steps_iter, pending, step)
        published[step] = time.time()
        for r, tpl in enumerate(templates):
            now_ns = time.time_ns()
            v = tpl.encode(step, now_ns - 3_000_000_000, now_ns)
            bytes_k += len(v)
            produce(prod, f"{prefix}.raw.kernels", f"{run.job}/{r}".encode(), v)
            prod.poll(0)
        published_k[step] = time.time()
        if step % 3 == 0:
            pids = [w.proc.pid for w in workers if w.proc] + ([broker_pid] if broker_pid else [])
            rss.append([_rss_mb(p) for p in pids])
            if steps_workers:  # which processes close job steps and block steps
                closed = [
                    (
                        metric(w, "argus_windows_closed_total", role="steps"),
                        metric(w, "argus_windows_closed_total", role="steps-block"),
                    )
                    for w in workers
                ]
                print(f"  (job steps, block steps) closed per worker: {closed}", flush=True)
            samples.append(
                (
                    time.monotonic() - t_start,
                    _lag(workers, "steps"),
                    _lag(workers, "compressor", "l3"),
                )
            )
            for role, xs in lag_s.items():
                xs.append(_lag_s(workers, role))
            print(
                f"  t={samples[-1][0]:6.0f} s step {step}: lag steps={samples[-1][1]:.0f}"
                f" kernels={samples[-1][2]:.0f}"
                f" (s: {', '.join(f'{k} {v[-1]:.1f}' for k, v in lag_s.items())});"
                f" not yet delivered by the generator {len(prod)}",
                flush=True,
            )
            ages = _ages(workers, prefix)  # each hop's mean wait since the last sample
            waits = []
            for t, (s1, n1) in sorted(ages.items()):
                s0, n0 = ages0.get(t, (0.0, 0.0))
                if n1 > n0:
                    waits.append(f"{t} {(s1 - s0) / (n1 - n0):.1f}")
            print(f"    input age (s, mean since the last sample): {', '.join(waits)}", flush=True)
            ages0 = ages
            l3w = sum(metric(w, "argus_windows_closed_total", role="l3") for w in workers)
            l3b = sum(metric(w, "argus_detector_seconds_count", level="L3") for w in workers)
            print(f"    L3 windows closed {l3w:.0f}, blocks judged {l3b:.0f}", flush=True)
        if profile and step == n_steps // 2:
            for w in workers:
                if w.proc is None:
                    continue
                subprocess.Popen(
                    [
                        str(Path(sys.executable).parent / "py-spy"),
                        "record",
                        "-p",
                        str(w.proc.pid),
                        "-d",
                        "60",
                        "-r",
                        "50",
                        "-f",
                        "raw",
                        "--nonblocking",
                        "-o",
                        str(tmp / f"{'-'.join(w.roles)}.prof"),
                    ]
                )
        while (left := t_step + period - time.monotonic()) > 0:
            prod.poll(min(left, 0.1))
    prod.flush(60)
    wall = time.monotonic() - t_start
    cpu = [_cpu_s(w.proc.pid) - c for w, c in zip(workers, cpu0, strict=True) if w.proc]
    broker_cpu = _cpu_s(broker_pid) - broker0 if broker_pid else float("nan")
    self_cpu = sum(os.times()[:2]) - self0
    time.sleep(10)
    final = (
        _lag(workers, "steps"),
        _lag(workers, "compressor", "l3"),
    )
    for w in workers:  # how the kernel windows closed, and L3's time judging blocks
        if "l3" not in w.roles:
            continue
        how = {
            h: metric(w, "argus_windows_closed_total", role="l3", how=h)
            for h in ("complete", "timeout", "incomplete")
        }
        n = metric(w, "argus_detector_seconds_count", level="L3")
        t = metric(w, "argus_detector_seconds_sum", level="L3")
        behind = metric(w, "argus_judged_behind_seconds_sum", level="L3") / max(n, 1)
        print(
            f"  L3 windows closed {how}; {n:.0f} blocks judged, {t:.1f} s in detection;"
            f" a block judged {behind:.1f} s after its event-time end (mean)"
        )
    for w in workers:
        w.stop()
    if watch is not None:
        watch.close()
    delete_prefixed(s, prefix)  # wire, re-key and changelog topics
    n_ev = n_steps * lay.world * events
    print(
        f"load: {lay.world} ranks ({lay}), {n_steps} steps at 15/min, {events} kernel events/rank-step, "
        f"{wall:.0f} s; kernel batches {bytes_k / wall / 1e6:.1f} MB/s; L3 reads summary.kernels:"
        f" {LOAD_ENV['ARGUS_STREAMS__L3_ROUTE_SUMMARIES']}"
    )
    if not steps_workers:
        print(f"  kernel events/s offered: {n_ev / wall:,.0f}")
    print(f"  step records/s offered: {lay.world / period:,.0f}")
    for w, c in zip(workers, cpu, strict=True):
        print(f"  worker {' '.join(w.roles)}: CPU {c:.0f} s = {100 * c / wall:.0f}% of a core")
    print(f"  broker: CPU {broker_cpu:.0f} s = {100 * broker_cpu / wall:.0f}% of a core")
    print(
        f"  load generator (this process{f', nice {nice_generator}' if nice_generator else ''}):"
        f" CPU {self_cpu:.0f} s = {100 * self_cpu / wall:.0f}%; a step started at most"
        f" {behind_s:.1f} s late, the run took {wall:.0f} s for {n_steps * period:.0f} s planned"
    )
    half = len(samples) // 2
    first = np.mean([x[1] + x[2] for x in samples[:half]]) if half else float("nan")
    last = np.mean([x[1] + x[2] for x in samples[half:]]) if samples else float("nan")
    print(
        f"  consumer lag (messages), mean first half {first:.0f}, second half {last:.0f}, "
        f"10 s after the end: steps {final[0]:.0f}, kernels {final[1]:.0f}"
    )
    print(
        "  consumer lag (s, oldest waiting record) per role, mean / max of the samples: "
        + ", ".join(f"{k} {np.mean(v):.1f} / {max(v):.1f}" for k, v in lag_s.items() if v)
    )
    if len(rss) >= 3:  # as the soak: the first third is the warm-up
        a, b = rss[len(rss) // 3 : 2 * len(rss) // 3], rss[2 * len(rss) // 3 :]
        names = [" ".join(w.roles) for w in workers if w.proc] + ["broker"] * bool(broker_pid)
        for i, name in enumerate(names):
            m2, m3 = np.mean([x[i] for x in a]), np.mean([x[i] for x in b])
            sixths = [rss[len(rss) * k // 6 : len(rss) * (k + 1) // 6] for k in range(6)]
            trace = " ".join(
                f"{min(x[i] for x in part):.0f}-{max(x[i] for x in part):.0f}"
                for part in sixths
                if part
            )
            print(
                f"  RSS {name}: 2nd third {m2:.0f} MB, last third {m3:.0f} MB ({m3 / m2 - 1:+.1%});"
                f" min-max of each sixth: {trace}"
            )
    if faulty:
        by: dict[str, list[float]] = {"L2": [], "L3": []}
        first: set[tuple[str, int]] = set()
        for level, end, t in arrivals:
            ref = (published if level == "L2" else published_k).get(end)
            if level in by and ref is not None and (level, end) not in first:
                first.add((level, end))
                by[level].append(t - ref)
        for level, bar in (("L2", 5.0), ("L3", 60.0)):
            v = by[level]
            print(
                f"  {level} latency: n={len(v)} p50={_pct(v, 50):.2f} s p95={_pct(v, 95):.2f} s"
                f" max={max(v, default=float('nan')):.2f} s (bar p95 <= {bar:g} s)"
            )
        l3_first = sorted(
            (end, t - published_k[end])
            for lv, end, t in arrivals
            if lv == "L3" and end in published_k
        )
        seen_end: dict[int, float] = {}
        for end, d in l3_first:
            seen_end.setdefault(end, d)
        print(
            "  L3 latency per block (last window: s): "
            + ", ".join(f"{e}: {d:.1f}" for e, d in sorted(seen_end.items()))
        )
    if profile:
        print(f"  profiles: {tmp}/*.prof (py-spy raw)")


def _renice(pid: int, nice: int) -> None:
    """Set every thread of a process to ``nice`` (Linux: a thread's priority is its own)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.setpriority(os.PRIO_PROCESS, int(task.name), nice)


def _rss_mb(pid: int) -> float:
    """Resident memory of a process, MB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--rate", type=float, default=1.0, help="steps/s")
    ap.add_argument("--runs", type=int, default=1, help="latency runs, pooled (fresh prefixes)")
    ap.add_argument(
        "--kernels",
        choices=("on", "off", "both"),
        default="on",
        help="latency with kernel batches (on), without (off: no L3, the funnel waits on the"
        " steps alone), or both, alternating run by run",
    )
    ap.add_argument("--load", action="store_true", help="the sustained-load benchmark")
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--events", type=int, default=3000, help="kernel events per rank-step (--load)")
    ap.add_argument("--profile", action="store_true", help="py-spy the workers half-way (--load)")
    ap.add_argument(
        "--split",
        type=int,
        choices=(2, 3, 4),
        default=2,
        help="worker processes (--load): 2 = steps | compressor+l3; 3 = steps | compressor | l3;"
        " 4 = steps | compressor | l3 | l3",
    )
    ap.add_argument(
        "--steps-workers",
        type=int,
        default=0,
        help="--load with step records only, into N step-role processes (one consumer group)",
    )
    ap.add_argument(
        "--linger",
        type=float,
        default=0.01,
        help="workers' producer linger, s (--load; 0.01 = the pipeline's default, 0 = send at once)",
    )
    ap.add_argument(
        "--faulty",
        action="store_true",
        help="--load with a compute straggler (and its kernels 1.5x slower) from step 3:"
        " prints L2 and L3 detection latency",
    )
    ap.add_argument(
        "--nice-kernels",
        type=int,
        default=0,
        help="--load: run the compressor and L3 processes at this nice value (steps first)",
    )
    ap.add_argument(
        "--nice-generator",
        type=int,
        default=0,
        help="--load: run the load generator (this process) at this nice value once the workers"
        " started (it stands for the training hosts' collectors)",
    )
    ap.add_argument("--layout", help="--load: the job's layout, e.g. dp=128,tp=1,pp=2,ep=4,cp=1")
    args = ap.parse_args()
    if args.load:
        load(
            args.ranks,
            args.minutes,
            args.events,
            args.profile,
            args.split,
            args.linger,
            args.steps_workers,
            args.faulty,
            args.nice_kernels,
            args.layout,
            args.nice_generator,
        )
    else:
        kern = {"on": (True,), "off": (False,), "both": (True, False)}[args.kernels]
        latency(args.ranks, args.steps, args.rate, args.runs, kern)


if __name__ == "__main__":
    main()
