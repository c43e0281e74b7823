"""``argus demo``: the whole pipeline on this machine, watched live.

Starts the broker (unless a cluster is configured), creates a private set of topics, starts
the workers (step roles and kernel roles in two processes), runs a job with a fault, shows
anomalies and alerts as they arrive, stops everything and writes the findings as JSON.

Two sources of the job:

* ``training`` (default): the real CPU DDP transformer of ``examples/ddp_transformer.py``,
  4 processes over gloo with the collectors on, rank 2's MLP slowed 3x;
* ``simulator``: a simulated MoE job of ``--ranks`` GPUs with a fault ``--scenario``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from argus.config import Settings
from argus.streams.local_run import Watcher, WorkerProcess

__all__ = ["DemoResult", "run_demo"]

ROLE_SPLIT = (("l1", "l2", "funnel", "stacks"), ("compressor", "l3"))
DEMO_STREAMS = {  # shorter windows than production so the demo ends in a minute
    "ARGUS_STREAMS__INTERNAL_PARTITIONS": "2",
    "ARGUS_STREAMS__IDLE_CLOSE_S": "8",
    "ARGUS_STREAMS__FUNNEL_GRACE_S": "4",
    "ARGUS_STREAMS__FUNNEL_IDLE_S": "10",
}


@dataclass(frozen=True)
class DemoResult:
    """``found``: an alert trigger named the injected culprit; ``alerts`` and ``anomalies``:
    every record seen on those topics, in arrival order; ``steps``: the job's step records
    and kernel batches (``raw.steps``, ``raw.kernels``, to replay
    offline: :func:`argus.streams.memory.run_engine`); ``job_end_s``/``end_s``: seconds from the start of the
    live view to the job's end and to the stop (None: the job did not end)."""

    found: bool
    path: Path
    alerts: list[dict[str, Any]]
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    job_end_s: float | None = None
    end_s: float = 0.0


def _alerts_table(alerts: list[dict[str, Any]]) -> Table:
    t = Table(title="argus.alerts (one per culprit)", expand=True)
    for col in ("state", "levels", "culprit", "phase / kernels", "pers.", "conf."):
        t.add_column(col)
    latest: dict[str, dict[str, Any]] = {}
    for a in alerts:
        latest[a["dedup_key"]] = a
    for a in latest.values():
        who = (
            f"ranks {','.join(map(str, a['ranks']))}"
            if a["ranks"]
            else f"{a['group_kind']} {a['group_id']}"
        )
        what = a["phase"] or ", ".join(a["kernels"][:2]) or "-"
        state = "[red]OPEN[/]" if a["action"] == "trigger" else "[green]resolved[/]"
        t.add_row(
            state, "+".join(a["levels"]), who, what, str(a["persistence"]), f"{a['confidence']:.2f}"
        )
    return t


def _anomaly_table(anoms: list[dict[str, Any]]) -> Table:
    t = Table(title="argus.anomalies by level", expand=True)
    t.add_column("level")
    t.add_column("kind")
    t.add_column("count", justify="right")
    for (lvl, kind), n in sorted(Counter((a["level"], a["kind"]) for a in anoms).items()):
        t.add_row(lvl, kind, str(n))
    return t


TRAIN_STRAGGLER, TRAIN_PHASES = 2, ("mlp", "forward")
TRAIN_DETECTORS: dict[str, str] = {}
"""Detector overrides of the training demo: none. It used to page only at confidence 0.9 (4
CPU processes on a shared host jitter), which missed the slowed rank in most runs (its L2
windows pass at their floor, 1/256, so it took 4+ consecutive windows) and hid the false
pages instead of fixing them; the funnel now pages neither a pair's single window nor one
slow step of a rank (:mod:`argus.detectors.funnel.state`, ``bench/bench_demo_pages.py``)."""


def _training_available() -> bool:
    return (Path.cwd() / "examples" / "ddp_transformer.py").is_file()


