"""Soak (issue 9): the pipeline at a sustained load for a long time, with faults injected.

A simulated job of R ranks at 15 steps/min (step records from the simulator, 3,000 kernel
events per rank-step as in ``bench_pipeline.py --load``) runs for ``--minutes``. Every
``--period`` steps one rank's MLP becomes 4x slower for ``--fault-steps`` steps, then heals
(a different rank each time). Every 30 s the script samples the resident memory of each
worker and of the broker, and the consumer lag. At the end it checks, and exits non-zero
when one fails:

* every injected fault was alerted (a trigger naming its rank) and resolved afterwards;
* no alert names a rank that was never faulty;
* memory is flat: the mean RSS of each process over the last third of the run is within
  ``--rss-growth`` (default 20%) of its mean over the second third (the first third is the
  warm-up: tables, caches and JIT-like lazy imports fill);
* lag does not grow: mean lag over the last third <= max(2x the second third's, 1,000).

Before its topics are deleted, the run writes ``--out`` (default ``soak.json`` in the run's
log directory under ``/tmp``, printed at the end): every record of the alerts topic, the
anomalies by ``level/kind``, the DLQ records by role and reason, the injected faults and the
RSS/lag samples.

    make soak                                     # 30 min, 256 ranks
    .venv/bin/python bench/soak.py --minutes 30 --ranks 256
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from _loadgen import (
    PERIOD_S,
    Stack,
    load_producer,
    metric,
    produce,
    publish_steps,
    split_roles,
    start_stack,
)

from argus.kafka.admin import delete_prefixed
from argus.replay import TimeRange, read_range
from argus.sim.layout import Layout
from argus.sim.model import Fault
from argus.sim.scenarios import GroundTruth, Scenario
from argus.sim.simulate import SimRun, simulate
from argus.streams.local_run import Watcher
from argus.topics import topic_name

_POOL = 257  # distinct rank-windows of kernel events (prime: no alignment with 10-step blocks)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _faults(lay: Layout, steps: int, period: int, length: int, seed: int) -> list[Fault]:
    rng = np.random.default_rng(seed)
    out = []
    for onset in range(period // 3, steps - length, period):
        rank = int(rng.integers(0, lay.world))
        # one burst of ``length`` steps: the bursts profile with a period longer than the run
        out.append(
            Fault(
                (rank,),
                {"mlp": 4.0},
                onset=onset,
                profile="bursts",
                period=10 * steps,
                on=length,
            )
        )
    return out


def _save(
    out: Path,
    st: Stack,
    job: str,
    meta: dict[str, Any],
    alerts: list[dict[str, Any]],
    dlq: list[dict[str, Any]],
) -> Counter[str]:
    """Write the run's record to ``out`` (JSON) while its topics still exist; returns the
    anomalies by ``level/kind`` (read from the anomalies topic, every record of ``job``)."""
    errors: list[str] = []
    anomalies = read_range(
        st.settings,
        topic_name("anomalies", st.prefix),
        TimeRange(0, 2**63 - 1),
        job=job,
        timeout_s=300,
        errors=errors,
    )
    by_kind = Counter(f"{x['level']}/{x['kind']}" for x in anomalies)
    doc = {
        **meta,
        "prefix": st.prefix,
        "job": job,
        "anomalies": {
            "total": len(anomalies),
            "undecodable": len(errors),
            "by_level_kind": by_kind,
        },
        "dlq": Counter(f"{d.get('role')}: {d.get('reason')}" for d in dlq),
        "alerts": alerts,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=str))
    return by_kind


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--events", type=int, default=3000, help="kernel events per rank-step")
    ap.add_argument("--period", type=int, default=90, help="steps between fault onsets")
    ap.add_argument("--fault-steps", type=int, default=30, help="steps a fault lasts")
    ap.add_argument("--rss-growth", type=float, default=0.20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON record of the run: alerts, anomaly counts, faults, samples "
        "(default: soak.json in the run's log directory under /tmp)",
    )
    ap.add_argument(
        "--split",
        type=int,
        choices=(2, 3),
        default=3,
        help="worker processes: 2 = steps | compressor+l3; 3 = steps | compressor | l3",
    )
    a = ap.parse_args()

    from argus.schemas import Codec
    from argus.streams import synth

    st = start_stack("soak", roles=split_roles(a.split))
    s, prefix, workers = st.settings, st.prefix, st.workers
    out = a.out or st.log_dir / "soak.json"
    lay = Layout.for_ranks(a.ranks)
    n_steps = int(a.minutes * 60 / PERIOD_S)
    faults = _faults(lay, n_steps, a.period, a.fault_steps, a.seed)
    sc = Scenario(
        "soak",
        tuple(faults),
        GroundTruth("soak", "one rank's mlp 4x slower for a while, every few minutes"),
    )
    run = SimRun(sc, lay, n_steps, a.seed, f"soak-{a.ranks}", kernels=False)
    steps_iter = simulate(run)
    mix = synth.default_mix(0)
    rng = np.random.default_rng(0)
    # a pool of independent rank-windows; each rank draws one at random at each step, so a
    # rank's kernels are fresh from window to window (one fixed draw per rank would be a
    # persistent per-rank difference, which L3 rightly reports; a fixed rotation through the
    # pool gave groups of ranks recurring shares of the same windows)
    pool = [
        synth.kernel_batch(rng, mix, job=run.job, rank=0, window_id=0, n_events=a.events)
        for _ in range(_POOL)
    ]
    codec = Codec()
    prod = load_producer(s)
    watch = Watcher(s, ["alerts", "dlq"], prefix=prefix)
    pids = {" ".join(w.roles): w.proc.pid for w in workers if w.proc is not None}
    if st.broker_pid:
        pids["broker"] = st.broker_pid
    samples: list[dict[str, Any]] = []
    print(
        f"soak: {lay.world} ranks ({lay}), {n_steps} steps at 15/min ({a.minutes:.0f} min), "
        f"{len(faults)} faults: "
        + ", ".join(f"rank {f.ranks[0]} @ step {f.onset}" for f in faults),
        flush=True,
    )
    time.sleep(8)
    t_start = time.monotonic()
    pending: tuple[str, str, dict[str, Any]] | None = next(steps_iter)
    alive: dict[str, bool] = {}
    try:
        for step in range(n_steps):
            t_step = t_start + step * PERIOD_S
            # the step's event-time span is the kernel window's too
            pending, w0, w1 = publish_steps(prod, codec, prefix, steps_iter, pending, step)
            picks = rng.integers(0, _POOL, lay.world)
            for r in range(lay.world):
                rec = dict(
                    pool[picks[r]],
                    rank=r,
                    coords=lay.coords(r),
                    window_id=step,
                    window_start_ns=w0,
                    window_end_ns=w1,
                )
                v = codec.encode("kernel_batch", rec)
                produce(prod, f"{prefix}.raw.kernels", f"{run.job}/{r}".encode(), v)
                prod.poll(0)
            if step % int(30 / PERIOD_S) == 0:
                smp = {
                    "t": time.monotonic() - t_start,
                    "step": step,
                    "lag": sum(metric(w, "argus_consumer_lag") for w in workers),
                    **{k: _rss_mb(p) for k, p in pids.items()},
                }
                samples.append(smp)
                alerts = watch.get("alerts")
                print(
                    f"  t={smp['t']:5.0f} s step {step:4d}: lag {smp['lag']:7.0f}  "
                    + "  ".join(f"{k} {smp[k]:6.0f} MB" for k in pids)
                    + f"  alerts: {sum(x['action'] == 'trigger' for x in alerts)} triggers, "
                    f"{sum(x['action'] == 'resolve' for x in alerts)} resolves",
                    flush=True,
                )
            while (left := t_step + PERIOD_S - time.monotonic()) > 0:
                prod.poll(min(left, 0.1))
        prod.flush(60)
        # the last fault's resolve needs ``resolve_after`` quiet funnel windows after it
        faulty_ranks = {f.ranks[0] for f in faults}
        watch.wait_for(
            lambda w: (
                {r for x in w.get("alerts") if x["action"] == "resolve" for r in x["ranks"]}
                >= faulty_ranks
            ),
            timeout_s=240,
        )
        alive = {" ".join(w.roles): w.proc is not None and w.proc.poll() is None for w in workers}
    finally:
        for w in workers:
            w.stop()
        watch.close()
        meta = {
            "args": vars(a),
            "layout": str(lay),
            "steps": n_steps,
            "faults": [
                {"rank": f.ranks[0], "onset": f.onset, "steps": a.fault_steps} for f in faults
            ],
            "samples": samples,
            "workers_alive": alive,
        }
        try:  # before the topics go: the last soak's alerts were lost with them
            by_kind = _save(out, st, run.job, meta, watch.get("alerts"), watch.get("dlq"))
        except Exception as exc:  # the topics are deleted whatever happened
            by_kind = Counter()
            print(f"could not write {out}: {type(exc).__name__}: {exc}")
        delete_prefixed(s, prefix)  # wire, re-key and changelog topics (GBs at this load)
    alerts = watch.get("alerts")
    ok = True
    print("\nfault  rank  onset  alerted  resolved")
    for f in faults:
        rk = f.ranks[0]
        trig = [x for x in alerts if x["action"] == "trigger" and rk in x["ranks"]]
        res = [x for x in alerts if x["action"] == "resolve" and rk in x["ranks"]]
        good = bool(trig) and bool(res)
        ok &= good
        print(f"  {faults.index(f):3d}  {rk:4d}  {f.onset:5d}  {bool(trig)!s:7s}  {bool(res)!s}")
    faulty = {f.ranks[0] for f in faults}
    wrong = {r for x in alerts if x["action"] == "trigger" for r in x["ranks"]} - faulty
    print(f"alerts naming a healthy rank: {sorted(wrong) or 'none'}")
    for x in alerts:
        if x["action"] == "trigger" and set(x["ranks"]) & wrong:
            print(f"    e.g. {x['summary']}")
            break
    dlq = Counter(f"{d.get('role')}: {d.get('reason')}" for d in watch.get("dlq"))
    for why, count in dlq.most_common(5):
        print(f"  DLQ {count} x {why[:200]}")
    ok &= not wrong
    # the injected faults are single ranks: a group-level page (no rank named) is unexplained
    groups = [x for x in alerts if x["action"] == "trigger" and not x["ranks"]]
    print(f"group-level alerts (no rank named; no fault explains them): {len(groups)}")
    for x in groups[:5]:
        print(f"    e.g. {x['summary'][:160]}")
    ok &= not groups
    n = len(samples)
    mid, last = samples[n // 3 : 2 * n // 3], samples[2 * n // 3 :]
    print("process         RSS 2nd third   RSS last third   growth")
    for k in pids:
        m1, m2 = np.mean([x[k] for x in mid]), np.mean([x[k] for x in last])
        g = m2 / m1 - 1
        ok &= g <= a.rss_growth
        print(f"  {k:20s} {m1:10.0f} MB  {m2:12.0f} MB  {100 * g:+6.1f}%")
    l1, l2 = np.mean([x["lag"] for x in mid]), np.mean([x["lag"] for x in last])
    lag_ok = l2 <= max(2 * l1, 1000)
    ok &= lag_ok
    print(
        f"lag: mean {l1:.0f} (2nd third) -> {l2:.0f} (last third): {'flat' if lag_ok else 'GROWING'}"
    )
    print(f"workers alive at the end: {alive}; DLQ records: {len(watch.get('dlq'))}")
    ok &= all(alive.values()) and not watch.get("dlq")
    print("anomalies: " + (", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())) or "none"))
    print(f"logs: {st.log_dir}; alerts and anomaly counts: {out}")
    print("SOAK PASSED" if ok else "SOAK FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
