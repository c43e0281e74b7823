"""Differential test (issue 17): one seeded simulated job, live through the workers on the
real broker and offline through the in-memory engine, must give the same findings under
each fault mode.

Live: the workers' real split (:data:`harness.SPLIT`: step roles and funnel in one process,
compressor and L3 in another) on private topics with ``PARTITIONS`` (2) partitions each,
fed by the simulator through an idempotent producer (``acks=all``, as the collectors'; it
waits out a broker outage instead of dropping). Offline: :func:`_offline`, the engine that
``argus diagnose`` runs, over the very records the simulator produced. Once both workers'
groups committed everything and nothing new came for 8 s, the live side is read back from
``anomalies`` and ``alerts`` by a fresh consumer (the long-lived ``Watcher`` missed all but 2
of 696 anomalies after the broker restart). Compared, as sets (a restarted worker may send
a record twice), and nothing may be in the DLQ (a late record is lost to its window):

* the anomaly ids of levels L1, L2 and L3;
* the funnel's verdict ids (level ``funnel``);
* the alert triggers: dedup key, levels, the culprit's first and last seen event time, and
  the alert id (which hashes the funnel window that fired).

In ``kill-steps`` and ``lag`` one rank's collector also stops writing for a while mid-job
(``Mode.stop``; it comes back before the end, so no step closes by the idle bound): its
``missing_rank`` (the silent-rank rule, docs/pipeline.md) must come out the same live,
across the steps worker's restart and the catch-up, as offline.

Fault modes (``MODES``): ``lag`` (published ~4x faster than the workers keep up on 2
cores; the test checks the backlog grew while publishing), ``late-l3`` (the kernel-roles
worker starts 60 s after the job), ``kill-kernels`` and ``kill-steps`` (SIGKILL of that
worker mid-job, at step 25, restarted at once; the steps router on its own loop, the
default), ``kill-steps-faust`` (``kill-steps`` with the steps router a faust agent,
``streams.steps_router_runtime = "faust"``), ``broker`` (a
private broker stopped for 30 s at step 30 and restarted; the shared one is never touched).
``make test`` runs ``late-l3`` and the three SIGKILL modes; ``make chaos`` runs all six
(results: docs/reliability.md, "Live equals offline").

Stream settings are the harness's short ones, except ``idle_close_s`` and ``funnel_idle_s``:
their production 120 s and 150 s (the processing-time bounds; the harness's 30 s would close
windows incomplete during a 30 s outage and the broker's restart, a documented difference,
not the event-time engine's), and rank blocks of 16 so the job tier joins two blocks. On a failure the records
of the ids that differ are written to ``differential.json`` beside the workers' logs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from argus.config import Settings
from argus.kafka.admin import create_topics, delete_prefixed
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher, WorkerProcess
from argus.streams.pipeline_config import PipelineConfig

from .harness import (
    FAST,
    SPLIT,
    STEPS_ROUTER,
    TICK_SLACK,
    backlog,
    groups_of,
    has_metric,
    metric,
    private_broker,
    worker,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SCENARIO, RANKS, SEED = "compute-straggler", 32, 5
PARTITIONS = int(os.environ.get("ARGUS_DIFF_PARTITIONS", "2"))  # of every external topic
ENV = {  # on top of the harness's FAST settings; the offline engine gets the same
    "ARGUS_STREAMS__IDLE_CLOSE_S": "120",
    "ARGUS_STREAMS__FUNNEL_IDLE_S": "150",
    "ARGUS_STREAMS__STEPS_BLOCK_RANKS": "16",
}
LEVELS = ("L1", "L2", "L3")
STEPS_ROLES, KERNEL_ROLES = SPLIT


@dataclass(frozen=True)
class Mode:
    """One fault mode: the job (steps, publish rate in steps/s) and the fault."""

    name: str
    steps: int = 60
    rate: float | None = 2.0  # None: as fast as the producer goes
    kill: str | None = None  # "steps" | "kernels": SIGKILL that worker at ``at`` step
    at: int = 25
    late_s: float = 0.0  # kernel-roles worker started this long after the job began
    broker_down_s: float = 0.0  # private broker stopped at step ``at`` for this long
    probe_lag: bool = False  # sample the raw backlog every 10 steps; it must grow
    # (rank, first, end): that rank's collector writes nothing for steps [first, end) (it
    # hung, or died and was restarted); the job goes on
    stop: tuple[int, int, int] | None = None
    env: tuple[tuple[str, str], ...] = ()  # the workers' settings on top of ENV

    @property
    def steps_router(self) -> str:
        """``streams.steps_router_runtime`` of this mode's workers."""
        return dict(self.env).get("ARGUS_STREAMS__STEPS_ROUTER_RUNTIME", STEPS_ROUTER)

    def published(self, rec: dict[str, Any]) -> bool:
        """Whether the job writes ``rec`` (a stopped rank writes nothing while stopped)."""
        if self.stop is None or rec["rank"] != self.stop[0]:
            return True
        return not self.stop[1] <= int(rec.get("step", rec.get("window_id", 0))) < self.stop[2]