def run_demo(
    settings: Settings,
    *,
    source: str = "training",
    scenario: str = "compute-straggler",
    ranks: int = 64,
    steps: int = 120,
    rate: float = 4.0,
    out: Path = Path("out/demo-findings.json"),
    keep_topics: bool = False,
    console: Console | None = None,
    timeout_s: float = 240.0,
    world: int = 4,
    straggler: int = TRAIN_STRAGGLER,
    slowdown: float = 3.0,
    detectors_env: dict[str, str] | None = None,
    settle_s: float = 20.0,
    wait_settle: bool = False,
) -> DemoResult:
    """Run the demo; returns whether an alert named the scenario's culprit.

    ``world``, ``straggler``, ``slowdown``: the training job's ranks, the slowed rank and its
    MLP factor; ``detectors_env``: detector overrides for the workers (default: the demo's
    ``TRAIN_DETECTORS``; ``{}`` for the defaults). The view stops ``settle_s`` after the job
    ends once the culprit is found, or at ``timeout_s``; with ``wait_settle`` it stops
    ``settle_s`` after the job ends whatever was found (benches counting every page)."""
    from argus.kafka.admin import create_topics, delete_topics
    from argus.kafka.local import LocalBroker
    from argus.sim.simulate import SimRun, publish, simulate

    console = console or Console()
    if settings.local_broker:
        st = LocalBroker(settings).up()
        console.print(f"[bold]broker[/] Apache Kafka on {st.bootstrap} (pid {st.pid})")
    prefix = f"{settings.topic_prefix}-demo-{uuid.uuid4().hex[:6]}"
    topics = create_topics(settings, prefix=prefix, partitions=2)
    console.print(f"[bold]topics[/] {len(topics)} under {prefix}.*")
    if source == "training" and not _training_available():
        console.print(
            "[yellow]examples/ddp_transformer.py is not here (run from the repository); "
            "using the simulator[/]"
        )
        source = "simulator"
    logs = settings.state_dir / "demo"
    env = {"ARGUS_TOPIC_PREFIX": prefix, **DEMO_STREAMS}
    run = None
    if source == "training":
        env.update(TRAIN_DETECTORS if detectors_env is None else detectors_env)
        job = "demo-training"
        truth, truth_group, truth_phases = {straggler}, None, set(TRAIN_PHASES)
        truth_doc: dict[str, Any] = {
            "ranks": [straggler],
            "phases": list(TRAIN_PHASES),
            "fault": f"rank {straggler}'s MLP {slowdown:g}x slower",
        }
        what = f"CPU DDP transformer, {world} processes over gloo, collectors on, {steps} steps"
    else:
        run = SimRun.make(scenario, ranks=ranks, steps=steps, seed=7, job=f"demo-{scenario}")
        job = run.job
        truth, truth_group, truth_phases = set(run.truth.ranks), run.truth.group, set()
        truth_doc = run.truth_dict()
        truth_doc["fault"] = run.truth.description
        what = (
            f"{run.layout.world} simulated ranks ({run.layout}), {steps} steps at {rate:g} steps/s"
        )
    workers = [
        WorkerProcess(roles, env=env, log_path=logs / f"worker-{'-'.join(roles)}.log").start()
        for roles in ROLE_SPLIT
    ]
    console.print(
        f"[bold]workers[/] {' | '.join(' '.join(r) for r in ROLE_SPLIT)} (logs in {logs})"
    )
    console.print(f"[bold]job[/] {job}: {what}; fault: {truth_doc['fault']}")
    watch = Watcher(settings, ["alerts", "anomalies", "raw.steps", "raw.kernels"], prefix=prefix)

    def culprit_found(w: Watcher) -> bool:
        for a in w.get("alerts"):
            if a["action"] != "trigger":
                continue
            named = set(a["ranks"])
            if named and named <= truth and (not truth_phases or a["phase"] in truth_phases):
                return True
            if truth_group and a["group_id"] == truth_group[1]:
                return True
        return False

    progress = Progress(
        TextColumn("[bold]training steps" if run is None else "[bold]simulated steps"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    task = progress.add_task("steps", total=steps)
    done = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            if run is None:
                proc = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "examples.ddp_transformer",
                        "--job",
                        job,
                        "--steps",
                        str(steps),
                        "--world-size",
                        str(world),
                        "--straggler-rank",
                        str(straggler),
                        "--slowdown",
                        f"{slowdown:g}",
                    ],
                    env={**os.environ, "ARGUS_TOPIC_PREFIX": prefix},
                    capture_output=True,
                    text=True,
                    check=False,
                )
                logs.mkdir(parents=True, exist_ok=True)
                (logs / "training.log").write_text(proc.stdout + proc.stderr)
                if proc.returncode != 0:
                    raise RuntimeError(
                        f"the training job failed (exit {proc.returncode}); see {logs}/training.log"
                    )
            else:
                publish(
                    simulate(run),
                    settings,
                    prefix=prefix,
                    step_rate=rate,
                    on_step=lambda s: progress.update(task, completed=s + 1),
                )
        except BaseException as exc:  # shown after the live view
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=produce, name="argus-demo-job", daemon=True).start()
    t0 = time.monotonic()
    settle: float | None = None
    try:
        with Live(console=console, refresh_per_second=4) as live:
            while time.monotonic() - t0 < timeout_s:
                if run is None:
                    got = watch.get("raw.steps")
                    progress.update(task, completed=1 + max((r["step"] for r in got), default=-1))
                live.update(
                    Group(
                        progress,
                        _anomaly_table(watch.get("anomalies")),
                        _alerts_table(watch.get("alerts")),
                    )
                )
                if done.is_set() and settle is None:
                    settle = time.monotonic()
                if (
                    settle is not None
                    and time.monotonic() - settle > settle_s
                    and (wait_settle or culprit_found(watch) or (not truth and not truth_group))
                ):
                    break
                if any(not w.alive for w in workers):
                    break
                time.sleep(0.25)
            live.update(
                Group(
                    progress,
                    _anomaly_table(watch.get("anomalies")),
                    _alerts_table(watch.get("alerts")),
                )
            )
    finally:
        end_s = time.monotonic() - t0
        for w in workers:
            w.stop()
        watch.close()
        if not keep_topics:  # the contract's topics, the re-key topics and faust's changelogs
            from confluent_kafka.admin import AdminClient

            names = AdminClient(settings.kafka_config()).list_topics(timeout=10).topics
            delete_topics(
                settings, [t for t in names if t.startswith((f"{prefix}.", f"{prefix}-"))]
            )
    if errors:
        raise errors[0]
    found = culprit_found(watch)
    alerts = watch.get("alerts")
    anomalies = watch.get("anomalies")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "source": source,
                "job": job,
                "truth": truth_doc,
                "topic_prefix": prefix,
                "culprit_found": found,
                "alerts": alerts,
                "anomalies_by_level": dict(Counter(f"{a['level']}/{a['kind']}" for a in anomalies)),
                "anomalies": anomalies,
            },
            indent=2,
            default=str,
        )
    )
    verdict = "[green]found[/]" if found else "[red]NOT found[/]"
    console.print(f"culprit {sorted(truth) or truth_group} {verdict}; findings -> {out}")
    return DemoResult(
        found,
        out,
        alerts,
        anomalies,
        watch.get("raw.steps"),
        watch.get("raw.kernels"),
        job_end_s=None if settle is None else settle - t0,
        end_s=end_s,
    )
