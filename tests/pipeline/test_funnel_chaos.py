"""SIGKILL of the funnel's worker at random moments of a job: no alert and no funnel verdict
lost or repeated (:mod:`argus.streams.outbox`).

The funnel runs alone in its worker, with the outbox failpoint widening its two crash
windows to 0.5 s each (after the state holding the outbox is durable, and after the records
are acknowledged, before the emptied outbox is durable). The first kill comes right after an
alert is visible on ``argus.alerts`` (the race a clean-clone CI run lost: one alert sent
twice); the restarted worker must find it there and say so. The others come at random
moments once the restarted worker holds its partitions again.

``ARGUS_CHAOS_KILLS`` (default 2; ``make chaos``: 20) kills, ``ARGUS_CHAOS_SEED`` the random
moments (printed; default random).
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from argus.config import Settings
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher, WorkerProcess
from argus.streams.outbox import PAUSE_ENV

from .funnel_check import audit
from .harness import has_metric, worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

KILLS = int(os.environ.get("ARGUS_CHAOS_KILLS", "2"))
RATE = 4.0  # steps/s: a funnel window each 2.5 s
RANKS = 16


def _funnel(prefix: str, tmp: Path) -> WorkerProcess:
    # without L3 a window closes after the grace, and only once the one before it closed:
    # short grace and idle periods, so the funnel keeps up and resolves soon after the job
    env = {
        PAUSE_ENV: "0.5",
        "ARGUS_STREAMS__FUNNEL_GRACE_S": "1",
        "ARGUS_STREAMS__FUNNEL_IDLE_S": "2",
        "ARGUS_STREAMS__IDLE_CLOSE_S": "1",
    }
    return worker(prefix, tmp, ("funnel",), **env).start()


def _assigned(w: WorkerProcess, timeout_s: float) -> float | None:
    """Seconds until the worker holds its partitions (its lag gauge is set), or None."""
    t0 = time.monotonic()
    while time.monotonic() < t0 + timeout_s:
        if has_metric(w, "argus_consumer_lag", role="funnel"):
            return time.monotonic() - t0
        time.sleep(0.5)
    return None


def test_sigkill_of_the_funnel_loses_and_repeats_nothing(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("ARGUS_CHAOS_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    print(f"chaos: {KILLS} kills, ARGUS_CHAOS_SEED={seed}")
    steps = int(RATE * (15 + 10 * KILLS))  # long enough for the kills at 8 s a restart
    run = SimRun.make("noisy-neighbour", ranks=RANKS, steps=steps, seed=5, kernels=False)
    alerted = threading.Event()

    def on_record(suffix: str, _key: str, rec: dict[str, Any]) -> None:
        if suffix == "alerts" and rec["action"] == "trigger":
            alerted.set()

    steps_w = worker(topic_prefix, tmp_path, ("l1", "l2")).start()
    funnel_w = _funnel(topic_prefix, tmp_path)
    watch = Watcher(kafka, ["alerts", "anomalies", "dlq"], prefix=topic_prefix, on_record=on_record)
    pub = threading.Thread(
        target=publish,
        args=(simulate(run), kafka),
        kwargs={"prefix": topic_prefix, "step_rate": RATE},
        daemon=True,
    )
    moments: list[str] = []
    t0 = time.monotonic()
    try:
        assert _assigned(funnel_w, 120) is not None, funnel_w.log_tail()
        pub.start()
        # the old race: the alert left, the state with the emptied outbox is not durable yet
        assert alerted.wait(180), funnel_w.log_tail()
        funnel_w.kill()
        moments.append("right after the first trigger was visible")
        funnel_w = _funnel(topic_prefix, tmp_path)
        for _ in range(KILLS - 1):
            back = _assigned(funnel_w, 180)
            assert back is not None, funnel_w.log_tail()
            wait = rng.uniform(0.0, 6.0)
            time.sleep(wait)
            funnel_w.kill()
            moments.append(f"{wait:.1f} s after it held its partitions (back in {back:.0f} s)")
            funnel_w = _funnel(topic_prefix, tmp_path)
        pub.join(600)
        assert not pub.is_alive()

        def settled(w: Watcher) -> bool:  # every alert resolved (idle windows after the job)
            open_: set[str] = set()
            for a in w.get("alerts"):
                (open_.add if a["action"] == "trigger" else open_.discard)(a["dedup_key"])
            return bool(w.get("alerts")) and not open_

        t_pub = time.monotonic() - t0
        assert watch.wait_for(settled, timeout_s=240), funnel_w.log_tail()
        t_settled = time.monotonic() - t0
        watch.wait_for(lambda _: False, timeout_s=3)
    finally:
        funnel_w.stop()
        steps_w.stop()
        watch.close()
    print("chaos: killed", "; ".join(moments))
    print(f"chaos: job published at {t_pub:.0f} s, alerts settled at {t_settled:.0f} s")
    alerts = watch.get("alerts")
    triggers = [a for a in alerts if a["action"] == "trigger"]
    # the culprit is alerted (a second, spurious trigger on rank 4 went with the L2 gates of
    # issue 18); lost or repeated records are the audit's, below
    assert triggers and set(run.truth.ranks) <= {r for a in triggers for r in a["ranks"]}
    checked = audit(kafka, topic_prefix, alerts, watch.get("anomalies"))
    assert checked.ok, (seed, checked.repeated, checked.lost, checked.rule_breaks)
    assert "were sent before a restart; not sent again" in funnel_w.log_path.read_text(), (
        "the kill after the first trigger did not hit the outbox's window"
    )
    assert watch.get("dlq") == []
