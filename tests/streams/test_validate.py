"""Input validation of the stream agents: good records pass, each bad kind has its reason."""

from __future__ import annotations

import copy
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from argus.schemas import Codec
from argus.schemas.arrays import pack
from argus.sim.simulate import SimRun, simulate
from argus.streams.memory import replay_stream
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.validate import (
    Checker,
    InputError,
    Limits,
    Mark,
    step_skew,
    time_skew,
    validate_kernel_batch,
    validate_kernel_summary,
    validate_stack_batch,
    validate_step,
)
from argus.summaries.summary_record import BatchError, summarize_batch, summary_columns

NOW = 1_800_000_000 * 10**9  # the receiving wall clock of these tests, ns
SEC = 10**9
LIM = Limits()


@pytest.fixture(scope="module")
def sim() -> dict[str, list[dict[str, Any]]]:
    run = SimRun.make("compute-straggler", ranks=32, steps=12, seed=1)
    out: dict[str, list[dict[str, Any]]] = {"raw.steps": [], "raw.kernels": []}
    for suffix, _key, rec in simulate(run):
        out[suffix].append(rec)
    return out


def _reason(fn: Any, *args: Any) -> str:
    with pytest.raises((InputError, BatchError)) as ei:
        fn(*args)
    return str(getattr(ei.value, "reason", ""))


def stack(**kw: Any) -> dict[str, Any]:
    rec = {
        "job": "j",
        "rank": 3,
        "pid": 9,
        "host": "h",
        "window_start_ns": NOW - 10 * SEC,
        "window_end_ns": NOW,
        "sample_rate_hz": 100.0,
        "samples": 5,
        "errors": 0,
        "stacks": [{"stack": "main;f", "count": 5}],
    }
    return {**rec, **kw}


def test_simulated_records_of_every_kind_pass(sim: dict[str, list[dict[str, Any]]]) -> None:
    """The simulator's fixed 2026 epoch is far behind the wall clock: never judged by it."""
    c = Checker(Limits(), clock_ns=time.time_ns)
    for rec in sim["raw.steps"]:
        c.step(rec)
    summaries = []
    for b in sim["raw.kernels"]:
        assert c.kernel_batch(b) > 0
        summaries.append(summarize_batch(b))
    codec = Codec()
    for s in summaries:
        c.kernel_summary(s, codec.encode("kernel_summary", s))
    found = replay_stream(sim["raw.steps"], kernel_summaries=summaries).anomalies
    assert found, "the straggler scenario yields anomalies"
    for a in found:
        c.anomaly(a, codec.encode("anomaly", a))
    now = time.time_ns()
    c.stack_batch(stack(window_start_ns=now - 10 * SEC, window_end_ns=now))


def test_step_reasons(sim: dict[str, list[dict[str, Any]]]) -> None:
    good = sim["raw.steps"][0]

    def bad(**kw: Any) -> dict[str, Any]:
        rec = copy.deepcopy(good)
        rec.update(kw)
        return rec

    world = 32
    assert _reason(validate_step, bad(rank=world), LIM) == "rank-out-of-range"
    assert _reason(validate_step, bad(rank=-1), LIM) == "rank-out-of-range"
    co = {**good["coords"], "dp_size": 0}
    assert _reason(validate_step, bad(coords=co), LIM) == "bad-coords"
    co = {**good["coords"], "tp_rank": 2}  # tp_size is 2
    assert _reason(validate_step, bad(coords=co), LIM) == "bad-coords"
    co = {**good["coords"], "dp_size": 2**30}
    assert _reason(validate_step, bad(coords=co), LIM) == "bad-coords"
    assert _reason(validate_step, bad(end_ns=good["start_ns"]), LIM) == "bad-duration"
    assert _reason(validate_step, bad(end_ns=good["start_ns"] - 1), LIM) == "bad-duration"
    assert _reason(validate_step, bad(end_ns=good["start_ns"] + 2 * 86400 * SEC), LIM) == (
        "bad-duration"
    )
    assert _reason(validate_step, bad(step=-5), LIM) == "bad-field"
    assert _reason(validate_step, bad(job=""), LIM) == "bad-field"
    for d in (-1, 2 * 3600 * SEC):
        phases = [{**good["phases"][0], "duration_ns": d}]
        assert _reason(validate_step, bad(phases=phases), LIM) == "bad-duration"
    many = [good["phases"][0]] * (LIM.max_phases + 1)
    assert _reason(validate_step, bad(phases=many), LIM) == "too-large"
    raw = Codec().encode("step_record", good)
    assert _reason(validate_step, good, Limits(max_routed_bytes=len(raw) - 1), raw) == "too-large"
    validate_step(bad(phases=[]), LIM)  # a step without phase hooks is fine (L1 uses it)


