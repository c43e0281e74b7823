"""Input validation of the stream agents: good records pass, each bad kind has its reason."""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np
import pytest

from argus.schemas import Codec
from argus.schemas.arrays import pack
from argus.sim.simulate import SimRun, simulate
from argus.streams.offline import replay_stream
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.summary_record import BatchError, summarize_batch
from argus.streams.validate import (
    Checker,
    InputError,
    Limits,
    validate_kernel_batch,
    validate_kernel_summary,
    validate_stack_batch,
    validate_step,
)

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


def test_event_time_is_judged_against_the_job_not_the_wall_clock() -> None:
    c = Checker(Limits(max_past_s=3600, max_step_jump=100), clock_ns=lambda: NOW)
    old = NOW - 400 * 86400 * SEC  # a recorded run, a year ago: fine
    c.stack_batch(stack(window_start_ns=old - SEC, window_end_ns=old))
    c.stack_batch(stack(window_start_ns=old, window_end_ns=old + SEC))
    # two hours behind the job's newest record: too far in the past
    t = old - 2 * 3600 * SEC
    assert _reason(c.stack_batch, stack(window_start_ns=t - SEC, window_end_ns=t)) == "time-skew"
    # another job has its own frontier
    c.stack_batch(stack(job="other", window_start_ns=t - SEC, window_end_ns=t))
    # two hours ahead of the wall clock: the future
    t = NOW + 2 * 3600 * SEC
    assert _reason(c.stack_batch, stack(window_start_ns=t - SEC, window_end_ns=t)) == "time-skew"
    # a rejected record does not move the frontier
    assert c.frontier.newest("stacks", "j") == (0, old + SEC)


def test_steps_far_ahead_of_the_job_are_rejected(sim: dict[str, list[dict[str, Any]]]) -> None:
    c = Checker(Limits(max_step_jump=100), clock_ns=time.time_ns)
    first = sim["raw.steps"][0]
    c.step(first)
    far = {**first, "step": first["step"] + 101}
    assert _reason(c.step, far) == "step-skew"
    c.step({**first, "step": first["step"] + 100})
    off = Checker(Limits(max_step_jump=0, max_past_s=0), clock_ns=time.time_ns)
    off.step(first)
    off.step(far)  # 0 disables
    off.step({**first, "start_ns": 1, "end_ns": 2})


def test_limits_come_from_the_streams_section() -> None:
    pcfg = PipelineConfig.from_mapping({"max_batch_events": "5", "max_past_s": "0"})
    lim = Limits.from_pipeline(pcfg)
    assert lim.max_batch_events == 5 and lim.max_past_s == 0.0
    assert lim.max_step_jump == Limits().max_step_jump
