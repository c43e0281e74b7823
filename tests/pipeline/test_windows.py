"""Step windows on event time: close on completion, on a skipped step, or once the peers'
watermark passed the lateness; never on a clock."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from argus.streams import windows


def test_closes_when_every_rank_reported_and_counts_dups_and_late() -> None:
    s = windows.new_state()
    assert windows.add(s, step=0, rank=0, expected=2) == ("new", [])
    assert windows.add(s, step=0, rank=0, expected=2) == ("dup", [])
    status, closed = windows.add(s, step=0, rank=1, expected=2)
    assert status == "new" and closed == [windows.ClosedStep(0, (0, 1), 2, False)]
    assert windows.add(s, step=0, rank=1, expected=2) == ("dup", [])  # replayed after close
    assert s["late"] == 0 and s["pending"] == {}
    json.dumps(s)  # a faust table holds it as JSON


def test_a_rank_that_skipped_a_step_is_missing_from_it_at_once() -> None:
    """Each rank's records arrive in order: rank 1 reporting step 1 proves step 0 of it is
    not coming (dropped upstream)."""
    s = windows.new_state()
    windows.add(s, step=0, rank=0, expected=2)
    _, closed = windows.add(s, step=1, rank=1, expected=2)
    assert [(c.step, c.ranks, c.missing, c.timed_out) for c in closed] == [(0, (0,), 1, False)]
    _, closed = windows.add(s, step=1, rank=0, expected=2)
    assert [(c.step, c.ranks, c.missing) for c in closed] == [(1, (0, 1), 0)]


def test_a_rank_that_stopped_is_missing_once_the_peers_passed_the_lateness() -> None:
    s = windows.new_state()
    closed: list[windows.ClosedStep] = []
    for step in range(20):
        for rank in (0, 1, 2):
            if rank == 2 and step >= 3:
                continue  # rank 2 stops after step 2
            closed += windows.add(s, step=step, rank=rank, expected=3, lateness=4)[1]
    assert [c.step for c in closed if not c.missing] == [0, 1, 2]
    stalled = [c for c in closed if c.missing]
    assert [c.step for c in stalled] == list(range(3, 16))  # 19 - 4 = 15: step 15 closed
    assert all(c.timed_out and c.ranks == (0, 1) for c in stalled)
    # a lagging consumer: the same records far apart in processing time change nothing, no
    # clock is read; the rest closes only when told (idle or end of input), incomplete
    rest = windows.flush(s)
    assert [c.step for c in rest] == [16, 17, 18, 19]
    assert all(c.incomplete and c.missing == 0 for c in rest)


def test_a_rank_silent_in_its_partition_is_missing_after_silent_steps() -> None:
    """Ranks 0-2 share partition "0"; rank 2 stops after step 2: with ``silent=3`` step 3
    closes once the partition's median reached step 6, long before the lateness (20)."""
    s = windows.new_state()
    closed: list[windows.ClosedStep] = []
    for step in range(10):
        for rank in (0, 1, 2):
            if rank == 2 and step >= 3:
                continue
            closed += windows.add(s, step=step, rank=rank, expected=3, lateness=20, silent=3)[1]
    stalled = [c for c in closed if c.missing]
    assert [c.step for c in stalled] == list(range(3, 7))  # 9 - 3 = 6: step 6 closed
    assert all(c.timed_out and c.ranks == (0, 1) for c in stalled)
    # it comes back: its records for closed steps are late, the next step waits for it
    assert windows.add(s, step=3, rank=2, expected=3, lateness=20, silent=3) == ("late", [])
    status, now = windows.add(s, step=7, rank=2, expected=3, lateness=20, silent=3)
    assert status == "new" and [(c.step, c.ranks) for c in now] == [(7, (0, 1, 2))]


def test_a_rank_delivered_in_bursts_is_not_silent() -> None:
    """200 ms steps, rank 2's collector delivers 12 steps at a time (its partition peers run
    12 steps, 2.4 s of event time, ahead between bursts): with ``silent_ns`` 10 s nothing
    closes without it; once it really stops, it is missing after 10 s of its peers' time."""
    s = windows.new_state()
    closed: list[windows.ClosedStep] = []
    kw = {"expected": 3, "lateness": 200, "silent": 8, "silent_ns": 10 * 10**9}

    def feed(step: int, rank: int) -> None:
        closed.extend(windows.add(s, step=step, rank=rank, t_ns=step * 200_000_000, **kw)[1])

    for burst in range(0, 48, 12):
        for step in range(burst, burst + 12):
            feed(step, 0)
            feed(step, 1)
        for step in range(burst, burst + 12):
            feed(step, 2)
    assert [c.missing for c in closed] == [0] * 48
    for step in range(48, 120):  # rank 2 stopped after step 47
        feed(step, 0)
        feed(step, 1)
    stalled = [c.step for c in closed if c.missing]
    # step 48 closes once the peers' time passed rank 2's last (step 47) by 10 s: step 97
    assert stalled[0] == 48 and stalled[-1] <= 119 - 8
    assert all(c.ranks == (0, 1) for c in closed if c.missing)