def _batch(n: int, dur: np.ndarray | None = None) -> dict[str, Any]:
    d = np.full(n, 50_000, np.int64) if dur is None else dur
    return {
        "job": "j",
        "rank": 0,
        "window_id": 1,
        "window_start_ns": NOW - SEC,
        "window_end_ns": NOW,
        "host": "",
        "coords": {},
        "source": "simulator",
        "names": ["k0", "k1"],
        "name_idx": pack(np.arange(n) % 2, "uint32"),
        "stream": pack(np.zeros(n), "uint32"),
        "start_ns": pack(np.arange(n), "int64"),
        "duration_ns": pack(d, "int64"),
        "streams": [],
        "dropped": 0,
    }


def test_kernel_batch_reasons() -> None:
    assert _reason(validate_kernel_batch, _batch(0), LIM) == "empty"
    assert _reason(validate_kernel_batch, {**_batch(4), "rank": 1}, LIM) == "rank-out-of-range"
    huge = _batch(4, np.array([1, 2, 3600 * SEC + 1, 4]))
    assert _reason(validate_kernel_batch, huge, LIM) == "bad-duration"
    assert _reason(validate_kernel_batch, _batch(3, np.array([0, -1, 0])), LIM) == "bad-duration"
    short = {**_batch(4), "stream": pack(np.zeros(3), "uint32")}
    assert _reason(validate_kernel_batch, short, LIM) == "bad-column"
    odd = {**_batch(4), "name_idx": b"\x00" * 15}
    assert _reason(validate_kernel_batch, odd, LIM) == "bad-column"
    assert _reason(validate_kernel_batch, _batch(11), Limits(max_batch_events=10)) == "too-large"
    # single invalid events are the compressor's to count (summary.rejected), not errors
    assert validate_kernel_batch(_batch(3, np.array([0, -1, 7])), LIM) == 3


def test_a_million_event_batch_is_processed_quickly() -> None:
    """1 M events are under the cap: validated and compressed without a stall."""
    rng = np.random.default_rng(0)
    b = _batch(1_000_000, rng.lognormal(10, 0.3, 1_000_000).astype(np.int64))
    t0 = time.perf_counter()
    assert Checker(LIM, clock_ns=lambda: NOW).kernel_batch(b) == 1_000_000
    rec = summarize_batch(b)
    took = time.perf_counter() - t0
    assert rec["n_events"] == 1_000_000
    assert took < 10.0, took  # ~0.3 s alone on the 2-core VM; generous for a loaded machine


