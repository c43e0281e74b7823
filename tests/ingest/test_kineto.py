"""``argus.ingest``: real Kineto traces (shared/data/kineto) and synthetic ones -> records.

The real files come from HolisticTraceAnalysis's test data (shared/data/kineto/README.md):
GPU kernels of NCCL jobs, an ns-resolution file, an AMD file without ``distributedInfo``,
a CPU-only rank. Every record written must pass the workers' own input validation.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from argus.ingest import IngestOptions, TraceError, ingest, read_kineto
from argus.ingest.assemble import IngestError
from argus.ingest.kineto import phase_of_annotation, union_lengths
from argus.ingest.synth import write_synthetic_job
from argus.streams.validate import Limits, validate_kernel_batch, validate_step

ROOT = Path(__file__).resolve().parents[2]


def _kineto_dir() -> Path | None:
    for d in (
        os.environ.get("ARGUS_KINETO_DATA", ""),
        ROOT / "shared" / "data" / "kineto",
        ROOT.parent / "shared" / "data" / "kineto",
    ):
        if d and Path(d, "README.md").is_file():
            return Path(d)
    return None


KINETO = _kineto_dir()
needs_data = pytest.mark.skipif(KINETO is None, reason="shared/data/kineto not found")


def _real(name: str) -> Path:
    assert KINETO is not None
    return next(KINETO.glob(name))


def _valid(recs: list[tuple[str, str, dict[str, Any]]]) -> dict[str, int]:
    """Every record passes the workers' validation; counts per topic suffix."""
    lim = Limits()
    n: dict[str, int] = {}
    for suffix, key, rec in recs:
        assert key == f"{rec['job']}/{rec['rank']}"
        if suffix == "raw.steps":
            validate_step(rec, lim)
        else:
            validate_kernel_batch(rec, lim)
        n[suffix] = n.get(suffix, 0) + 1
    return n


@needs_data
def test_real_gpu_trace_kernels_steps_and_phases() -> None:
    """trace_diff_control: rank 3 of 8, 6 steps, every one of the 8,568 kernels counted
    (inside a step or reported outside), NCCL kernels a comm phase and stream."""
    tr = read_kineto(_real("trace_diff_control_control.json.gz"))
    assert (tr.rank, tr.world, tr.kernel_source) == (3, 8, "kineto")
    assert [s.step for s in tr.steps] == list(range(1009, 1015))
    assert tr.k_step.size + tr.outside == 8568
    assert tr.k_step.size > 8000
    names = {p.name for p in tr.phases[1010]}
    assert {"forward", "optimizer", "gpu_compute"} <= names
    assert any(p.stream_kind == "comm" and p.name.startswith("gpu_") for p in tr.phases[1010])
    assert "comm" in tr.stream_kind.values()
    # gpu_compute is a union of kernel spans: never longer than its step (+ async tail)
    for s in tr.steps:
        gc = next(p for p in tr.phases[s.step] if p.name == "gpu_compute")
        assert 0 < gc.duration_ns < 2 * (s.end_ns - s.start_ns)
    res = ingest(_real("trace_diff_control_control.json.gz"), IngestOptions(job="ctl"))
    n = _valid(list(res.records()))
    assert n == {"raw.steps": 6, "raw.kernels": 6}
    assert any("1 of 8 ranks" in w for w in res.warnings)


@needs_data
def test_real_ns_resolution_trace_keeps_ns() -> None:
    """ns_resolution file: ts like 1712195495502094.5 µs (epoch, no baseTimeNanoseconds)
    -> exactly ...502094500 ns; 4,350 kernels counted."""
    f = _real("ns_resolution_trace_rank-0*.json.gz")
    doc = json.loads(gzip.decompress(f.read_bytes()))
    raw = next(
        e
        for e in doc["traceEvents"]
        if e.get("name") == "ProfilerStep#101" and e["cat"] != "gpu_user_annotation"
    )
    tr = read_kineto(f)
    first = tr.steps[0]
    assert first.step == 101
    whole, _, frac = repr(raw["ts"]).partition(".")
    assert first.start_ns == int(whole) * 1000 + int((frac + "000")[:3])
    assert tr.k_step.size + tr.outside == 4350
    assert tr.epoch_clock
    assert len(tr.steps) == 5
    _valid(list(ingest(f, IngestOptions(job="ns")).records()))