MODES = {
    m.name: m
    for m in (
        Mode("lag", steps=240, rate=20.0, probe_lag=True, stop=(5, 100, 180)),
        Mode("late-l3", late_s=60.0),
        Mode("kill-kernels", kill="kernels"),
        Mode("kill-steps", kill="steps", stop=(5, 20, 45)),  # the router on its own loop
        # the same with the steps router a faust agent (streams.steps_router_runtime)
        Mode(
            "kill-steps-faust",
            kill="steps",
            stop=(5, 20, 45),
            env=(("ARGUS_STREAMS__STEPS_ROUTER_RUNTIME", "faust"),),
        ),
        Mode("broker", steps=120, at=30, broker_down_s=30.0),
    )
}
CHAOS_ONLY = ("lag", "broker")  # heavy: `make chaos` only


@dataclass
class Findings:
    """What one engine found for the job: anomaly ids per level (L1, L2, L3), the funnel's
    verdict ids and its alert triggers (:func:`_trigger`)."""

    ids: dict[str, set[str]]
    funnel: set[str]
    triggers: set[tuple[Any, ...]]
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> anomaly


def _trigger(a: dict[str, Any]) -> tuple[Any, ...]:
    """An alert trigger as compared: dedup key, levels, the culprit's first and last seen
    event time (ns) and the alert id (a hash of dedup key, action and the funnel window
    that fired: :func:`argus.detectors.alert_id.alert_id`)."""
    return (
        a["dedup_key"],
        tuple(sorted(a["levels"])),
        a["first_seen_ns"],
        a["last_seen_ns"],
        a["id"],
    )


def _pcfg() -> PipelineConfig:
    """The workers' stream settings (FAST + ENV) as the offline engine takes them."""
    pfx = "ARGUS_STREAMS__"
    return PipelineConfig.from_mapping(
        {k.removeprefix(pfx).lower(): v for k, v in {**FAST, **ENV}.items() if k.startswith(pfx)}
    )


def _offline(records: list[tuple[str, str, dict[str, Any]]]) -> Findings:
    """The in-memory engine (:func:`argus.streams.memory.run_engine`, which ``argus
    diagnose`` and ``argus replay`` run) over the simulator's records, funnel included."""
    from argus.streams.memory import run_engine

    steps = [r for t, _, r in records if t == "raw.steps"]
    batches = [r for t, _, r in records if t == "raw.kernels"]
    res = run_engine(steps, kernel_batches=batches, pcfg=_pcfg())
    return _findings(res.anomalies, res.alerts)


def _findings(anomalies: list[dict[str, Any]], alerts: list[dict[str, Any]]) -> Findings:
    ids = {lvl: {a["id"] for a in anomalies if a["level"] == lvl} for lvl in LEVELS}
    funnel = {a["id"] for a in anomalies if a["level"] == "funnel"}
    triggers = {_trigger(a) for a in alerts if a["action"] == "trigger"}
    return Findings(ids, funnel, triggers, {a["id"]: a for a in anomalies})


