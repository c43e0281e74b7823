"""Broker away: the training thread's worst step with collectors on vs its p99 with them off.

    .venv/bin/python bench/bench_broker_away.py --steps 6000 --rounds 2

Method (issue 19): one bench run alternates child processes ``off, away, off, away, ...``
(``--rounds`` pairs), each a CPU training loop of ``--steps`` steps on a small torch MLP
(~3-5 ms a step on the 2-core VM) with a Python heap of ``--heap`` live objects beside torch's
(a job's own state: datasets, configs, caches; a full garbage collection walks all of them).

* ``off``: no collectors (``argus.collectors`` imported, never started);
* ``away``: ``argus.collectors.start`` with every channel the CPU host has (phases via the
  model and optimizer hooks, CPU-op kernel windows every 50 steps, control, topology) and
  the broker a closed loopback port: every record is queued, then dropped and counted.

Per child: every step's wall time (``perf_counter_ns`` around the step, ms), every garbage
collection of generation 2 (``gc.callbacks``, ms), the collector's drop counters, and the
time from ``shutdown()``'s call to the process's exit as the parent sees it (``exit_s``:
the child prints a mark just before ``shutdown()``; the parent times from reading it to
``wait()`` returning). Reported per pair: ``worst away step / p99 off step`` (the bar: < 2,
kernel-window steps included and also shown without them), gen-2 collections and their
longest, and ``exit_s`` (the bar: < 1 s). Both sides run in the same bench run, alternately,
so a neighbour's load on the shared machine touches both. Figures: BENCHMARKS.md (issue 19).

* ``--hidden N``: the MLP's width (512: ~1.4 ms a step alone; 8192: ~25 ms of CPU, nearer a
  real step of 100 ms-10 s); ``--before-tree DIR``: one more away child per round importing
  argus from DIR (``git archive <commit> argus | tar -x -C DIR``), the before/after pair in
  one run; ``--compare-pace P``: one more away child with the producer's ``pace`` P
  (``--pace``: the away children's pace; by default the collectors' own).
* Each away child traces what the collectors did beside the loop (:class:`Trace`: gc on the
  training thread, the delivery thread's drains and polls, log lines, kernel windows); a row
  lists the worst steps (wall and CPU) with it, and the steps a drain overlapped against the
  others (side by side in time, so a neighbour's load touches both).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child(
    mode: str,
    steps: int,
    heap: int,
    port: int,
    churn: int,
    hidden: int,
    pace: float | None,
) -> None:
    """One training loop; prints one JSON line of results (and ``EXIT`` before shutdown)."""
    import torch
    from torch import nn

    import argus.collectors as ac

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, hidden), nn.ReLU(), nn.Linear(hidden, 256))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256)
    # the job's own Python state: small containers that live for the whole run
    state = [{"i": i, "tags": [i, str(i)]} for i in range(heap)]
    gen2: list[float] = []
    t_gc = [0]
    main = threading.get_ident()
    trace = Trace()

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            t_gc[0] = time.perf_counter_ns()
            return
        t = time.perf_counter_ns()
        gen = int(info.get("generation", 0))
        if threading.get_ident() == main:  # what runs on the training thread
            trace.add(t_gc[0], t, f"gc{gen}")
        if gen == 2:
            gen2.append((t - t_gc[0]) / 1e6)

    col = None
    if mode == "away":
        col = ac.start(
            job="bench-away",
            model=model,
            optimizer=opt,
            kafka_config={"bootstrap.servers": f"127.0.0.1:{port}"},
            kernels_backend="cpu_ops",
            stacks=False,
        )
        if pace is not None:  # else the collectors' default
            col.producer.pace = pace
        trace.attach(col, main)
    gc.collect()
    gc.callbacks.append(on_gc)
    times: list[float] = []
    cpu: list[float] = []
    window_steps: list[int] = []
    bounds: list[tuple[int, int]] = []
    for i in range(steps):
        t0 = time.perf_counter_ns()
        c0 = time.thread_time_ns()
        with ac.step(i):
            # a data loader's collate: short-lived containers, what makes the gc run
            batch = [{"ids": [j, j + 1], "meta": (str(j), j)} for j in range(churn)]
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            del batch
        cpu.append((time.thread_time_ns() - c0) / 1e6)
        t1 = time.perf_counter_ns()
        times.append((t1 - t0) / 1e6)
        bounds.append((t0, t1))
        if col is not None and col._window_first_step == i:  # a kernel window opened
            window_steps.append(i)
    gc.callbacks.remove(on_gc)
    out: dict[str, Any] = {
        "mode": mode,
        "steps_ms": times,
        "cpu_ms": cpu,
        "gen2_ms": gen2,
        "windows": window_steps,
        "what": trace.per_step(bounds),
        "call_cpu_max_ms": trace.cpu_max,
    }
    if col is not None:
        p = col.producer
        out.update(dropped=p.dropped_records, queue_depth=p.queue_depth, errors=p.errors)
        out.update(pace=p.pace)
    del state
    print(json.dumps(out), flush=True)
    print("EXIT", flush=True)
    t_stop = time.monotonic()
    ac.shutdown()
    print(f"SHUTDOWN {time.monotonic() - t_stop:.3f}", flush=True)


class Trace:
    """What the collectors did, and when, beside the training loop (``(start ns, end ns,
    what)``): garbage collections run on the training thread (``gc0``-``gc2``), the
    delivery thread's drains (``drain``), librdkafka's ``poll`` (delivery callbacks) and
    ``produce``, the build of each record (``build:<record>``, e.g. a kernel window's parse),
    log lines (``log:<thread>``), kernel windows opened/closed on the training thread."""

    def __init__(self) -> None:
        self.events: list[tuple[int, int, str]] = []
        #: the most CPU time of the calling thread one timed call took, per kind (ms, whole
        #: run): a long wall time with little CPU is a preempted thread, not work
        self.cpu_max: dict[str, float] = {}

    def add(self, t0: int, t1: int, what: str) -> None:
        self.events.append((t0, t1, what))

    def timed(self, fn: Any, what: str) -> Any:
        def wrapped(*a: Any, **k: Any) -> Any:
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            try:
                return fn(*a, **k)
            finally:
                self.add(t0, time.perf_counter_ns(), what)
                cpu = (time.thread_time_ns() - c0) / 1e6
                if cpu > self.cpu_max.get(what, 0.0):
                    self.cpu_max[what] = round(cpu, 3)

        return wrapped

    def attach(self, col: Any, main: int) -> None:
        p = col.producer
        p._drain = self.timed(p._drain, "drain")
        col._close_window = self.timed(col._close_window, "window_close")
        col._maybe_open_window = self.timed(col._maybe_open_window, "step_begin_window_check")

        for name, fn in list(p.builders.items()):  # building a record (delivery thread)
            p.builders[name] = self.timed(fn, f"build:{name}")
        deliver = p._deliver

        def traced_deliver(
            topic: str, key: bytes, record: str, size: int, value: Any, *a: Any
        ) -> Any:
            if callable(value):  # a thunk: its build timed too
                value = self.timed(value, f"build:{record}")
            return deliver(topic, key, record, size, value, *a)

        p._deliver = traced_deliver

        class Poll:  # librdkafka's producer, its poll (delivery callbacks) and produce timed
            def __init__(self, inner: Any, trace: Trace) -> None:
                self._inner, self._trace = inner, trace
                self._poll = trace.timed(inner.poll, "poll")
                self._produce = trace.timed(inner.produce, "produce")

            def poll(self, t: float = 0) -> Any:
                return self._poll(t)

            def produce(self, *a: Any, **k: Any) -> Any:
                return self._produce(*a, **k)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._inner, name)

            def __len__(self) -> int:
                return len(self._inner)

        p._producer = Poll(p._producer, self)
        trace = self

        class H(logging.Handler):
            def emit(self, r: logging.LogRecord) -> None:
                t = time.perf_counter_ns()
                who = "main" if threading.get_ident() == main else threading.current_thread().name
                trace.add(t, t, f"log:{who}")

        logging.getLogger("argus").addHandler(H())

    def per_step(self, bounds: list[tuple[int, int]]) -> list[dict[str, float]]:
        """Per step: ms of each kind of event overlapping it (``step_begin_window_check``
        below 0.05 ms dropped: it runs every step)."""
        ev = sorted(self.events)
        out: list[dict[str, float]] = [{} for _ in bounds]
        j = 0
        for i, (a, b) in enumerate(bounds):
            while j < len(ev) and ev[j][0] < a - 2 * 10**9:
                j += 1  # no event lasts 2 s (drains: < 0.3 s)
            for t0, t1, what in ev[j:]:
                if t0 > b:
                    break
                if t1 < a:
                    continue
                ms = (min(t1, b) - max(t0, a)) / 1e6
                if what == "step_begin_window_check" and ms < 0.05:
                    continue
                out[i][what] = round(out[i].get(what, 0.0) + ms, 3)
                if what.split(":")[0] in ("poll", "produce", "build"):  # longest single call
                    one = f"{what}_max"
                    out[i][one] = round(max(out[i].get(one, 0.0), (t1 - t0) / 1e6), 3)
        return out


def _pct(vals: list[float], q: float) -> float:
    s = sorted(vals)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def run_child(
    mode: str,
    steps: int,
    heap: int,
    churn: int,
    hidden: int,
    pace: float | None,
    root: Path = ROOT,
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", mode, "--steps", str(steps), "--heap", str(heap)]
    cmd += ["--churn", str(churn), "--hidden", str(hidden)]
    cmd += [] if pace is None else ["--pace", str(pace)]
    cmd += ["--port", str(_closed_port())]
    env = {**os.environ, "PYTHONPATH": str(root)}  # whose argus the child imports
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None
    res: dict[str, Any] = {}
    t_exit = time.monotonic()
    for line in proc.stdout:
        if line.startswith("{"):
            res = json.loads(line)
        elif line.startswith("EXIT"):
            t_exit = time.monotonic()
        elif line.startswith("SHUTDOWN"):
            res["shutdown_s"] = float(line.split()[1])
    proc.wait()
    res["exit_s"] = time.monotonic() - t_exit
    res["rc"] = proc.returncode
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--heap", type=int, default=300_000, help="live objects of the job's own")
    ap.add_argument("--churn", type=int, default=200, help="short-lived objects a step")
    ap.add_argument("--warmup", type=int, default=100, help="first steps left out")
    ap.add_argument("--child", choices=("off", "away"))
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=512, help="MLP width (512: ~1.4 ms a step)")
    ap.add_argument(
        "--pace",
        type=float,
        help="the away children's producer pace (0: none; default: the collectors')",
    )
    ap.add_argument(
        "--compare-pace", type=float, help="also run an away child with this pace, each round"
    )
    ap.add_argument(
        "--before-tree",
        type=Path,
        help="also run an away child importing argus from this tree (a commit's `git archive`)",
    )
    ap.add_argument("--json", type=Path, help="write all results here")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.steps, a.heap, a.port, a.churn, a.hidden, a.pace)
        return
    print(f"load average {os.getloadavg()}", flush=True)
    rows = []
    for r in range(a.rounds):
        off = run_child("off", a.steps, a.heap, a.churn, a.hidden, a.pace)
        aways = [("away", run_child("away", a.steps, a.heap, a.churn, a.hidden, a.pace))]
        if a.compare_pace is not None:  # the same build, the delivery thread paced as given
            aways.append(
                (
                    f"away_pace{a.compare_pace:g}",
                    run_child("away", a.steps, a.heap, a.churn, a.hidden, a.compare_pace),
                )
            )
        if a.before_tree is not None:  # another tree's argus (e.g. `git archive` of a commit)
            aways.append(
                (
                    "away_before",
                    run_child("away", a.steps, a.heap, a.churn, a.hidden, a.pace, a.before_tree),
                )
            )
        for res in (off, *(x for _, x in aways)):  # the first steps warm torch up
            for k in ("steps_ms", "cpu_ms", "what"):
                res[k] = res[k][a.warmup :]
            res["windows"] = [w - a.warmup for w in res.get("windows", []) if w >= a.warmup]
        for name, away in aways:
            rows.append(_row(r, name, off, away, a))
            print(
                json.dumps(
                    {
                        k: round(v, 3) if isinstance(v, float) else v
                        for k, v in rows[-1].items()
                        if k != "worst_steps"
                    }
                ),
                flush=True,
            )
            for w in rows[-1]["worst_steps"]:
                print("   ", json.dumps(w), flush=True)
    print(f"load average {os.getloadavg()}", flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


def _row(r: int, name: str, off: dict[str, Any], away: dict[str, Any], a: Any) -> dict[str, Any]:
    """One pair's figures: the bar (worst away step / off p99, wall and training-thread CPU)
    and the worst away steps (by wall and by CPU) with what the collectors did in them."""
    p99 = _pct(off["steps_ms"], 0.99)
    win: set[int] = set()
    for w in away.get("windows", []):
        win.update((w, w + 1))
    plain = [t for i, t in enumerate(away["steps_ms"]) if i not in win]
    cpu99 = _pct(off["cpu_ms"], 0.99)
    plain_cpu = [t for i, t in enumerate(away["cpu_ms"]) if i not in win]
    row = {
        "round": r,
        "away": name,
        "pace": away.get("pace"),
        "hidden": a.hidden,
        "off_p50_ms": _pct(off["steps_ms"], 0.5),
        "off_p99_ms": p99,
        "off_worst_ms": max(off["steps_ms"]),
        "away_p99_ms": _pct(away["steps_ms"], 0.99),
        "away_worst_ms": max(away["steps_ms"]),
        "away_worst_no_window_ms": max(plain),
        "ratio": max(away["steps_ms"]) / p99,
        "ratio_no_window": max(plain) / p99,
        "off_cpu_p99_ms": cpu99,
        "off_cpu_worst_ms": max(off["cpu_ms"]),
        "away_cpu_worst_ms": max(away["cpu_ms"]),
        "cpu_ratio": max(away["cpu_ms"]) / cpu99,
        "cpu_ratio_no_window": max(plain_cpu) / cpu99,
        "off_gen2": [len(off["gen2_ms"]), max(off["gen2_ms"], default=0.0)],
        "away_gen2": [len(away["gen2_ms"]), max(away["gen2_ms"], default=0.0)],
        "dropped": away.get("dropped"),
        "away_shutdown_s": away.get("shutdown_s"),
        "away_exit_s": away["exit_s"],
        "off_exit_s": off["exit_s"],
        "rc": [off["rc"], away["rc"]],
    }
    # within the away run, side by side in time (load-proof): the steps a delivery-thread
    # drain overlapped against the others
    drained = [i for i, w in enumerate(away["what"]) if w.get("drain", 0) > 0]
    rest = [i for i, w in enumerate(away["what"]) if not w.get("drain", 0)]
    for label, idx in (("drain", drained), ("no_drain", rest)):
        for k, key in (("wall", "steps_ms"), ("cpu", "cpu_ms")):
            vals = [away[key][i] for i in idx] or [0.0]
            row[f"{label}_{k}_p50_p99_max_ms"] = [
                round(_pct(vals, 0.5), 3),
                round(_pct(vals, 0.99), 3),
                round(max(vals), 3),
            ]
    row["drain_steps"] = len(drained)
    # the longest single call of each kind on the delivery thread over the run (ms, GIL held
    # but for librdkafka's own waits): librdkafka's poll and produce, each record's build
    longest: dict[str, float] = {}
    for w in away["what"]:
        for k, v in w.items():
            if k.endswith("_max"):
                longest[k[:-4]] = max(longest.get(k[:-4], 0.0), v)
    row["longest_call_ms"] = dict(sorted(longest.items()))
    row["longest_call_cpu_ms"] = {  # CPU time, whole run (warm-up included)
        k: v for k, v in sorted(away.get("call_cpu_max_ms", {}).items()) if k in longest
    }
    order = sorted(range(len(away["steps_ms"])), key=lambda i: away["steps_ms"][i])
    by_cpu = sorted(range(len(away["cpu_ms"])), key=lambda i: away["cpu_ms"][i])
    row["worst_steps"] = [
        {
            "by": by,
            "step": i,
            "wall_ms": round(away["steps_ms"][i], 2),
            "cpu_ms": round(away["cpu_ms"][i], 2),
            "window": i in win,
            "what": away["what"][i],
        }
        for by, idx in (("wall", order[-3:]), ("cpu", by_cpu[-3:]))
        for i in reversed(idx)
    ]
    return row


if __name__ == "__main__":
    main()
