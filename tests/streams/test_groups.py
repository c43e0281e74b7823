"""The consumer groups a worker reads in, by roles and runtimes (argus.streams.groups)."""

from __future__ import annotations

from argus.streams.groups import worker_groups


def test_the_loops_groups_join_the_faust_apps() -> None:
    steps = ("l1", "l2", "funnel", "stacks")
    assert worker_groups("p", steps, steps_router="faust") == ["p-funnel-l1-l2-stacks"]
    assert worker_groups("p", steps) == ["p-funnel-l1-l2-stacks", "p-steps-router"]
    assert worker_groups("p", ("compressor",)) == ["p-compressor"]
    assert worker_groups("p", ("all",)) == [
        "p-all",
        "p-compressor",
        "p-steps-router",
    ]
    assert worker_groups("p", ("compressor", "l3"), runtime="faust") == ["p-compressor-l3"]