@needs_data
def test_real_cpu_only_and_amd_traces() -> None:
    """The CPU-only rank 34 of 300 (gloo) is read with CPU ops as its kernels; the AMD file
    (no distributedInfo, no rank in its name) alone is rank 0 of 1, base time applied."""
    cpu = read_kineto(_real("cpu_only_rank-34*.json.gz"))
    assert (cpu.rank, cpu.world, cpu.kernel_source) == (34, 300, "cpu_ops")
    assert [s.step for s in cpu.steps] == [551]
    assert cpu.phases[551]
    res = ingest(_real("cpu_only_rank-34*.json.gz"), IngestOptions(job="cpu"))
    recs = list(res.records())
    assert _valid(recs)["raw.steps"] == 1
    assert recs[0][2]["coords"]["dp_size"] == 300

    amd = ingest(_real("amd_trace_mi250*.json.gz"), IngestOptions(job="amd"))
    assert (amd.world, amd.ranks) == (1, [0])
    assert any("rank 0" in w for w in amd.warnings)
    tr = amd.traces[0]
    assert tr.kernel_source == "kineto" and tr.k_step.size + tr.outside == 14
    assert tr.steps[0].start_ns > 1735632360000000000  # baseTimeNanoseconds + ts
    _valid(list(amd.records()))


@needs_data
def test_real_two_ranks_of_one_job(tmp_path: Path) -> None:
    """The sampled pair: ranks 0 and 1 of a 128-rank job, both steps of both ranks."""
    for f in KINETO.glob("trace_filter_sampled_rank-*.json.gz"):  # type: ignore[union-attr]
        (tmp_path / f.name).write_bytes(f.read_bytes())
    res = ingest(tmp_path, IngestOptions(job="pair"))
    assert (res.world, res.ranks, res.n_steps) == (128, [0, 1], 4)
    n = _valid(list(res.records()))
    assert n["raw.steps"] == 4 and n["raw.kernels"] == 4


def test_phase_rules() -> None:
    assert phase_of_annotation("Optimizer.step#AdamW.step") == ("optimizer", "compute")
    assert phase_of_annotation("DistributedDataParallel.forward") == ("forward", "compute")
    assert phase_of_annotation("## backward ##") == ("backward", "compute")
    assert phase_of_annotation("gloo:all_reduce") == ("comm_all_reduce", "comm")
    assert phase_of_annotation("nccl:send") == ("comm_send", "p2p")
    assert phase_of_annotation("## mlp ##") == ("mlp", "compute")
    assert phase_of_annotation("my_block") == ("my_block", "compute")


def test_union_lengths() -> None:
    g = np.array([0, 0, 0, 1, 1, 2], np.int64)
    s = np.array([0, 5, 20, 100, 100, 7], np.int64)
    e = np.array([10, 12, 25, 150, 120, 7], np.int64)
    assert union_lengths(g, s, e, 4).tolist() == [17, 50, 0, 0]


def _doc(
    rank: int | None, events: list[dict[str, Any]], base: int | None = 10**18
) -> dict[str, Any]:
    d: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if base is not None:
        d["baseTimeNanoseconds"] = base
    if rank is not None:
        d["distributedInfo"] = {"rank": rank, "world_size": 2}
    return d


