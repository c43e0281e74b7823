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
from argus.trace import TraceError, build_trace, lanes

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


def test_lanes_split_overlaps() -> None:
    assert lanes([(0, 10), (5, 15), (10, 20), (16, 18)]) == [0, 1, 0, 1]
    assert lanes([]) == []


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
    depth: dict[int, int] = defaultdict(int)
    names: Counter[str] = Counter()
    for p in sorted(
        events, key=lambda p: (p.timestamp, p.track_event.type != TrackEvent.TYPE_SLICE_END)
    ):
        te = p.track_event
        parent, tname = tracks[te.track_uuid]
        base = tname.split(" #")[0]
        if te.type == TrackEvent.TYPE_SLICE_BEGIN:
            got[(procs[parent].split(" (")[0], base)] += 1
            depth[te.track_uuid] += 1
            assert depth[te.track_uuid] == 1, f"overlapping slices on {tname}"
            names[te.name] += 1
        else:
            assert te.type == TrackEvent.TYPE_SLICE_END
            depth[te.track_uuid] -= 1
    assert got == want
    assert all(v == 0 for v in depth.values())
    assert names["allreduce (d.py:5)"] == 4  # stack slices named by the hottest leaf
    ts = [p.timestamp for p in events]
    first_step = min(r["start_ns"] for r in steps if r["rank"] in RANKS)
    assert min(ts) <= first_step and max(ts) <= end  # aligned on event time
