"""`argus trace`: the Perfetto file parses back with the expected tracks and slice counts."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from argus.cli import main
from argus.config import Settings
from argus.schemas.arrays import unpack
from argus.sim.simulate import T0_NS, publish, simulate
from argus.trace import TraceError, build_trace, nest

JOB = "sim-compute-straggler"
RANKS = (12, 13)


def _stack_batch(rank: int, w0: int, w1: int) -> dict[str, Any]:
    return {
        "job": JOB, "rank": rank, "pid": 4000 + rank, "host": "node0001",
        "window_start_ns": w0, "window_end_ns": w1, "sample_rate_hz": 100.0,
        "samples": 10, "errors": 0,
        "stacks": [
            {"stack": "MainThread;train (t.py:9);step (t.py:20);allreduce (d.py:5)", "count": 7},
            {"stack": "MainThread;train (t.py:9);load (t.py:30)", "count": 3},
        ],
    }  # fmt: skip


def _parse(data: bytes) -> tuple[dict[int, str], dict[int, tuple[int, str]], list[Any]]:
    t = Trace()
    t.ParseFromString(data)
    procs: dict[int, str] = {}
    tracks: dict[int, tuple[int, str]] = {}
    events = []
    for p in t.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("process"):
                procs[d.uuid] = d.process.process_name
            else:
                tracks[d.uuid] = (d.parent_uuid, d.name)
        elif p.HasField("track_event"):
            assert p.trusted_packet_sequence_id == 1
            events.append(p)
    return procs, tracks, events


def test_nest_keeps_children_and_clips_partial_overlaps() -> None:
    # parent, child inside, grandchild, a slice outlasting its parent (clipped), a sibling
    got = nest([(0, 100), (10, 50), (20, 30), (40, 120), (100, 110), (5, 5)])
    assert got == [(0, 100, 0), (10, 50, 1), (20, 30, 2), (40, 50, 2), (100, 110, 0), (5, 6, 1)]
    assert nest([]) == []


def _kbatch(
    rank: int, source: str, names: list[str], rows: list[tuple[int, int, int, int]]
) -> dict[str, Any]:
    import numpy as np

    idx, st, t0, du = (np.array(c) for c in zip(*rows, strict=True))
    return {
        "job": JOB, "rank": rank, "window_id": 0, "host": "h", "source": source,
        "names": names, "name_idx": idx.astype("<u4").tobytes(),
        "stream": st.astype("<u4").tobytes(), "start_ns": t0.astype("<i8").tobytes(),
        "duration_ns": du.astype("<i8").tobytes(),
        "streams": [{"id": 7, "kind": "compute", "label": ""}] if source != "cpu_ops" else [],
    }  # fmt: skip


def _nesting_ok(events: list[Any], tracks: dict[int, tuple[int, str]]) -> dict[str, int]:
    """Replays the events in file order: every END closes the innermost open slice of its
    track, nothing is left open; returns the deepest nesting per track name."""
    open_: dict[int, int] = defaultdict(int)
    deepest: dict[str, int] = defaultdict(int)
    last = 0
    for p in events:
        assert p.timestamp >= last  # written in time order
        last = p.timestamp
        te = p.track_event
        if te.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_[te.track_uuid] += 1
            name = tracks[te.track_uuid][1]
            deepest[name] = max(deepest[name], open_[te.track_uuid])
        elif te.type == TrackEvent.TYPE_SLICE_END:
            open_[te.track_uuid] -= 1
            assert open_[te.track_uuid] >= 0
    assert all(v == 0 for v in open_.values())
    return deepest


def test_trace_nests_on_one_track_per_stream() -> None:
    """Nested kernels and CPU ops stay on one track (no `#2` lanes), CPU ops are named as
    CPU, the stack slice is named after the training thread's hottest leaf (not argus's
    idle collector thread, which has more samples), culprit ranks are marked, and the
    iteration time is a counter track."""
    t = T0_NS
    step = {"job": JOB, "rank": 5, "step": 0, "host": "h", "start_ns": t, "end_ns": t + 1000,
            "phases": [{"name": "fwd", "stream_kind": "compute", "start_ns": t, "duration_ns": 600},
                       {"name": "attn", "stream_kind": "compute", "start_ns": t + 10, "duration_ns": 200}]}  # fmt: skip
    gpu = _kbatch(5, "cupti", ["outer", "inner"], [(0, 7, t, 500), (1, 7, t + 100, 50)])
    cpu = _kbatch(
        5, "cpu_ops", ["aten::linear", "aten::addmm"], [(0, 4242, t, 300), (1, 4242, t + 5, 100)]
    )
    stk = {"job": JOB, "rank": 5, "window_start_ns": t, "window_end_ns": t + 1000, "samples": 10,
           "stacks": [{"stack": "argus-producer;run (threading.py:1);_run (/x/argus/collectors/producer.py:9)", "count": 8},
                      {"stack": "MainThread;train (t.py:9);matmul (t.py:20)", "count": 2}]}  # fmt: skip
    data, stats = build_trace(
        [step], [gpu, cpu], [stk], culprits=[5], marks=[(t, t + 900, "alert")]
    )
    procs, tracks, events = _parse(data)
    assert (0, "argus alert") in tracks.values()  # top level: the alert's window
    assert list(procs.values()) == ["rank 5 (h) CULPRIT"]
    names = sorted(n for _p, n in tracks.values())
    assert names == ["CPU ops thread 4242", "argus alert", "cuda stream 7 (compute)",
                     "iteration time (ms)", "phases compute", "stacks", "steps"]  # fmt: skip
    assert not any("#" in n for n in names)
    deepest = _nesting_ok(events, tracks)
    assert deepest["cuda stream 7 (compute)"] == 2 and deepest["CPU ops thread 4242"] == 2
    assert deepest["phases compute"] == 2
    events = [
        p for p in events if p.track_event.name != "alert" and p.track_event.track_uuid in tracks
    ]
    slice_names = {
        p.track_event.name for p in events if p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN
    }
    assert (
        "matmul (t.py:20)" in slice_names
        and "_run (/x/argus/collectors/producer.py:9)" not in slice_names
    )
    counters = [
        p.track_event.double_counter_value
        for p in events
        if p.track_event.type == TrackEvent.TYPE_COUNTER
    ]
    assert counters == [pytest.approx(1000 / 1e6)]
    t_ = Trace()
    t_.ParseFromString(data)
    labels = [
        list(p.track_descriptor.process.process_labels)
        for p in t_.packet
        if p.HasField("track_descriptor") and p.track_descriptor.HasField("process")
    ]
    assert labels == [["culprit"]]
    assert stats.clipped == 0


def test_build_trace_rejects_bad_input() -> None:
    with pytest.raises(TraceError, match="no records"):
        build_trace([], ranks=[1])
    bad = {"rank": 1, "window_id": 0, "names": ["k"], "name_idx": b"\0" * 4,
           "stream": b"\0" * 4, "start_ns": b"\0" * 16, "duration_ns": b"\0" * 8}  # fmt: skip
    with pytest.raises(TraceError, match="different lengths"):
        build_trace(kernel_batches=[bad])


@pytest.mark.kafka
def test_trace_tracks_and_slices(kafka: Settings, topic_prefix: str, tmp_path: Path) -> None:
    recs = list(simulate("compute-straggler", ranks=32, steps=6, seed=1))
    steps = [r for s, _k, r in recs if s == "raw.steps"]
    end = max(r["end_ns"] for r in steps)
    half = (T0_NS + end) // 2
    stacks = [
        ("raw.stacks", f"{JOB}/{rk}", _stack_batch(rk, a, b))
        for rk in (*RANKS, 3)
        for a, b in ((T0_NS, half), (half, end))
    ]
    publish(iter(recs + stacks), kafka, prefix=topic_prefix)
    out = tmp_path / "out.pftrace"
    rc = main(
        ["trace", "--job", JOB, "--ranks", "12,13", "--from", str(T0_NS), "--to", str(end),
         "--prefix", topic_prefix, "-o", str(out)]
    )  # fmt: skip
    assert rc == 0
    procs, tracks, events = _parse(out.read_bytes())
    assert sorted(procs.values()) == ["rank 12 (node0001)", "rank 13 (node0001)"]
    # expected slices per (rank, track) from the records themselves
    want: Counter[tuple[str, str]] = Counter()
    for r in steps:
        if r["rank"] in RANKS:
            want[(f"rank {r['rank']}", "steps")] += 1
            for ph in r["phases"]:
                want[(f"rank {r['rank']}", f"phases {ph['stream_kind']}")] += 1
    n_kernels = 0
    for s, _k, r in recs:
        if s == "raw.kernels" and r["rank"] in RANKS:
            kinds = {st["id"]: st["kind"] for st in r["streams"]}
            for sid in unpack(r["stream"], "uint32").tolist():
                want[(f"rank {r['rank']}", f"cuda stream {sid} ({kinds.get(sid, 'unknown')})")] += 1
                n_kernels += 1
    for rk in RANKS:
        want[(f"rank {rk}", "stacks")] += 2
    assert n_kernels > 0
    got: Counter[tuple[str, str]] = Counter()
    names: Counter[str] = Counter()
    # one track per (rank, stream), properly nested in file order, no `#n` lanes
    per = Counter(tracks.values())
    assert max(per.values()) == 1
    _nesting_ok(events, tracks)
    for p in events:
        te = p.track_event
        parent, tname = tracks[te.track_uuid]
        assert "#" not in tname
        if te.type == TrackEvent.TYPE_COUNTER:
            assert tname == "iteration time (ms)"
            continue
        base = tname
        if te.type == TrackEvent.TYPE_SLICE_BEGIN:
            got[(procs[parent].split(" (")[0], base)] += 1
            names[te.name] += 1
        else:
            assert te.type == TrackEvent.TYPE_SLICE_END
    assert got == want
    assert names["allreduce (d.py:5)"] == 4  # stack slices named by the hottest leaf
    ts = [p.timestamp for p in events]
    first_step = min(r["start_ns"] for r in steps if r["rank"] in RANKS)
    assert min(ts) <= first_step and max(ts) <= end  # aligned on event time