def _ev(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    e = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def test_nested_phases_union_backward_and_launch_correlation(tmp_path: Path) -> None:
    """Nested forward annotations count once; backward from autograd ops; a kernel that runs
    after its step's CPU end belongs to the step that launched it."""
    ev = [
        _ev("user_annotation", "ProfilerStep#7", 0, 1000),
        _ev("user_annotation", "ProfilerStep#8", 1000, 1000),
        _ev("user_annotation", "DistributedDataParallel.forward", 10, 300),
        _ev("user_annotation", "forward", 20, 200),  # nested: no extra time
        _ev("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 400, 100),
        _ev("cpu_op", "autograd::engine::evaluate_function: AddBackward0", 700, 50),
        _ev("cuda_runtime", "cudaLaunchKernel", 950, 5, correlation=42),
        _ev("kernel", "gemm", 1200, 100, stream=7, correlation=42),
        _ev(
            "kernel",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            1300,
            400,
            stream=20,
            correlation=43,
        ),
    ]
    f = tmp_path / "a.json"
    f.write_text(json.dumps(_doc(0, ev)))
    tr = read_kineto(f)
    ph = {p.name: p for p in tr.phases[7]}
    assert ph["forward"].duration_ns == 300_000 and ph["forward"].start_ns == 10**18 + 10_000
    assert ph["backward"].duration_ns == 350_000  # 400 µs .. 750 µs
    assert tr.k_step.tolist() == [7, 8]  # gemm by its launch at 950 µs; nccl by its own ts
    assert {p.name for p in tr.phases[8]} == {"gpu_allreduce"}
    assert tr.stream_kind == {7: "compute", 20: "comm"}


def test_relative_clock_and_rank_from_name(tmp_path: Path) -> None:
    """A file without baseTimeNanoseconds and small ts is aligned to the epoch rank's same
    step; its rank comes from the file name; the world from the other file."""
    ev0 = [_ev("user_annotation", f"ProfilerStep#{i}", 1e6 + i * 1000, 900) for i in range(3)]
    ev1 = [_ev("user_annotation", f"ProfilerStep#{i}", 50 + i * 1000, 900) for i in range(1, 3)]
    (tmp_path / "host_rank0.json").write_text(json.dumps(_doc(0, ev0)))
    (tmp_path / "host_rank-1.json").write_text(json.dumps(_doc(None, ev1, base=None)))
    res = ingest(tmp_path, IngestOptions(job="j"))
    assert res.ranks == [0, 1] and res.world == 2
    starts = {
        (r["rank"], r["step"]): r["start_ns"] for s, _k, r in res.records() if s == "raw.steps"
    }
    assert starts[(1, 1)] == starts[(0, 1)]
    assert starts[(1, 2)] - starts[(1, 1)] == 1_000_000
    assert any("not since the Unix epoch" in w for w in res.warnings)


def test_rank_from_order_duplicates_and_errors(tmp_path: Path) -> None:
    ev = [_ev("user_annotation", "ProfilerStep#1", 0, 500)]
    for name in ("b.json", "a.json"):
        (tmp_path / name).write_text(json.dumps(_doc(None, ev)))
    with pytest.raises(IngestError, match=r"no trace could be ingested.*give --rank-from order"):
        ingest(tmp_path, IngestOptions(job="j"))
    res = ingest(tmp_path, IngestOptions(job="j", rank_from="order"))
    assert [(t.path.name, t.rank) for t in res.traces] == [("a.json", 0), ("b.json", 1)]
    with pytest.raises(IngestError, match="world size 1 but a trace is rank 1"):
        ingest(tmp_path, IngestOptions(job="j", rank_from="order", world_size=1))
    with pytest.raises(IngestError, match="layout"):
        ingest(tmp_path, IngestOptions(job="j", rank_from="order", layout="dp=4"))
    for name in ("a2.json", "a3.json"):  # rank 0's step 1 twice
        (tmp_path / name).write_text(json.dumps(_doc(0, ev)))
    res = ingest(tmp_path, IngestOptions(job="j", rank_from="info"))
    assert res.n_steps == 1 and any("more than one file" in w for w in res.warnings)
    assert [s.path for s in res.skipped] == [str(tmp_path / "a.json"), str(tmp_path / "b.json")]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file"),
        (b'{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "Pro', "truncated JSON"),
        (b"{not json}", "malformed JSON"),
        (b'{"foo": 1}', "no traceEvents"),
        (b'{"traceEvents": [{"ph": "X", "name": "x", "cat": "kernel"}]}', "without a numeric ts"),
        (b'{"traceEvents": []}', "no ProfilerStep"),
        (b"\xff\xfe\x00", "not UTF-8"),
    ],
)
def test_bad_files_name_the_file(tmp_path: Path, content: bytes, reason: str) -> None:
    f = tmp_path / "rank-3.pt.trace.json"
    f.write_bytes(content)
    with pytest.raises(TraceError, match=reason) as exc:
        read_kineto(f)
    assert str(f) in str(exc.value)