def test_a_lagging_partition_is_not_silent() -> None:
    """A consumer catching up on partition "1" (ranks 2, 3) reads it 10 steps behind
    partition "0" (ranks 0, 1): nobody is silent, nothing closes without a rank."""
    s = windows.new_state()
    closed: list[windows.ClosedStep] = []

    def feed(step: int, rank: int) -> None:
        part = "0" if rank < 2 else "1"
        closed.extend(
            windows.add(s, step=step, rank=rank, expected=4, lateness=20, silent=3, part=part)[1]
        )

    for step in range(12):
        feed(step, 0)
        feed(step, 1)
    for step in range(12):
        feed(step, 2)
        feed(step, 3)
    assert [(c.step, c.missing) for c in closed] == [(k, 0) for k in range(12)]


def test_a_rank_alone_on_its_partition_is_never_silent() -> None:
    """It is its partition's watermark: its peers' steps close only incomplete (as without
    the rule), never naming it missing on a guess."""
    s = windows.new_state()
    closed: list[windows.ClosedStep] = []
    for step in range(12):
        for rank in (0, 1, 2):
            if rank == 2 and step >= 3:
                continue
            part = "1" if rank == 2 else "0"
            closed += windows.add(
                s, step=step, rank=rank, expected=3, lateness=6, silent=2, part=part
            )[1]
    assert [c.step for c in closed] == [0, 1, 2]
    assert all(c.incomplete for c in windows.flush(s))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=6, max_size=6),  # the step each rank stops at
    st.lists(st.integers(0, 12), min_size=3, max_size=3),  # each partition's read delay
    st.randoms(use_true_random=False),
)
def test_silent_ranks_do_not_depend_on_partition_skew(
    stops: list[int], delays: list[int], rnd: random.Random
) -> None:
    """Six ranks on three partitions (two each), each partition written in step order (its
    two ranks' records interleaved at random within a step) and read with its own delay
    (a consumer catching up, a restart): the same steps close with the same ranks as when
    every partition is read at once."""
    part_of = {r: str(r // 2) for r in range(6)}

    def partition(p: str) -> list[tuple[int, int]]:
        recs = [(k, r) for r in range(6) if part_of[r] == p for k in range(stops[r])]
        recs.sort(key=lambda x: (x[0], rnd.random()))
        return recs

    def run(order: list[tuple[int, int]]) -> list[tuple[int, tuple[int, ...], int]]:
        s = windows.new_state()
        closed: list[windows.ClosedStep] = []
        for step, rank in order:
            closed += windows.add(
                s, step=step, rank=rank, expected=6, lateness=16, silent=3, part=part_of[rank]
            )[1]
        closed += windows.flush(s)
        return sorted((c.step, c.ranks, c.missing) for c in closed)

    parts = {p: partition(p) for p in "012"}
    at_once = sorted(
        (rec for recs in parts.values() for rec in recs), key=lambda x: (x[0], x[1] // 2)
    )
    # partition p is read `delays[p]` steps late: its record of step k comes after step
    # k + delay of the others
    skewed = sorted(
        (rec for p, recs in parts.items() for rec in recs),
        key=lambda x: (x[0] + delays[int(part_of[x[1]])], x[1] // 2),
    )
    assert run(skewed) == run(at_once)


def test_memory_bound_closes_the_oldest_incomplete() -> None:
    s = windows.new_state()
    closed: list[windows.ClosedStep] = []
    for step in range(6):
        closed += windows.add(s, step=step, rank=0, expected=2, max_pending=4, lateness=99)[1]
    assert [(c.step, c.incomplete, c.missing) for c in closed] == [(0, True, 0), (1, True, 0)]


def _run(order: list[tuple[int, int]], lateness: int) -> list[tuple[int, tuple[int, ...], int]]:
    s = windows.new_state()
    closed: list[windows.ClosedStep] = []
    for step, rank in order:
        closed += windows.add(s, step=step, rank=rank, expected=5, lateness=lateness)[1]
    closed += windows.flush(s)
    return sorted((c.step, c.ranks, c.missing) for c in closed)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 30), min_size=5, max_size=5),  # the step each rank stops at
    st.sets(st.tuples(st.integers(0, 4), st.integers(0, 30)), max_size=10),  # dropped records
    st.randoms(use_true_random=False),
)
def test_any_arrival_order_within_the_lateness_gives_the_same_windows(
    stops: list[int], dropped: set[tuple[int, int]], rnd: random.Random
) -> None:
    """Ranks' streams interleaved at random, each in its own order, none more than
    ``lateness - 1`` steps behind the peers' watermark: the same steps close with the same
    ranks as in step order."""
    lateness = 6
    streams = {r: [(k, r) for k in range(stops[r]) if (r, k) not in dropped] for r in range(5)}
    in_order = sorted((rec for recs in streams.values() for rec in recs), key=lambda x: x)
    pos = dict.fromkeys(streams, 0)
    order: list[tuple[int, int]] = []
    while any(pos[r] < len(streams[r]) for r in streams):
        live = [r for r in streams if pos[r] < len(streams[r])]
        r = rnd.choice(live)
        step = streams[r][pos[r]][0]
        slowest = min(streams[q][pos[q]][0] for q in live)
        if step - slowest >= lateness - 1 and len(live) > 1:
            continue  # keep the skew within the lateness
        order.append(streams[r][pos[r]])
        pos[r] += 1
    assert _run(order, lateness) == _run(in_order, lateness)


def test_a_record_beyond_the_lateness_is_late_and_moves_no_window() -> None:
    """Rank 2 reports step 0, then falls 5 steps behind with lateness 4: step 1 closes
    without it; its record for it is ``late`` (the driver sends it to the DLQ) and changes
    no closed step, and a replay of a record already taken is a ``dup``, not late."""
    s = windows.new_state()
    closed = windows.add(s, step=0, rank=2, expected=3, lateness=4)[1]
    for step in range(6):
        for rank in (0, 1):
            closed += windows.add(s, step=step, rank=rank, expected=3, lateness=4)[1]
    assert [(c.step, c.ranks, c.missing) for c in closed] == [(0, (0, 1, 2), 0), (1, (0, 1), 1)]
    assert windows.add(s, step=1, rank=2, expected=3, lateness=4) == ("late", [])
    assert windows.add(s, step=0, rank=0, expected=3, lateness=4) == ("dup", [])
    status, now_closed = windows.add(s, step=2, rank=2, expected=3, lateness=4)
    assert status == "new" and [(c.step, c.ranks) for c in now_closed] == [(2, (0, 1, 2))]
    assert s["late"] == 1 and sorted(s["closed"]) == [0, 1, 2]


def test_a_source_never_seen_waits_eight_times_the_lateness() -> None:
    """A consumer that has not fetched a partition yet: its ranks have not reported at all,
    and the others' steps wait 8 x lateness before naming them missing."""
    s = windows.new_state()
    closed: list[windows.ClosedStep] = []
    for step in range(12):
        closed += windows.add(s, step=step, rank=0, expected=2, lateness=1)[1]
    assert [c.step for c in closed] == [0, 1, 2, 3]  # 8 newer steps passed each
    assert all(c.timed_out and c.missing == 1 for c in closed)


def test_the_steps_role_sends_late_records_to_the_dlq_with_the_reason() -> None:
    import asyncio

    from argus.detectors.config import DetectorsConfig
    from argus.sim.simulate import SimRun, simulate
    from argus.streams.memory import _MemoryCtx
    from argus.streams.pipeline_config import PipelineConfig
    from argus.streams.roles.steps import JobSteps, StepBlocks, route_step

    run = SimRun.make("healthy", ranks=16, steps=12, seed=1, kernels=False)
    recs = [r for t, _k, r in simulate(run) if t == "raw.steps"]
    ctx = _MemoryCtx(DetectorsConfig(), PipelineConfig(lateness_steps=3))
    blocks = StepBlocks(ctx, JobSteps(ctx).levels)
    # rank 3's records after its first come after all the rest
    late = [r for r in recs if r["rank"] == 3 and r["step"] > 0]
    on_time = [r for r in recs if r not in late]

    async def go() -> None:
        st: dict[str, object] = {}
        for rec in [*on_time, *late]:
            for key, item in route_step(rec, 256):
                await blocks.add(key, st.setdefault(key, blocks.new(key)), item, 0.0)

    asyncio.run(go())
    # steps 1-8 closed without it (the watermark, step 11, passed them by 3 steps)
    assert len(ctx.rejected) == 8
    assert all(r.startswith("late: step ") and "rank 3" in r for r in ctx.rejected)
