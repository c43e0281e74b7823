"""Rejoin after SIGKILL (issue 17): how long a restarted stream worker waits for its partitions.

On the real local broker, per run on a fresh topic prefix:

1. start ``argus worker ROLES`` and wait until its consumer group is stable with every
   partition assigned;
2. publish a simulated job (``argus simulate SCENARIO --kafka --rate R``, a subprocess);
3. ``--kill-after`` seconds into the job, SIGKILL the worker and start it again at once;
   the job goes on publishing for ``--tail`` seconds more;
4. poll the group (confluent-kafka ``AdminClient``) every 0.2 s and report, from the SIGKILL:

   * **assigned**: the group is stable again and the new process's member holds every
     partition the killed one held (a member of the killed process still listed does not
     count);
   * **caught up**: the group's committed offset on every input partition reached the high
     watermark it had at the SIGKILL (what was published before the crash is processed);
   * **lag 0**: after the job's last record, committed = high watermark on every input
     partition (everything published, including during the outage, is processed).

``--instance-id off`` runs the workers with dynamic group membership (the behaviour before
static membership); the default is the worker's own (static, ``argus worker --instance-id``).

    .venv/bin/python bench/bench_rejoin.py --runs 3                     # static membership
    .venv/bin/python bench/bench_rejoin.py --runs 3 --instance-id off   # dynamic (before)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from argus.config import Settings, load_settings
from argus.kafka.admin import create_topics, delete_prefixed
from argus.kafka.local import LocalBroker
from argus.streams.local_run import WorkerProcess

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "pipeline"))
from harness import free_port

TP = tuple[str, int]


@dataclass
class Group:
    """One poll of a consumer group: state, members' ids and the partitions each holds."""

    stable: bool
    members: dict[str, set[TP]]  # member id -> assigned (topic, partition)

    @property
    def assigned(self) -> set[TP]:
        return set().union(*self.members.values()) if self.members else set()


def describe(admin: AdminClient, group: str) -> Group:
    d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    members = {
        m.member_id: {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
        for m in d.members
    }
    return Group(d.state == ConsumerGroupState.STABLE, members)


def lag(
    admin: AdminClient, probe: Consumer, group: str, tps: set[TP], upto: dict[TP, int] | None
) -> int:
    """Records of ``tps`` the group has not committed: sum of (target - committed) over the
    partitions, the target being ``upto[tp]`` or else the current high watermark."""
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in sorted(tps)])
    got = admin.list_consumer_group_offsets([req])[group].result(timeout=15)
    total = 0
    for tp in got.topic_partitions:
        key = (tp.topic, tp.partition)
        lo, hi = probe.get_watermark_offsets(TopicPartition(*key), timeout=10)
        target = hi if upto is None else upto[key]
        total += max(0, target - (tp.offset if tp.offset >= 0 else lo))
    return total


def high_watermarks(probe: Consumer, tps: set[TP]) -> dict[TP, int]:
    return {tp: probe.get_watermark_offsets(TopicPartition(*tp), timeout=10)[1] for tp in tps}