def test_kernel_summary_reasons(sim: dict[str, list[dict[str, Any]]]) -> None:
    s = summarize_batch(sim["raw.kernels"][0])
    validate_kernel_summary(s, LIM)
    q = np.frombuffer(s["cluster_quantiles_ns"], "<f4").copy()
    q[0] = np.nan
    assert _reason(
        validate_kernel_summary, {**s, "cluster_quantiles_ns": pack(q, "float32")}, LIM
    ) == ("bad-duration")
    q[0] = -5.0
    assert _reason(
        validate_kernel_summary, {**s, "cluster_quantiles_ns": pack(q, "float32")}, LIM
    ) == ("bad-duration")
    assert _reason(validate_kernel_summary, {**s, "quantile_levels": [0.5, 0.1]}, LIM) == (
        "bad-field"
    )
    assert _reason(validate_kernel_summary, {**s, "cluster_count": b""}, LIM) == "bad-summary"
    empty = summarize_batch(_batch(3, np.array([0, 0, 0])))
    assert _reason(validate_kernel_summary, empty, LIM) == "empty"
    # log16: a median in range whose offset decodes past the limit, checked undecoded
    assert s["cluster_log_offsets"]
    off = np.frombuffer(s["cluster_log_offsets"], "<i2").copy()
    med = np.frombuffer(s["cluster_quantiles_ns"], "<f4").copy()
    med[0] = LIM.max_duration_s * 1e9 / 2
    off[0] = 2048  # x e: beyond the limit
    over = {**s, "cluster_quantiles_ns": pack(med, "float32")}
    validate_kernel_summary(over, LIM)  # the offset kept: in range
    over["cluster_log_offsets"] = pack(off, "int16")
    low = {**over, "cluster_log_offsets": pack(np.full_like(off, -100), "int16")}
    med[0] = LIM.max_duration_s * 1e9 * 1.01  # the median itself beyond, every offset < 0
    low["cluster_quantiles_ns"] = pack(med, "float32")
    assert _reason(validate_kernel_summary, low, LIM) == "bad-duration"
    q = summary_columns(over)[4]  # decoded, as the check did before it read them undecoded
    with pytest.raises(InputError) as ei:
        validate_kernel_summary(over, LIM)
    assert f"span [{float(q.min()):.3g}, {float(q.max()):.3g}] ns" in str(ei.value)
    assert _reason(validate_kernel_summary, {**s, "rank": 99}, LIM) == "rank-out-of-range"


def test_stack_batch_reasons() -> None:
    validate_stack_batch(stack(stacks=[], samples=0, errors=3), LIM)  # a failed window is news
    assert _reason(validate_stack_batch, stack(rank=-1), LIM) == "rank-out-of-range"
    assert _reason(validate_stack_batch, stack(sample_rate_hz=float("nan")), LIM) == "bad-field"
    assert _reason(validate_stack_batch, stack(samples=-1), LIM) == "bad-field"
    assert _reason(validate_stack_batch, stack(stacks=[{"stack": "a", "count": 0}]), LIM) == (
        "bad-field"
    )
    assert _reason(validate_stack_batch, stack(window_end_ns=NOW - 11 * SEC), LIM) == (
        "bad-duration"
    )
    lots = [{"stack": f"s{i}", "count": 1} for i in range(11)]
    assert _reason(validate_stack_batch, stack(stacks=lots), Limits(max_stacks=10)) == "too-large"


# -- skew checks: per source, against the broker timestamp ----------------------------------------
DAY = 86400 * SEC
TOL = Limits().max_skew_s * SEC
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def srec(rank: int, step: int, start: int, end: int, world: int = 4, job: str = "j") -> dict:
    """A step record of ``rank`` in a dp world of ``world``."""
    return {
        "job": job,
        "rank": rank,
        "step": step,
        "start_ns": start,
        "end_ns": end,
        "host": "h",
        "coords": {"dp_size": world, "dp_rank": rank},
        "phases": [{"name": "fwd", "stream_kind": "compute", "start_ns": start, "duration_ns": 1}],
        "collector": {},
    }


Stream = list[tuple[dict[str, Any], float]]  # (step record, broker timestamp s)


