"""Kernel windows: columnar packing, and CPU op events arriving as kernel batches on Kafka."""

from __future__ import annotations

import numpy as np
import pytest

import argus.collectors as ac
from argus.collectors.kernels import columns_from_events
from argus.config import Settings
from argus.schemas import unpack
from argus.topics import topic_name
from tests.collectors.helpers import consume


def test_columns_dictionary_and_cap() -> None:
    evs = [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 7, 100, 5),
        ("gemm", 3, 90, 2),
        ("gemm", 3, 120, 3),
        ("gemm", 3, 130, 4),
    ]
    cols = columns_from_events(evs, max_events=3)
    assert cols.names == ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "gemm"]
    assert cols.name_idx.tolist() == [0, 1, 1]
    assert cols.stream.tolist() == [7, 3, 3]
    assert cols.duration_ns.dtype == np.int64 and cols.duration_ns.tolist() == [5, 2, 3]
    assert cols.dropped == 1
    kinds = {s["id"]: s["kind"] for s in cols.streams}
    assert kinds == {3: "compute", 7: "comm"}  # the NCCL stream is recognised by its kernels


@pytest.mark.kafka
def test_cpu_op_events_arrive_as_kernel_batches(prefixed: Settings) -> None:
    torch = pytest.importorskip("torch")
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    col = ac.start(
        job="kern-test",
        settings=prefixed,
        kernels_backend="cpu_ops",
        kernels_period_steps=2,
        control=False,
        publish_topology=False,
    )
    assert col.kernel_source is not None and col.kernel_source.source == "cpu_ops"
    for i in range(6):  # windows at steps 0, 2, 4
        with ac.step(i):
            m(torch.randn(16, 32)).sum().backward()
    ac.shutdown()
    got = consume(prefixed, topic_name("raw.kernels", prefixed.topic_prefix), 3)
    assert [r["window_id"] for _, r in got] == [0, 2, 4]
    for key, r in got:
        assert key == b"kern-test/0" and r["source"] == "cpu_ops" and r["dropped"] == 0
        idx = unpack(r["name_idx"], "uint32")
        start = unpack(r["start_ns"], "int64")
        dur = unpack(r["duration_ns"], "int64")
        stream = unpack(r["stream"], "uint32")
        n = len(idx)
        assert n > 10 and len(start) == len(dur) == len(stream) == n
        assert int(idx.max()) < len(r["names"])
        names = {r["names"][i] for i in idx}
        assert {"aten::addmm", "aten::relu"} <= names or {"aten::linear"} <= names
        assert (dur >= 0).all()
        # events lie inside the window (epoch ns), in time order
        assert r["window_start_ns"] <= int(start.min())
        assert int(start.max()) <= r["window_end_ns"]
        assert (np.diff(start) >= 0).all()
        assert {s["id"] for s in r["streams"]} == set(stream.tolist())
        assert "compute" in {s["kind"] for s in r["streams"]}


def test_columns_from_arrays_per_stream_kinds_and_first_appearance_order() -> None:
    from argus.collectors.kernels import columns_from_arrays

    names = ["gemm", "ncclDevKernel_AllReduce", "gemm", "softmax", "ncclDevKernel_AllReduce"]
    stream = np.array([3, 7, 9, 3, 7], dtype=np.int64)
    cols = columns_from_arrays(
        names,
        stream,
        np.arange(5, dtype=np.int64) * 10,
        np.ones(5, dtype=np.int64),
        max_events=4,
        stream_labels={7: "nccl"},
    )
    assert cols.names == ["gemm", "ncclDevKernel_AllReduce", "softmax"]
    assert cols.name_idx.dtype == np.uint32 and cols.name_idx.tolist() == [0, 1, 0, 2]
    assert cols.dropped == 1 and len(cols) == 4
    # stream 9 ran only gemm (seen first on stream 3): compute; 7 ran NCCL: comm
    assert [(s["id"], s["kind"], s["label"]) for s in cols.streams] == [
        (3, "compute", ""),
        (7, "comm", "nccl"),
        (9, "compute", ""),
    ]
    empty = columns_from_arrays([], np.empty(0), np.empty(0), np.empty(0), max_events=10)
    assert len(empty) == 0 and empty.names == [] and empty.streams == []