def wait(pred: object, timeout_s: float, poll_s: float = 0.2) -> float | None:
    """Seconds until ``pred()`` is true (polled), or None after ``timeout_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if pred():  # type: ignore[operator]
            return time.monotonic() - t0
        time.sleep(poll_s)
    return None


def one_run(s: Settings, a: argparse.Namespace, n: int) -> dict[str, float | None]:
    prefix = f"rejoin{uuid.uuid4().hex[:8]}.argus"
    create_topics(s, prefix=prefix, partitions=a.partitions)
    roles = tuple(a.roles.split())
    group = f"{prefix}-{'all' if roles == ('all',) else '-'.join(sorted(roles))}"
    env = {"ARGUS_TOPIC_PREFIX": prefix, "ARGUS_STREAMS__INTERNAL_PARTITIONS": str(a.partitions)}
    if a.instance_id is not None:
        env["ARGUS_WORKER_INSTANCE_ID"] = a.instance_id
    log_dir = Path(tempfile.mkdtemp(prefix="bench-rejoin-"))

    def start() -> WorkerProcess:
        return WorkerProcess(
            roles,
            env=env,
            log_path=log_dir / "worker.log",
            metrics_port=free_port(),
            loglevel="info",
        ).start()

    admin = AdminClient(s.kafka_config())
    probe = Consumer(s.kafka_config(**{"group.id": f"{group}-probe"}))
    w = start()
    sim: subprocess.Popen[bytes] | None = None
    out: dict[str, float | None] = {}
    try:
        first: Group | None = None

        def ready() -> bool:
            nonlocal first
            first = describe(admin, group)
            return first.stable and bool(first.members)

        if wait(ready, 120) is None or first is None:
            raise SystemExit(f"worker never joined its group {group}; log: {log_dir}")
        held = first.assigned
        inputs = {tp for tp in held if ".internal." in tp[0] or ".raw." in tp[0]}
        steps = int(a.rate * (a.kill_after + a.tail))
        sim = subprocess.Popen(
            [sys.executable, "-m", "argus.cli", "simulate", a.scenario, "--kafka",
             "--ranks", str(a.ranks), "--steps", str(steps), "--rate", str(a.rate),
             "--seed", str(n), "--prefix", prefix, *([] if a.kernels else ["--no-kernels"])],
            env={**os.environ, "ARGUS_TOPIC_PREFIX": prefix},
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        ended: list[float] = []

        def publisher_done(p: subprocess.Popen[bytes] = sim) -> None:
            p.wait()
            ended.append(time.monotonic())

        threading.Thread(target=publisher_done, daemon=True).start()
        time.sleep(a.kill_after)
        killed = describe(admin, group).members.keys()
        w.kill()  # SIGKILL: no LeaveGroup, no last commit
        t_kill = time.monotonic()
        at_kill = high_watermarks(probe, inputs)
        w = start()

        def reassigned() -> bool:
            g = describe(admin, group)
            return g.stable and not (g.members.keys() & killed) and g.assigned >= held

        out["assigned"] = wait(reassigned, a.timeout)
        out["caught_up"] = (
            None
            if wait(lambda: lag(admin, probe, group, inputs, at_kill) == 0, a.timeout) is None
            else time.monotonic() - t_kill
        )
        sim.wait(a.timeout)
        time.sleep(0.1)
        out["job_end"] = (ended[0] if ended else time.monotonic()) - t_kill
        out["lag0"] = (
            None
            if wait(lambda: lag(admin, probe, group, inputs, None) == 0, a.timeout) is None
            else time.monotonic() - t_kill
        )
        return out
    finally:
        if sim is not None and sim.poll() is None:
            sim.kill()
        w.stop()
        probe.close()
        delete_prefixed(s, prefix)
        print(f"  run {n}: {_fmt(out)}  (log {log_dir / 'worker.log'})", flush=True)


def _fmt(r: dict[str, float | None]) -> str:
    return "  ".join(f"{k} {'-' if v is None else f'{v:.1f} s'}" for k, v in r.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--roles", default="l1 l2 funnel", help='worker roles, e.g. "all"')
    ap.add_argument("--instance-id", default=None, help="ARGUS_WORKER_INSTANCE_ID (off: dynamic)")
    ap.add_argument("--scenario", default="compute-straggler")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--rate", type=float, default=2.0, help="steps per second")
    ap.add_argument("--kill-after", type=float, default=15.0, help="s into the job")
    ap.add_argument("--tail", type=float, default=5.0, help="s the job goes on after the kill")
    ap.add_argument("--partitions", type=int, default=2, help="of the raw and re-key topics")
    ap.add_argument(
        "--kernels", action=argparse.BooleanOptionalAction, default=False, help="kernel batches"
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="s, per phase")
    a = ap.parse_args()
    s = load_settings()
    LocalBroker(s).up()
    print(f"roles {a.roles!r}, instance id {a.instance_id or '(worker default)'}", flush=True)
    runs = [one_run(s, a, n) for n in range(a.runs)]
    for k in ("assigned", "caught_up", "lag0"):
        xs = [x for r in runs if (x := r.get(k)) is not None]
        got = [f"{x:.1f}" for x in xs]
        med = f"median {statistics.median(xs):.1f} s" if xs else "no value"
        print(f"{k:>10s}: {', '.join(got)} s ({med}; {len(runs) - len(xs)} timed out)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
