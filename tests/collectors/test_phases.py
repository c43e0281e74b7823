"""Phase timing: the pure fold, and known sleeps timed right end to end on the real broker."""

from __future__ import annotations

import time

import pytest

import argus.collectors as ac
from argus.collectors.phases import aggregate_phases
from argus.config import Settings
from argus.topics import topic_name
from tests.collectors.helpers import consume

MS = 1_000_000


def test_aggregate_sum_and_span_modes() -> None:
    items = [
        ("mlp", "compute", "sum", 100, 150),
        ("attn", "compute", "sum", 0, 90),
        ("mlp", "compute", "sum", 300, 320),
        ("ar", "comm", "span", 200, 260),
        ("ar", "comm", "span", 210, 400),
        ("bad", "host", "sum", 50, 40),
    ]
    out = aggregate_phases(items)
    assert out == [
        ("attn", "compute", 0, 90),
        ("bad", "host", 50, 0),
        ("mlp", "compute", 100, 70),
        ("ar", "comm", 200, 200),
    ]


def test_aggregate_empty() -> None:
    assert aggregate_phases([]) == []


@ac.phase("decorated", stream_kind="host")
def _sleep_20ms() -> None:
    time.sleep(0.02)


@pytest.mark.kafka
def test_known_sleeps_are_timed_within_tolerance(prefixed: Settings) -> None:
    col = ac.start(
        job="phase-test", settings=prefixed, kernels=False, control=False, publish_topology=False
    )
    assert col is not None and col.timer == "cpu"
    for i in range(3):
        with ac.step(i):
            with ac.phase("sleep50"):
                time.sleep(0.05)
            _sleep_20ms()
            _sleep_20ms()  # the same name twice in a step: durations add up
    ac.shutdown()
    recs = consume(prefixed, topic_name("raw.steps", prefixed.topic_prefix), 3)
    assert [r["step"] for _, r in recs] == [0, 1, 2]
    for key, r in recs:
        assert key == b"phase-test/0"
        phases = {p["name"]: p for p in r["phases"]}
        assert set(phases) == {"sleep50", "decorated"}
        s50, dec = phases["sleep50"], phases["decorated"]
        # time.sleep never returns early; allow 25 ms of scheduler lateness on a busy VM
        assert 50 * MS <= s50["duration_ns"] < 75 * MS
        assert 40 * MS <= dec["duration_ns"] < 65 * MS
        assert dec["stream_kind"] == "host" and s50["timer"] == "cpu"
        step_ns = r["end_ns"] - r["start_ns"]
        assert step_ns >= s50["duration_ns"] + dec["duration_ns"]
        assert r["start_ns"] <= s50["start_ns"] < dec["start_ns"] < r["end_ns"]
        assert abs(r["start_ns"] - time.time_ns()) < 60 * 1_000_000_000  # epoch ns
        c = r["collector"]
        assert 0 < c["overhead_ns"] < 5 * MS
        assert c["dropped_records"] == 0 and c["errors"] == 0 and c["backed_off"] is False


@pytest.mark.skipif(
    not __import__("importlib").util.find_spec("torch")
    or not __import__("torch").cuda.is_available(),
    reason="needs a CUDA device (none on the CPU CI machine); bench/gpu_cupti_check.py too",
)
def test_side_stream_phase_is_timed_on_its_stream(offline: Settings) -> None:
    import torch

    col = ac.start(
        job="cuda-phase", settings=offline, kernels=False, control=False, publish_topology=False
    )
    assert col.timer == "cuda_event"
    got: list[dict] = []
    col.producer.tap = lambda name, rec: got.append(dict(rec)) if name == "step_record" else None
    side = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    ref0, ref1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        ref0.record(side)
        for _ in range(5):
            a @ a
        ref1.record(side)
    torch.cuda.synchronize()
    ref_ns = ref0.elapsed_time(ref1) * 1e6
    with ac.step(0), torch.cuda.stream(side), ac.phase("side", stream=side):
        for _ in range(5):
            a @ a
    torch.cuda.synchronize()
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    side_ns = {p["name"]: p for p in got[0]["phases"]}["side"]["duration_ns"]
    assert abs(side_ns - ref_ns) < 0.3 * ref_ns  # GPU time, not the µs of host enqueue
