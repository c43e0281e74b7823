"""The broker stops and restarts while a job runs (issue 9, broker fault).

A private broker (own ports and state dir; the shared one is never touched) serves a
simulated job published through the collectors' own producer (``RecordProducer``: bounded
queue, idempotent, ``acks=all``) and the two worker processes. At step 12 the broker is
stopped for ~10 s and started again (it then takes ~10 s to serve). Then:

* the producer never blocked nor raised (submit is O(1)), its queue stayed bounded, and
  every submitted record is accounted for: acknowledged or counted as dropped;
* the workers survived and every record the broker acknowledged was consumed;
* the culprit is still alerted and nothing went to the DLQ.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from argus.collectors.producer import RecordProducer
from argus.config import Settings
from argus.kafka.admin import create_topics
from argus.kafka.local import LocalBroker
from argus.sim.simulate import SimRun, simulate
from argus.streams.local_run import Watcher, WorkerProcess
from tests.pipeline import harness
from tests.pipeline.harness import FAST, SPLIT, metric

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STEPS, RATE, DOWN_AT = 60, 1.0, 12  # steps/s; the broker stops at this step


def _restart(broker: LocalBroker, attempts: int = 3) -> bool:
    """Start the stopped broker again. On a loaded 2-core host its JVM has exited during
    start-up right after a stop (seen before and after the engine's changes); what this
    test judges is the pipeline across the outage, so a failed start is retried."""
    for i in range(attempts):
        try:
            return broker.up(timeout_s=120).running
        except Exception:
            if i == attempts - 1:
                raise
            time.sleep(5)
    return False


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[tuple[LocalBroker, Settings, dict[str, str]]]:
    with harness.private_broker(tmp_path) as (broker, settings, env):
        yield broker, settings, {**env, "ARGUS_TOPIC_PREFIX": "argus"}


def test_broker_restart_mid_job_loses_nothing_acknowledged(
    private_broker: tuple[LocalBroker, Settings, dict[str, str]], tmp_path: Path
) -> None:
    broker, settings, env = private_broker
    create_topics(settings, partitions=2)
    run = SimRun.make("compute-straggler", ranks=32, steps=STEPS, seed=4)
    truth = set(run.truth.ranks)
    workers = [
        WorkerProcess(
            roles,
            env={**env, **FAST},
            log_path=tmp_path / f"worker-{'-'.join(roles)}.log",
            metrics_port=harness.free_port(),
        ).start()
        for roles in SPLIT
    ]
    submitted = {"raw.steps": 0, "raw.kernels": 0}
    acked = {"raw.steps": 0, "raw.kernels": 0}

    class Counting(RecordProducer):
        """Counts acknowledgements per topic (the producer hands its one delivery callback
        to librdkafka when it is made, so it is overridden in a subclass)."""

        def _on_delivery(self, err: Any, msg: Any) -> None:
            super()._on_delivery(err, msg)
            if err is None:
                acked[msg.topic().removeprefix("argus.")] += 1

    prod = Counting(settings.kafka_config(), max_records=5_000)
    worst_submit_s, max_depth = 0.0, 0
    watch = None
    try:
        outage: dict[str, Any] = {}

        def stop_and_restart() -> None:  # beside the job: records keep coming meanwhile
            outage["stopped"] = broker.down()
            time.sleep(10)
            outage["restarted"] = _restart(broker)
            outage["t_up"] = time.monotonic()

        fault = threading.Thread(target=stop_and_restart)
        during = 0  # records submitted while the broker was away
        t0 = time.monotonic()
        for topic, key, rec in simulate(run):
            step = int(rec.get("step", rec.get("window_id", 0)))
            if step == DOWN_AT and not fault.is_alive() and not outage:
                fault.start()
            while time.monotonic() < t0 + step / RATE:
                time.sleep(0.01)
            s = time.perf_counter()
            assert prod.submit(f"argus.{topic}", key.encode(), _record(topic), rec, 4096)
            worst_submit_s = max(worst_submit_s, time.perf_counter() - s)
            submitted[topic] += 1
            during += "stopped" in outage and "t_up" not in outage
            max_depth = max(max_depth, prod.queue_depth)
        fault.join()
        assert outage["stopped"] and outage["restarted"], outage
        assert during >= 5 * 2 * 32, f"only {during} records submitted during the outage"
        left = prod.flush(60)
        assert left == 0
        assert prod.dropped_records + sum(acked.values()) == sum(submitted.values()), (
            prod.dropped_records,
            acked,
            submitted,
        )
        # the outage (~10 s down + the restart) is shorter than the collectors' 30 s delivery
        # timeout, so librdkafka's retries deliver what was queued meanwhile
        assert acked["raw.steps"] > 0.9 * submitted["raw.steps"], (acked, submitted)
        watch = Watcher(settings, ["alerts", "dlq"], prefix="argus")
        steps_w, kernels_w = workers
        assert watch.wait_for(
            lambda _: (
                metric(steps_w, "argus_records_in_total", role="steps", topic="raw.steps")
                >= acked["raw.steps"]
                and metric(kernels_w, "argus_records_in_total", role="compressor")
                >= acked["raw.kernels"]
            ),
            # nothing acknowledged is lost; how fast it drains is not judged here (two
            # clean-clone runs beside other heavy tests on 2 cores needed more than 120 s)
            timeout_s=300,
        ), steps_w.log_tail() + kernels_w.log_tail()
        assert watch.wait_for(
            lambda w: any(
                a["action"] == "trigger" and set(a["ranks"]) <= truth and a["ranks"]
                for a in w.get("alerts")
            ),
            timeout_s=120,
        ), steps_w.log_tail()
        assert all(w.proc is not None and w.proc.poll() is None for w in workers)
        assert watch.get("dlq") == []
    finally:
        prod.close(2)
        for w in workers:
            w.stop()
        if watch is not None:
            watch.close()
    assert worst_submit_s < 0.05, f"submit blocked {worst_submit_s * 1e3:.1f} ms"
    assert max_depth <= 5_000 + 1_000  # our queue bound + librdkafka's in flight


def _record(topic: str) -> str:
    return {"raw.steps": "step_record", "raw.kernels": "kernel_batch"}[topic]