@st.composite
def jobs(draw: st.DrawFn, *, live: bool, min_age: int = 0) -> Stream:
    """A job's step records in publication order (step-major, as collectors and replays send
    them), each with its broker timestamp.

    ``live``: published as it runs, 0-35 s after each step ends (the collectors' buffering),
    with pauses of any length (a checkpoint, a stall, a preemption). Otherwise a replay or
    backfill: event times from an old epoch (``min_age`` to two years back), published at any speed
    from infinitely fast to twice slower than real time, pauses shorter than ``max_skew_s``.
    """
    world = draw(st.integers(1, 4))
    n = draw(st.integers(3, 40))
    step_s = draw(st.floats(0.002, 120.0))
    age = 0 if live else draw(st.integers(min_age, 2 * 365 * DAY))
    speed = 1.0 if live else draw(st.sampled_from([0.0, 0.01, 0.5, 1.0, 2.0]))
    longest = 3 * DAY if live else int(TOL) // 2
    pauses = [draw(st.sampled_from([0, 0, 0, 1])) * draw(st.integers(0, longest)) for _ in range(n)]
    durs = [max(int(step_s * SEC * draw(st.floats(0.5, 2.0))), 1000) for _ in range(n)]
    u = float(NOW - 2 * DAY + draw(st.integers(0, DAY)))
    t = int(u) - age - (sum(pauses) + sum(durs) if not live else 0)  # a replay: sent after
    first = draw(st.integers(0, 10**6))
    out: Stream = []
    for k in range(n):
        t += pauses[k] + durs[k]
        u += (pauses[k] + durs[k]) * speed
        for r in range(world):
            end = t - draw(st.integers(0, durs[k] // 4))
            lag = draw(st.floats(0, 35.0)) * SEC if live else draw(st.floats(0, 1.0)) * SEC
            out.append((srec(r, first + k, end - durs[k] // 2, end, world), (u + lag) / SEC))
    return out


def _run(c: Checker, stream: Stream) -> list[str | None]:
    """Feed ``stream``, the receiving clock 1 s after each broker timestamp; the reason of
    each record (None: accepted)."""
    got: list[str | None] = []
    for rec, ts in stream:
        c.clock_ns = lambda ts=ts: int(ts * SEC) + SEC  # type: ignore[misc]
        try:
            c.step(rec, broker_s=ts)
            got.append(None)
        except InputError as e:
            got.append(str(e))
    return got


def _checker() -> Checker:
    return Checker(Limits(), clock_ns=lambda: NOW)


@FAST
@given(jobs(live=True))
def test_live_jobs_pass(stream: Stream) -> None:
    assert _run(_checker(), stream) == [None] * len(stream)


@FAST
@given(jobs(live=False))
def test_replays_and_backfills_pass(stream: Stream) -> None:
    assert _run(_checker(), stream) == [None] * len(stream)


def _restamp(rec: dict[str, Any], end: int) -> dict[str, Any]:
    """``rec`` moved in event time to end at ``end`` (a valid record: spans kept)."""
    d = end - rec["end_ns"]
    phases = [{**p, "start_ns": p["start_ns"] + d} for p in rec["phases"]]
    return {**rec, "start_ns": rec["start_ns"] + d, "end_ns": end, "phases": phases}


@FAST
@given(jobs(live=False, min_age=2 * DAY), st.data())
def test_one_wall_clock_stamped_record_is_the_one_rejected(stream: Stream, data: Any) -> None:
    """The poison case: one record of a replayed job re-stamped to the wall clock (a copy of
    a real one, sent among them) is rejected naming its rank and both times; every other
    record is judged exactly as without it. (A job's first records are judged by nothing:
    :func:`test_a_poisoned_first_record_costs_no_good_record`.)"""
    assume(min(ts * SEC - rec["end_ns"] for rec, ts in stream) > 3 * TOL)  # older than 3 h
    world = stream[0][0]["coords"]["dp_size"]
    i = data.draw(st.integers(2 * world, len(stream)), label="after")  # not the job's first
    orig, ts = stream[data.draw(st.integers(0, i - 1), label="copy of")]
    u = round(ts * 1000) * 1_000_000  # the broker timestamp (ms), ns
    poison = _restamp(orig, u - SEC)  # stamped with the wall clock as it was published
    got = _run(_checker(), [*stream[:i], (poison, ts), *stream[i:]])
    assert got[:i] + got[i + 1 :] == [None] * len(stream)
    why = got[i]
    assert why is not None and why.startswith("time-skew:"), why
    assert f"rank {poison['rank']}" in why, why
    for ns in (poison["end_ns"], u):  # the event time and the broker time
        iso = datetime.fromtimestamp(ns / SEC, UTC).isoformat(timespec="milliseconds")
        assert iso in why, (iso, why)


@FAST
@given(jobs(live=False), jobs(live=True), st.data())
def test_a_step_jump_is_the_one_rejected(old: Stream, live: Stream, data: Any) -> None:
    """Issue 19: a step +900,000 ahead (its times those of a real step) is rejected with its
    reason, in a replay and a live job; the records after it are all accepted."""
    for stream in (old, live):
        world = stream[0][0]["coords"]["dp_size"]
        i = data.draw(st.integers(2 * world, len(stream)), label="at")  # not the job's first
        rec, ts = stream[i - 1]
        bad = {**rec, "step": rec["step"] + 900_000}
        got = _run(_checker(), [*stream[:i], (bad, ts), *stream[i:]])
        assert got[:i] + got[i + 1 :] == [None] * len(stream)
        assert got[i] is not None and got[i].startswith("step-skew:"), got[i]
        assert f"rank {rec['rank']}" in got[i] and f"step {bad['step']}" in got[i]


def test_a_rank_catching_up_and_a_restart_from_a_checkpoint_pass() -> None:
    c = _checker()
    t = NOW - DAY
    for s in range(10):  # ranks 0 and 1 in step
        for r in (0, 1):
            c.step(srec(r, s, t + s * SEC, t + s * SEC + SEC // 2), broker_s=(t + s * SEC) / SEC)
    # rank 0 goes on alone for 5,000 steps (rank 1 silent), then rank 1 is back: it jumps
    # 5,000 steps ahead of its own last record, not of its job
    for s in range(10, 5010):
        c.step(srec(0, s, t + s * SEC, t + s * SEC + SEC // 2), broker_s=(t + s * SEC) / SEC)
    s = 5010
    c.step(srec(1, s, t + s * SEC, t + s * SEC + SEC // 2), broker_s=(t + s * SEC) / SEC)
    # the job restarts from its checkpoint at step 4,000 an hour later: steps go back
    t2 = t + 5011 * SEC + 3600 * SEC
    for s in range(4000, 4005):
        for r in (0, 1):
            e = t2 + (s - 4000) * SEC
            c.step(srec(r, s, e - SEC // 2, e), broker_s=e / SEC)


def test_kernel_windows_of_a_backed_off_rank_pass() -> None:
    """Kernel windows every 50 steps, then 100, ... 51,200 (the collectors' deepest back-off):
    each batch is far more than ``max_step_jump`` ahead of the last, in event time as well;
    live and replayed at any speed."""
    for speed in (1.0, 0.0):
        c = _checker()
        t, u, w = NOW - 400 * DAY, float(NOW - DAY), 0
        for level in range(11):
            for _ in range(3):
                b = {
                    **_batch(4),
                    "window_id": w,
                    "window_start_ns": t,
                    "window_end_ns": t + SEC // 2,
                }
                c.kernel_batch(b, broker_s=u / SEC)
                period = 50 * 2**level
                w += period
                t += period * SEC  # 1 s steps
                u += period * SEC * speed


def test_a_pause_longer_than_the_tolerance_costs_two_records_per_rank() -> None:
    """A replayed job that was preempted for two days: the new offset of each rank is taken
    at its third record; the two before it are rejected with their reason."""
    c = _checker()
    t, u = NOW - 300 * DAY, NOW - DAY
    got: list[tuple[int, int, str | None]] = []
    for s in range(20):
        if s == 10:
            t += 2 * DAY
        for r in range(4):
            rec = srec(r, s, t + s * SEC, t + s * SEC + SEC // 2)
            try:
                c.step(rec, broker_s=(u + s * SEC // 100) / SEC)
                got.append((r, s, None))
            except InputError as e:
                got.append((r, s, e.reason))
    bad = [(r, s, why) for r, s, why in got if why]
    assert bad == [(r, s, "time-skew") for s in (10, 11) for r in range(4)], bad


def test_a_late_rank_is_judged_by_its_job() -> None:
    c = _checker()
    t, u = NOW - 100 * DAY, NOW - DAY
    for s in range(5):
        for r in (0, 1):
            c.step(srec(r, s, t + s * SEC, t + s * SEC + 1), broker_s=(u + s) / SEC)
    poison = srec(2, 5, NOW - 2 * SEC, NOW - SEC)  # rank 2's first record, at the wall clock
    assert _reason(lambda: c.step(poison, broker_s=(u + 5) / SEC)) == "time-skew"
    jump = {**srec(3, 5, t + 5 * SEC, t + 5 * SEC + 1), "step": 900_005}
    assert _reason(lambda: c.step(jump, broker_s=(u + 5) / SEC)) == "step-skew"
    c.step(srec(3, 5, t + 5 * SEC, t + 5 * SEC + 1), broker_s=(u + 5) / SEC)  # a good one
    assert c.clocks.job_reference("step_record", "j").step == 5  # type: ignore[union-attr]


def test_a_poisoned_first_record_costs_no_good_record() -> None:
    """Nothing judges a job's first record; the second replaces it, the third confirms."""
    c = _checker()
    t, u = NOW - 100 * DAY, NOW - DAY
    c.step(srec(0, 0, NOW - 2 * SEC, NOW - SEC, world=1), broker_s=u / SEC)
    for s in range(1, 10):
        c.step(srec(0, s, t + s * SEC, t + s * SEC + 1, world=1), broker_s=(u + s) / SEC)


def test_a_rejected_record_moves_no_reference() -> None:
    c = _checker()
    t, u = NOW - 100 * DAY, NOW - DAY
    for s in range(3):
        c.step(srec(0, s, t + s * SEC, t + s * SEC + 1, world=1), broker_s=(u + s) / SEC)
    ref = c.clocks.reference("step_record", "j", "rank 0")
    for bad in (  # the wall clock, the future, a stale record, a step jump, twice each
        srec(0, 3, NOW - 2 * SEC, NOW - SEC, world=1),
        srec(0, 3, NOW + 2 * 3600 * SEC, NOW + 2 * 3600 * SEC + 1, world=1),
        srec(0, 3, t - DAY, t - DAY + 1, world=1),
        srec(0, 10**6, t + 3 * SEC, t + 3 * SEC + 1, world=1),
    ):
        for _ in range(2):
            with pytest.raises(InputError):
                c.step(bad, broker_s=(u + 3) / SEC)
            assert c.clocks.reference("step_record", "j", "rank 0") == ref
        c.step(srec(0, 3, t + 3 * SEC, t + 3 * SEC + 1, world=1), broker_s=(u + 3) / SEC)
        ref = c.clocks.reference("step_record", "j", "rank 0")


def test_summaries_and_anomalies_are_judged_by_step_not_by_broker_time(
    sim: dict[str, list[dict[str, Any]]],
) -> None:
    """Their broker time is a worker's lag: an L3 worker down for a day still gets its
    summaries and findings through; a window id 900,000 ahead does not."""
    c = Checker(Limits(), clock_ns=time.time_ns)
    s = [summarize_batch(b) for b in sim["raw.kernels"] if b["rank"] == 0]
    c.kernel_summary(s[0])
    later = {**s[1], "window_start_ns": s[1]["window_start_ns"] + DAY}
    c.kernel_summary({**later, "window_end_ns": s[1]["window_end_ns"] + DAY})
    jump = {**s[1], "window_id": s[1]["window_id"] + 900_000}
    assert _reason(c.kernel_summary, jump) == "step-skew"


def test_stack_batches_are_judged_per_rank() -> None:
    c = Checker(Limits(), clock_ns=lambda: NOW)
    old = NOW - 400 * DAY  # a recorded run, a year ago, replayed fast: fine
    for k in range(5):
        w = old + k * 10 * SEC
        c.stack_batch(stack(window_start_ns=w - 10 * SEC, window_end_ns=w), broker_s=NOW / SEC)
    w = NOW - SEC  # one window stamped with the wall clock among them
    bad = stack(window_start_ns=w - 10 * SEC, window_end_ns=w)
    assert _reason(lambda: c.stack_batch(bad, broker_s=NOW / SEC)) == "time-skew"
    # another rank of the job has no record yet: judged by its job's; another job: accepted
    assert _reason(lambda: c.stack_batch({**bad, "rank": 4}, broker_s=NOW / SEC)) == "time-skew"
    c.stack_batch({**bad, "job": "other"}, broker_s=NOW / SEC)
    # two hours ahead of the wall clock: the future, whatever the source
    t = NOW + 2 * 3600 * SEC
    assert _reason(c.stack_batch, stack(window_start_ns=t - SEC, window_end_ns=t)) == "time-skew"


def test_skew_checks_can_be_turned_off() -> None:
    c = Checker(Limits(max_skew_s=0, max_step_jump=0), clock_ns=lambda: NOW)
    t = NOW - 100 * DAY
    c.step(srec(0, 0, t, t + 1, world=1), broker_s=NOW / SEC)
    c.step(srec(0, 1, t + SEC, t + SEC + 1, world=1), broker_s=NOW / SEC)
    c.step(srec(0, 2, NOW - SEC, NOW, world=1), broker_s=NOW / SEC)  # re-drive old DLQ records
    c.step(srec(0, 10**12, t, t + 1, world=1), broker_s=NOW / SEC)


def test_pure_checks_name_the_times() -> None:
    ref = Mark(10, NOW - DAY, NOW, pace_ns=float(SEC))
    assert time_skew(Mark(11, NOW - DAY + 2 * SEC, NOW + SEC, 1.0), ref, 3600) is None
    why = time_skew(Mark(11, NOW, NOW + SEC, 1.0), ref, 3600)
    assert why is not None and "86399 s further ahead of" in why and "at step 10" in why
    why = time_skew(Mark(11, NOW - 3 * DAY, NOW + SEC, 1.0), ref, 3600)
    assert why is not None and "behind" in why
    assert step_skew(Mark(1010, NOW - DAY, 0, 1.0), ref, 1000) is None
    assert step_skew(Mark(1011, NOW - DAY, 0, 1.0), ref, 1000) is not None
    assert step_skew(Mark(3010, NOW - DAY + 2 * SEC, 0, 1.0), ref, 1000) is None  # 1,000/s
    assert step_skew(Mark(-5, NOW, 0, 1.0), ref, 1000) is None  # behind: a restart


def test_limits_come_from_the_streams_section() -> None:
    """One definition: the [streams] section inherits Limits' fields and defaults."""
    assert (
        isinstance(PipelineConfig(), Limits) and Limits.from_pipeline(PipelineConfig()) == Limits()
    )
    pcfg = PipelineConfig.from_mapping({"max_batch_events": "5", "max_skew_s": "0"})
    lim = Limits.from_pipeline(pcfg)
    assert lim.max_batch_events == 5 and lim.max_skew_s == 0.0
    assert lim.max_step_jump == Limits().max_step_jump == 1000
