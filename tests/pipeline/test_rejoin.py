"""A SIGKILLed and restarted worker has its partitions back within seconds (static group
membership, argus.streams.static_membership), not after the broker's 60 s session timeout.

Two workers of one role set run on this host: each holds its own ``group.instance.id``
(``<host>-w0``, ``<host>-w1``). The first is killed and started again: it takes the same id,
the broker hands it the old member's partitions without waiting for the dead member, the
other worker keeps its own, and the group then processes new input to the end. A clean stop
(SIGTERM) still leaves the group at once, handing the partitions to the other worker."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from argus.config import Settings
from argus.sim.simulate import SimRun, publish, simulate
from argus.topics import topic_name

from .harness import TICK_SLACK, backlog, groups_of, worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROLES = ("l1", "l2", "funnel")
REJOIN_S = 20.0  # bar: well under the 60 s session timeout, with room for a loaded 2-core CI

Members = dict[str, tuple[str, frozenset[tuple[str, int]]]]  # instance id -> member id, tps


def _members(admin: AdminClient, group: str) -> Members | None:
    """The group's members by instance id while it is stable, else None."""
    d = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    if d.state != ConsumerGroupState.STABLE:
        return None
    return {
        m.group_instance_id or "": (
            m.member_id,
            frozenset((tp.topic, tp.partition) for tp in m.assignment.topic_partitions),
        )
        for m in d.members
    }


def _wait(pred: Callable[[], bool], timeout_s: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.2)
    return None


def test_sigkilled_worker_gets_its_partitions_back_within_seconds(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    group = f"{topic_prefix}-{'-'.join(sorted(ROLES))}"
    admin = AdminClient(kafka.kafka_config())
    seen: Members = {}

    def members(n: int) -> Callable[[], bool]:
        def ok() -> bool:
            got = _members(admin, group)
            seen.clear()
            seen.update(got or {})
            return got is not None and len(got) == n and all(got)

        return ok

    first = worker(topic_prefix, tmp_path / "a", ROLES).start()
    second = None
    try:  # one at a time, so the first takes slot 0
        assert _wait(members(1), 120) is not None, first.log_tail()
        second = worker(topic_prefix, tmp_path / "b", ROLES).start()
        assert _wait(lambda: members(2)() and all(tps for _, tps in seen.values()), 120), (
            seen,
            second.log_tail(),
        )
        before = dict(seen)
        ids = sorted(before)
        assert ids[0].endswith("-w0") and ids[1].endswith("-w1"), ids
        killed, kept = ids

        first.kill()  # SIGKILL: no LeaveGroup, the member stays until its session times out
        first = worker(topic_prefix, tmp_path / "a", ROLES).start()

        def back() -> bool:
            return (
                members(2)()
                and seen.keys() == before.keys()
                and seen[killed][0] != before[killed][0]  # the new process's member
                and seen[killed][1] == before[killed][1]  # the old member's partitions
            )

        took = _wait(back, REJOIN_S)
        assert took is not None, (
            f"not reassigned within {REJOIN_S} s: {seen}",
            first.log_tail(),
        )
        assert seen[kept] == before[kept], "the surviving worker's membership changed"

        # and the group processes again: new step records are taken and committed
        run = SimRun.make("healthy", ranks=16, steps=12, seed=3, kernels=False)
        publish(simulate(run), kafka, prefix=topic_prefix)
        left: dict[str, int] = {}

        def drained() -> bool:  # the app's group and the steps router's loop's
            left.clear()
            for g in groups_of(topic_prefix, ROLES):
                left.update(backlog(kafka, g))
            read = {topic_name(t, topic_prefix) for t in ("raw.steps", "internal.steps-by-block")}
            return read <= left.keys() and not any(
                n > (TICK_SLACK if ".internal." in t else 0) for t, n in left.items()
            )

        assert _wait(drained, 60) is not None, (left, first.log_tail(), second.log_tail())

        # a clean stop still leaves the group (LeaveGroup v3 with the instance id): the other
        # worker takes the partitions at once, not after the stopped member's session timeout
        everything = before[killed][1] | before[kept][1]
        assert second.stop() == 0, second.log_tail()

        def handed_over() -> bool:
            return members(1)() and seen.keys() == {killed} and seen[killed][1] == everything

        assert _wait(handed_over, REJOIN_S) is not None, (seen, first.log_tail())
    finally:
        first.stop()
        if second is not None:
            second.stop()