def test_truncated_gzip_is_named_and_others_read(tmp_path: Path) -> None:
    paths = write_synthetic_job(tmp_path, ranks=3, steps=4, kernels_per_step=8)
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[: len(data) // 2])
    res = ingest(tmp_path, IngestOptions(job="j"))
    assert res.ranks == [0, 2]
    assert len(res.skipped) == 1 and res.skipped[0].path == str(paths[1])
    assert "truncated gzip" in res.skipped[0].reason
    recs = list(res.records())
    assert _valid(recs) == {"raw.steps": 8, "raw.kernels": 8}
    par = ingest(tmp_path, IngestOptions(job="j"), workers=2)  # a process pool: the same
    assert par.skipped == res.skipped and list(par.records()) == recs


def test_synthetic_job_diagnosed(tmp_path: Path) -> None:
    """8 synthetic GPU ranks, rank 5's forward 1.5x: diagnose names rank 5."""
    from argus.diagnose import diagnose_path
    from argus.sim import write_avro

    write_synthetic_job(tmp_path / "tr", ranks=8, steps=30, slow_rank=5, kernels_per_step=16)
    res = ingest(tmp_path / "tr", IngestOptions(job="syn"))
    write_avro(res.records(), tmp_path / "out")
    d = diagnose_path(tmp_path / "out")
    assert d.verdicts and list(d.verdicts[0].culprit.ranks) == [5]
    assert d.verdicts[0].culprit.phase == "forward"
    assert {r for v in d.verdicts for r in v.culprit.ranks} == {5}


def test_several_files_per_rank_are_merged(tmp_path: Path) -> None:
    """A schedule with ``repeat``: two profiling cycles per rank, in subdirectories (the
    search is recursive), steps 10-13 and 30-33, merged into one job per rank."""
    write_synthetic_job(tmp_path / "cycle1", ranks=2, steps=4, first_step=10, kernels_per_step=4)
    write_synthetic_job(tmp_path / "cycle2", ranks=2, steps=4, first_step=30, kernels_per_step=4)
    res = ingest(tmp_path, IngestOptions(job="j"))
    assert res.files == 4 and res.ranks == [0, 1] and not res.warnings
    recs = list(res.records())
    steps = sorted({r["step"] for s, _k, r in recs if s == "raw.steps"})
    assert steps == [10, 11, 12, 13, 30, 31, 32, 33]
    assert _valid(recs) == {"raw.steps": 16, "raw.kernels": 16}


def test_old_trace_with_steps_as_cpu_ops(tmp_path: Path) -> None:
    """Older PyTorch wrote ProfilerStep#N with ``cat: "cpu_op"``: still steps, not kernels."""
    ev = [
        _ev("cpu_op", "ProfilerStep#3", 0, 1000),
        _ev("cpu_op", "aten::mm", 100, 300),
        _ev("Operator", "ProfilerStep#4", 1000, 1000),
        _ev("cpu_op", "aten::mm", 1100, 600),
    ]
    f = tmp_path / "old.json"
    f.write_text(json.dumps(_doc(0, ev)))
    tr = read_kineto(f)
    assert [s.step for s in tr.steps] == [3, 4]
    assert tr.kernel_source == "cpu_ops" and tr.names == ["aten::mm"]
    assert tr.k_dur.tolist() == [300_000, 600_000] and tr.k_step.tolist() == [3, 4]