def _read_all(settings: Settings, prefix: str, suffix: str) -> list[dict[str, Any]]:
    """Every record on ``prefix.suffix``, read by a fresh consumer from each partition's
    start to its high watermark (the truth on the broker, whatever a long-lived consumer
    missed while the broker was away)."""
    from confluent_kafka import Consumer, TopicPartition

    from argus.schemas import Codec

    codec, topic = Codec(), f"{prefix}.{suffix}"
    c = Consumer(settings.kafka_config(**{"group.id": f"{prefix}-diff-read"}))
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        todo = {}
        for p in parts:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if hi > lo:
                todo[p] = (lo, hi)
        c.assign([TopicPartition(topic, p, lo) for p, (lo, _) in todo.items()])
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1.0):
                p = m.partition()
                if m.error() is not None or p not in todo:
                    continue
                out.append(codec.decode(m.value())[1])
                if (m.offset() or 0) + 1 >= todo[p][1]:
                    del todo[p]
        assert not todo, f"{topic}: partitions {sorted(todo)} not read to the end in 60 s"
        return out
    finally:
        c.close()


def _produced(settings: Settings, prefix: str) -> int:
    """Records on ``anomalies`` and ``alerts`` (sum of their partitions' high watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(settings.kafka_config(**{"group.id": f"{prefix}-diff-probe"}))
    try:
        n = 0
        for suffix in ("anomalies", "alerts"):
            topic = f"{prefix}.{suffix}"
            for p in c.list_topics(topic, timeout=10).topics[topic].partitions:
                n += c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        return n
    finally:
        c.close()


def _live(settings: Settings, prefix: str, job: str) -> Findings:
    """What the workers put on ``anomalies`` and ``alerts`` for the job."""
    anomalies = [a for a in _read_all(settings, prefix, "anomalies") if a["job"] == job]
    alerts = [a for a in _read_all(settings, prefix, "alerts") if a["job"] == job]
    return _findings(anomalies, alerts)


def _describe(a: dict[str, Any]) -> str:
    ev = a.get("evidence") or {}
    inc = " incomplete" if "incomplete_step" in ev else ""
    what = " ".join(str(a[k]) for k in ("phase", "kernel", "stream") if a.get(k))
    text = (
        f"{a['level']} {a['kind']} {a['group_kind']}/{a['group_id']} ranks {a['ranks']} {what} "
        f"steps {a['window_start_step']}-{a['window_end_step']}{inc}"
    )
    if a["level"] == "funnel":  # what the verdict joined
        joined = Counter(
            f"{f['level']} {f['kernel'] or f['phase'] or f['kind']}"
            for f in json.loads(ev.get("findings", "[]"))
        )
        text += f" persistence {a.get('persistence')} joined {dict(sorted(joined.items()))}"
    return text


def _diff(live: Findings, off: Findings) -> list[str]:
    """Lines naming every id one side has and the other lacks (empty: equal)."""
    out = []
    for lvl in LEVELS:
        for side, ids, recs in (
            ("live only", live.ids[lvl] - off.ids[lvl], live.records),
            ("offline only", off.ids[lvl] - live.ids[lvl], off.records),
        ):
            descs = sorted(_describe(recs[i]) for i in ids)
            out += [f"{lvl} {side} ({len(ids)}): {d}" for d in descs[:15]]
            if len(descs) > 15:
                out.append(f"{lvl} {side}: ... {len(descs) - 15} more")
    for side, ids, recs in (
        ("live only", live.funnel - off.funnel, live.records),
        ("offline only", off.funnel - live.funnel, off.records),
    ):
        descs = sorted(_describe(recs[i]) for i in ids)
        out += [f"funnel {side} ({len(ids)}): {d}" for d in descs[:15]]
    for side, trig in (
        ("live only", live.triggers - off.triggers),
        ("offline only", off.triggers - live.triggers),
    ):
        out += [f"trigger {side}: {t}" for t in sorted(trig)]
    return out


def _producer(settings: Settings) -> Any:
    """An idempotent producer (no reordering or duplicates on retry, like the collectors')
    that waits out a broker outage instead of dropping (300 s)."""
    from confluent_kafka import Producer

    return Producer(
        settings.kafka_config(
            **{
                "linger.ms": 20,
                "compression.type": "lz4",
                "enable.idempotence": True,
                "acks": "all",
                "message.timeout.ms": 300_000,
                "log_level": 2,  # no line per refused connection while the broker is away
            }
        )
    )


def _ready(w: WorkerProcess, role: str, timeout_s: float = 180.0) -> bool:
    """Wait until the worker holds its partitions (its lag gauge for ``role`` is set)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if has_metric(w, "argus_consumer_lag", role=role):
            return True
        if not w.alive:
            return False
        time.sleep(0.5)
    return False


def _outcomes(ws: list[WorkerProcess]) -> str:
    """Windows closed by how, per role (this process's counters), for failure messages."""
    parts = []
    for w in ws:
        for role in ("steps-block", "steps", "l3"):
            got = {
                how: metric(w, "argus_windows_closed_total", role=role, how=how)
                for how in ("complete", "timeout", "incomplete")
            }
            if any(got.values()):
                parts.append(f"{role} {got}")
        for role in ("steps", "l3"):
            late = metric(w, "argus_late_records_total", role=role)
            if late:
                parts.append(f"{role} late {late:.0f}")
    return "; ".join(parts)


class _Live:
    """The two worker processes of the split, restartable, on one broker and prefix."""

    def __init__(self, prefix: str, tmp: Path, env: dict[str, str]) -> None:
        self.prefix, self.tmp, self.env = prefix, tmp, {**ENV, **env}
        self.w: dict[str, WorkerProcess | None] = {"steps": None, "kernels": None}
        self.kills: list[str] = []
        self.lock = threading.Lock()
        self.closed = False  # after stop(): a fault thread starts nothing more

    def start(self, which: str) -> WorkerProcess | None:
        roles = STEPS_ROLES if which == "steps" else KERNEL_ROLES
        with self.lock:
            if self.closed:
                return None
            w = self.w[which] = worker(self.prefix, self.tmp, roles, **self.env).start()
            return w

    def kill_restart(self, which: str) -> None:
        w = self.w[which]
        assert w is not None and w.alive, f"{which} worker not running"
        w.kill()
        self.kills.append(f"{which} at {time.strftime('%H:%M:%S')}")
        self.start(which)

    def running(self) -> list[WorkerProcess]:
        return [w for w in self.w.values() if w is not None]

    def dead(self) -> list[str]:
        """Workers that exited by themselves (a crash)."""
        return [k for k, w in self.w.items() if w is not None and not w.alive]

    def logs(self) -> str:
        return "\n".join(f"--- {w.log_path.name}\n{w.log_tail(30)}" for w in self.running())

    def stop(self) -> None:
        with self.lock:
            self.closed = True
        for w in self.running():
            w.stop()


def _drained(
    settings: Settings,
    prefix: str,
    left: dict[str, dict[str, int]],
    steps_router: str = STEPS_ROUTER,
) -> bool:
    """Both workers' groups committed every record of every topic they read (internal
    topics: all but their last ticks), and each did read its raw topic."""
    for roles, raw in ((STEPS_ROLES, "raw.steps"), (KERNEL_ROLES, "raw.kernels")):
        read: dict[str, int] = {}  # topic -> records behind, over the worker's groups
        for g in groups_of(prefix, roles, steps_router):
            try:
                left[g] = backlog(settings, g)
            except Exception as exc:  # broker still coming back
                left[g] = {f"error {exc}": -1}
                return False
            read.update(left[g])
        if f"{prefix}.{raw}" not in read:
            return False
        for topic, n in read.items():
            if n > (TICK_SLACK if ".internal." in topic else 0):
                return False
    return True


def _total_backlog(settings: Settings, prefix: str, steps_router: str) -> int:
    """Records not yet committed by the workers' groups, over every topic they read."""
    n = 0
    for roles in SPLIT:
        try:
            n += sum(
                sum(backlog(settings, g).values()) for g in groups_of(prefix, roles, steps_router)
            )
        except Exception:  # a probe: the next sample counts
            continue
    return n


class _LagProbe(threading.Thread):
    """Samples the workers' total backlog once a second: ``(s since start, records)``."""

    def __init__(self, settings: Settings, prefix: str, steps_router: str) -> None:
        super().__init__(daemon=True)
        self.settings, self.prefix, self.steps_router = settings, prefix, steps_router
        self.samples: list[tuple[float, int]] = []
        self.halt = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self.halt.wait(1.0):
            n = _total_backlog(self.settings, self.prefix, self.steps_router)
            self.samples.append((time.monotonic() - self.t0, n))


@pytest.fixture
def broker_for(kafka: Settings, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """(settings, env, broker or None): the shared broker, or a private one for ``broker``."""
    with ExitStack() as stack:
        if request.param == "broker":
            broker, settings, env = stack.enter_context(private_broker(tmp_path))
            yield MODES[request.param], settings, env, broker
        else:
            mode = MODES[request.param]
            yield mode, kafka, dict(mode.env), None


def _params() -> list[Any]:
    return [
        pytest.param(name, marks=[pytest.mark.chaos] if name in CHAOS_ONLY else [], id=name)
        for name in MODES
    ]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("broker_for", _params(), indirect=True)
def test_live_equals_offline(broker_for: Any, tmp_path: Path) -> None:
    mode, settings, env, broker = broker_for
    t0 = time.monotonic()
    run = SimRun.make(SCENARIO, ranks=RANKS, steps=mode.steps, seed=SEED)
    records = [rec for rec in simulate(run) if mode.published(rec[2])]
    off = _offline(records)
    assert all(off.ids[lvl] for lvl in LEVELS), {k: len(v) for k, v in off.ids.items()}
    if mode.stop is not None:  # the silent rank is named (then compared, live vs offline)
        silent = [
            a["window_start_step"]
            for a in off.records.values()
            if a["kind"] == "missing_rank" and mode.stop[0] in a["ranks"]
        ]
        assert min(silent, default=-1) == mode.stop[1], sorted(silent)
        assert any(t[0].endswith(f"/all/{mode.stop[0]}/missing_rank") for t in off.triggers)

    prefix = f"d{time.monotonic_ns() % 10**10}.argus"
    create_topics(settings, prefix=prefix, partitions=PARTITIONS)
    live = _Live(prefix, tmp_path, env)
    watch = Watcher(settings, ["anomalies", "alerts", "dlq"], prefix=prefix)
    notes: list[str] = []
    probe = _LagProbe(settings, prefix, mode.steps_router)
    faults: list[threading.Thread] = []
    try:
        steps_w = live.start("steps")
        assert steps_w is not None and _ready(steps_w, "steps"), live.logs()
        if not mode.late_s:
            kernels_w = live.start("kernels")
            assert kernels_w is not None and _ready(kernels_w, "compressor"), live.logs()
        t_job = time.monotonic()

        def on_step(step: int) -> None:  # called by publish once a step's records are queued
            if step != mode.at:
                return
            fault: threading.Thread | None = None
            if mode.kill:
                fault = threading.Thread(target=live.kill_restart, args=(mode.kill,))
            elif broker is not None:

                def outage() -> None:
                    assert broker.down(), "private broker was not running"
                    time.sleep(mode.broker_down_s)
                    t_up = time.monotonic()
                    assert broker.up(timeout_s=120).running
                    notes.append(f"broker back after {time.monotonic() - t_up:.0f} s")

                fault = threading.Thread(target=outage)
            if fault is not None:
                faults.append(fault)
                fault.start()

        def late_start() -> None:
            time.sleep(max(0.0, t_job + mode.late_s - time.monotonic()))
            live.start("kernels")

        if mode.probe_lag:
            probe.t0 = t_job
            probe.start()
        if mode.late_s:
            faults.append(threading.Thread(target=late_start))
            faults[-1].start()
        counts = publish(
            iter(records),
            settings,
            prefix=prefix,
            step_rate=mode.rate,
            producer=_producer(settings),
            on_step=on_step,
        )
        t_pub = time.monotonic() - t_job
        assert sum(counts.values()) == len(records), counts
        for f in faults:
            f.join(300)
        left: dict[str, dict[str, int]] = {}
        n_seen, t_last = -1, [0.0]  # records on anomalies and alerts, when that last changed (s)

        def settled(w: Watcher) -> bool:  # drained twice, nothing new in between
            nonlocal n_seen
            assert not live.dead(), f"worker(s) {live.dead()} exited:\n{live.logs()}"
            if not _drained(settings, prefix, left, mode.steps_router):
                return False
            n = _produced(settings, prefix)
            if n != n_seen:
                n_seen, t_last[0] = n, time.monotonic() - t_job
                time.sleep(8)  # the funnel's last windows (grace 4 s) and the commits
                return False
            return True

        ok = watch.wait_for(settled, timeout_s=420, poll_s=2.0)
        assert ok, (left, _outcomes(live.running()), live.logs())
        readers = [g for g, topics in left.items() if f"{prefix}.raw.steps" in topics]
        assert readers == [  # the runtime asked for read the step records
            f"{prefix}-steps-router"
            if mode.steps_router == "kafka"
            else groups_of(prefix, STEPS_ROLES)[0]
        ], readers
        t_done = time.monotonic() - t_job
        probe.halt.set()
        if mode.probe_lag:
            during = [n for t, n in probe.samples if t <= t_pub]
            t_lag0 = next((t for t, n in probe.samples if t > t_pub and n == 0), t_done)
            notes.append(
                f"backlog while publishing {during}, max {max(n for _, n in probe.samples)},"
                f" drained {t_lag0:.0f} s after the start: {t_lag0 / t_pub:.1f}x the publish time"
            )
        outcomes = _outcomes(live.running())
        got = _live(settings, prefix, run.job)
        anomalies = _read_all(settings, prefix, "anomalies")
        dlq = _read_all(settings, prefix, "dlq")
    finally:
        probe.halt.set()
        live.stop()
        for f in faults:
            f.join(60)
        watch.close()
        delete_prefixed(settings, prefix)
    if len(watch.get("anomalies")) != len(anomalies):
        notes.append(f"the watcher saw {len(watch.get('anomalies'))} of {len(anomalies)} anomalies")
    dups = Counter(a["id"] for a in anomalies if a["level"] in LEVELS)
    n_dup = sum(n - 1 for n in dups.values())
    summary = (
        f"differential {mode.name}: "
        + " ".join(f"{lvl} {len(got.ids[lvl])}/{len(off.ids[lvl])}" for lvl in LEVELS)
        + f" funnel {len(got.funnel)}/{len(off.funnel)} triggers"
        f" {len(got.triggers)}/{len(off.triggers)} (live/offline), {n_dup} repeated live,"
        f" published {t_pub:.0f} s, last output by {t_last[0]:.0f} s, settled {t_done:.0f} s,"
        f" total {time.monotonic() - t0:.0f} s;"
        f" kills {live.kills}; {'; '.join(notes)}; windows {outcomes}"
    )
    print(summary)
    if mode.probe_lag:  # the workers fell behind, further as the job went on
        during = [n for t, n in probe.samples if t <= t_pub]
        assert len(during) >= 3 and during[-1] > during[0] and during[-1] > 1000, notes
    diff = _diff(got, off)
    if dlq:  # a late record lost to its window, or bad input: nothing may go there
        kinds = Counter(f"{d['error_type']} {d['source_topic'].removeprefix(prefix)}" for d in dlq)
        diff.append(f"dlq ({len(dlq)}): {dict(kinds)}; first: {dlq[0]['reason']}")
    if diff:  # both sides' records of the ids that differ, for the post-mortem
        odd = set(got.records) ^ set(off.records)
        dump = {
            "live": [got.records[i] for i in sorted(odd) if i in got.records],
            "offline": [off.records[i] for i in sorted(odd) if i in off.records],
            "live_triggers": sorted(got.triggers),
            "offline_triggers": sorted(off.triggers),
        }
        (tmp_path / "differential.json").write_text(json.dumps(dump, indent=1, default=str))
        diff.append(f"records: {tmp_path / 'differential.json'}; worker logs in {tmp_path}")
    assert not diff, "\n".join([summary, *diff])