def test_cpu_profiler_window_builds_time_ordered_columns_off_thread() -> None:
    torch = pytest.importorskip("torch")
    import threading

    from argus.collectors.kernels.profiler import ProfilerSource

    src = ProfilerSource(gpu=False, max_events=100_000)
    src.warm_up()
    m = torch.nn.Linear(16, 16)
    src.start_window()
    m(torch.randn(4, 16)).sum().backward()
    build = src.end_window()
    out: list = []
    t = threading.Thread(target=lambda: out.append(build()))  # as on the delivery thread
    t.start()
    t.join()
    cols = out[0]
    assert cols is not None and len(cols) > 5
    assert np.all(np.diff(cols.start_ns) >= 0)
    assert any(n.startswith("aten::") for n in cols.names)
    assert not any(n.startswith(("ProfilerStep", "[memory]")) for n in cols.names)
    main = threading.get_native_id() & 0xFFFFFFFF
    kinds = {s["id"]: (s["kind"], s["label"]) for s in cols.streams}
    assert kinds[main] == ("compute", f"thread {main} (training)")
    assert int(cols.name_idx.max()) < len(cols.names)


def test_a_window_build_paces_itself_per_block_of_events() -> None:
    """The build of a window calls the source's ``pace`` (the producer's ``pace_point``)
    after each block of events read, so a large window is not one long hold of the GIL; the
    columns are the same as unpaced."""
    torch = pytest.importorskip("torch")
    import threading

    from argus.collectors.kernels.profiler import ProfilerSource, _columns

    src = ProfilerSource(gpu=False, max_events=100_000)
    src.warm_up()
    m = torch.nn.Linear(16, 16)
    src.start_window()
    for _ in range(5):
        m(torch.randn(4, 16)).sum().backward()
    results = src._raw.stop() if src._raw is not None else None
    src._prof = None
    if results is None:
        pytest.skip("this torch has no raw profiler calls")
    calls = [0]

    def pace() -> None:
        calls[0] += 1

    tid = threading.get_native_id()
    paced = _columns(results, False, tid, 100_000, pace, block=8)
    plain = _columns(results, False, tid, 100_000)
    assert paced is not None and plain is not None and len(paced) > 24
    assert calls[0] >= len(results.events()) // 8
    assert paced.names == plain.names and np.array_equal(paced.start_ns, plain.start_ns)
    assert np.array_equal(paced.name_idx, plain.name_idx)


def test_profiler_windows_are_freed_without_a_full_gc() -> None:
    """The profiler's result objects sit in reference cycles; a window's build releases them
    so that RSS stays flat over thousands of windows (pytorch/pytorch#193348)."""
    torch = pytest.importorskip("torch")
    import gc

    from torch.autograd.profiler import profile as autograd_profile

    from argus.collectors.kernels.profiler import ProfilerSource

    def live() -> int:
        return sum(type(o) is autograd_profile for o in gc.get_objects())

    src = ProfilerSource(gpu=False, max_events=100_000)
    src.warm_up()
    m = torch.nn.Linear(8, 8)
    gc.collect()
    gc.disable()
    try:
        before = live()
        for _ in range(8):
            src.start_window()
            m(torch.randn(2, 8)).sum().backward()
            cols = src.end_window()()
            assert cols is not None and len(cols) > 0
        assert live() <= before + 1
    finally:
        gc.enable()


def test_cpu_windows_use_the_raw_profiler_calls_and_fall_back_to_the_wrapper() -> None:
    """CPU-op windows start and stop through torch.autograd's profiler calls (no wrapper
    state per window); where those refuse, the window runs through torch.profiler.profile
    and from then on the source keeps to it."""
    torch = pytest.importorskip("torch")

    from argus.collectors.kernels.profiler import ProfilerSource

    src = ProfilerSource(gpu=False, max_events=100_000)
    src.warm_up()
    assert src._raw is not None  # this torch has them
    m = torch.nn.Linear(8, 8)

    def window() -> list[str]:
        src.start_window()
        m(torch.randn(2, 8)).sum().backward()
        cols = src.end_window()()
        assert cols is not None
        return cols.names

    m(torch.randn(2, 8)).sum().backward()  # grads exist: every window below accumulates
    raw = window()

    def refuse() -> None:
        raise RuntimeError("no")

    src._raw.start = refuse
    wrapped = window()
    assert src._raw is None and window() == wrapped
    assert "aten::addmm" in raw and sorted(raw) == sorted(wrapped)
