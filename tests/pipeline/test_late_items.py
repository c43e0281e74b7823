"""A late step record goes to the DLQ alone, though its router sent it in one message with
the records of its poll (issue 21, ``route_batches``): the DLQ value holds that item only,
and the records beside it are windowed as usual."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from argus.config import Settings
from argus.sim.simulate import SimRun, publish, simulate
from argus.streams.local_run import Watcher

from .harness import metric, worker

pytestmark = [pytest.mark.kafka]

RANKS, STEPS, HELD = 16, 48, (0, 1, 2, 3)


def test_late_items_go_to_the_dlq_one_by_one(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    run = SimRun.make("healthy", ranks=RANKS, steps=STEPS, seed=5)
    steps = [r for r in simulate(run) if r[0] == "raw.steps"]
    # rank 7 reports nothing until the others are done, then its first steps: late (a rank
    # that had reported later steps would be replaying, a duplicate)
    late = [r for r in steps if r[2]["rank"] == 7 and r[2]["step"] in HELD]
    rest = [r for r in steps if r[2]["rank"] != 7]
    w = worker(topic_prefix, tmp_path, ("l1", "l2"), ARGUS_STREAMS__LATENESS_STEPS="4").start()
    watch = Watcher(kafka, ["dlq"], prefix=topic_prefix)
    try:
        publish(iter(rest), kafka, prefix=topic_prefix)
        # the held steps closed without rank 7 (4 steps of lateness) before it reports them
        assert watch.wait_for(
            lambda _: metric(w, "argus_windows_closed_total", role="steps") >= STEPS - 8,
            timeout_s=120,
        ), w.log_tail()
        publish(
            iter(late + rest[-RANKS:]), kafka, prefix=topic_prefix
        )  # late, and duplicates beside them
        assert watch.wait_for(lambda x: len(x.get("dlq")) >= len(HELD), timeout_s=60), w.log_tail()
    finally:
        w.stop()
        watch.close()
    dlq = watch.get("dlq")
    assert len(dlq) == len(HELD), [d["reason"] for d in dlq]
    got = []
    for d in dlq:
        assert d["reason"].startswith("late"), d["reason"]
        msg = json.loads(d["value"])
        (item,) = msg["items"]  # the late item alone, not its poll's message
        got.append((item["rank"], item["step"]))
        assert d["source_topic"].endswith("internal.steps-by-block")
    assert sorted(got) == [(7, s) for s in HELD]
