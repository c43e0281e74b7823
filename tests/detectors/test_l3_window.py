"""L3 over a window of kernel summaries (with the real compression and reconstruction)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np

from argus.detectors.l3_window import RankKernels, detect_window, merge_summaries
from argus.sim.layout import Layout
from argus.summaries.kde import summarize_many

LAY = Layout(dp=4, tp=1, pp=1, ep=4)  # one dp scope of 16 ranks, 4 EDP groups of 4


def _summ(rng: np.random.Generator, scale: float, n: int = 40):
    x = np.concatenate(
        [
            rng.lognormal(np.log(1e6 * scale), 0.05, n),
            rng.lognormal(np.log(2.5e6 * scale), 0.05, n // 2),
        ]
    )
    return summarize_many(np.zeros(x.size, np.int64), x).summary(0)


def _ranks(
    slow: dict[int, float], kernel: str = "gemm", stream: int = 7, kind: str = "compute"
) -> list[RankKernels]:
    rng = np.random.default_rng(0)
    return [
        RankKernels(
            r, LAY.coords(r), {(kernel, stream): _summ(rng, slow.get(r, 1.0))}, {stream: kind}
        )
        for r in range(LAY.world)
    ]


def test_one_slow_rank_is_a_kernel_divergence() -> None:
    out = detect_window("j", _ranks({6: 1.6}), window=(0, 9, 0, 1))
    assert [(f.kind, f.ranks, f.kernel, f.stream) for f in out] == [
        ("kernel_divergence", (6,), "gemm", 7)
    ]
    assert out[0].level == "L3" and out[0].group_kind == "dp"


def test_healthy_window_is_quiet() -> None:
    assert detect_window("j", _ranks({}), window=(0, 9, 0, 1)) == []


def test_a_slow_edp_group_is_a_group_divergence() -> None:
    members = [
        r for r in range(LAY.world) if LAY.group_id_of(r, "edp") == LAY.group_id_of(2, "edp")
    ]
    out = detect_window(
        "j",
        _ranks(
            dict.fromkeys(members, 6.0),
            kernel="ncclDevKernel_ReduceScatter",
            stream=16,
            kind="comm",
        ),
        window=(0, 9, 0, 1),
    )
    groups = [(f.group_kind, f.group_id) for f in out if f.kind == "group_divergence"]
    assert groups == [("edp", LAY.group_id_of(2, "edp"))]
    f = next(f for f in out if f.kind == "group_divergence")
    assert sorted(int(x) for x in f.evidence["members"].strip("[]").split(",")) == members
    assert float(f.evidence["block_ratio"]) > 3


def test_p2p_stream_kernels_are_skipped() -> None:
    assert detect_window("j", _ranks({3: 5.0}, stream=17, kind="p2p"), window=(0, 9, 0, 1)) == []


def test_merge_summaries_adds_counts() -> None:
    rng = np.random.default_rng(1)
    a, b = _summ(rng, 1.0), _summ(rng, 1.0)
    m = merge_summaries([a, b])
    assert m.n == a.n + b.n and len(m) == len(a) + len(b)


def _records(slow_rank: int, windows: int = 3) -> list[dict]:
    """kernel_summary records of 16 ranks x ``windows`` windows, one rank's GEMMs 1.5x slower."""
    from argus.streams import synth
    from argus.summaries.summary_record import summarize_batch

    mix = synth.default_mix(0)
    rng = np.random.default_rng(7)
    out = []
    for w in range(windows):
        for r in range(LAY.world):
            b = synth.kernel_batch(
                rng,
                mix,
                job="j",
                rank=r,
                window_id=w,
                n_events=3000,
                coords=LAY.coords(r),
                slowdown={"gemm": 1.5} if r == slow_rank else None,
            )
            out.append(summarize_batch(b))
    return out


def _as_rank_kernels(records: list[dict]) -> list[RankKernels]:
    from argus.detectors.kernel_inputs import rank_kernels_from_summaries
    from argus.summaries.summary_record import KernelNames

    return rank_kernels_from_summaries(records, KernelNames())


def test_columnar_table_from_wire_records_gives_the_object_path_findings() -> None:
    from argus.detectors.l3_window import table_from_summaries
    from argus.summaries.summary_record import KernelNames

    recs = _records(slow_rank=5)
    book = KernelNames()
    book.update_many(recs)
    fast = detect_window("j", table_from_summaries(recs, book), window=(0, 2, 0, 1))
    slow = detect_window("j", _as_rank_kernels(recs), window=(0, 2, 0, 1))
    # the same findings; the columnar path takes ln of the log16 quantiles without the exp
    # the Summary objects hold, so floats may differ in their last bits
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        nums = ("score", "threshold", "baseline", "observed")
        assert dataclasses.replace(a, **{k: 0.0 for k in nums}) == dataclasses.replace(
            b, **{k: 0.0 for k in nums}
        )
        np.testing.assert_allclose(
            [getattr(a, k) for k in nums], [getattr(b, k) for k in nums], rtol=1e-12
        )
    named = Counter(r for f in fast if f.kind == "kernel_divergence" for r in f.ranks)
    assert named.most_common(1)[0][0] == 5


def test_table_merges_clusters_with_different_quantile_levels_exactly() -> None:
    from argus.detectors.l3_window import KernelTable
    from argus.summaries.kde import Summary
    from argus.summaries.lognormal import default_probs, mixture_quantile_rows, quantile_matrix

    a = Summary([0.5, 0.99], [30, 10], [[1e6, 1.2e6], [3e6, 3.3e6]])
    b = Summary([0.1, 0.5, 0.9, 0.99], [25], [[0.9e6, 1e6, 1.1e6, 1.3e6]])
    t = KernelTable.from_ranks(
        [RankKernels(0, {}, {("k", 0): a}), RankKernels(1, {}, {("k", 0): b})]
    )
    assert t.levels.tolist() == [0.1, 0.5, 0.9, 0.99]
    p = default_probs(64)
    got = mixture_quantile_rows(t.c_rank, t.counts, t.log_q, t.levels, p, 2)
    np.testing.assert_allclose(got, quantile_matrix([a, b], p), rtol=1e-9)


def _tables_equal(a, b) -> None:  # type: ignore[no-untyped-def]
    assert a.keys == b.keys and a.stream_kinds == b.stream_kinds and a.coords == b.coords
    for f in ("ranks", "c_rank", "c_key", "counts", "log_q", "levels"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_block_table_from_wire_columns_equals_the_record_by_record_table() -> None:
    """One pass over a block's joined columns gives the table bit for bit, for log16 and
    float32 records, records without groups, and a block mixing the two encodings."""
    from argus.detectors.l3_window import _table_by_record, table_from_wire, wire_summary
    from argus.summaries.kde import PAPER
    from argus.summaries.summary_record import KernelNames, summarize_batch

    log16 = _records(slow_rank=5, windows=2)
    rng = np.random.default_rng(3)
    f32 = [summarize_batch(dict(r, **_batch_cols(r, rng)), config=PAPER) for r in log16[:20]]
    empty = dict(log16[0], group_kernel=b"", group_stream=b"", group_clusters=b"")
    empty.update(cluster_count=b"", cluster_quantiles_ns=b"", cluster_log_offsets=b"", rank=99)
    assert f32[0]["cluster_log_offsets"] == b"" and log16[0]["cluster_log_offsets"]
    for recs in (log16, f32, [*log16[:7], empty, *log16[7:]], [*f32, *log16]):
        book = KernelNames()
        book.update_many(recs)
        items = [wire_summary(r) for r in recs]
        ranks = sorted({w.rank for w in items})
        coords = [next(r["coords"] for r in recs if r["rank"] == k) for k in ranks]
        kinds = [
            {int(s["id"]): s["kind"] for r in recs if r["rank"] == k for s in r["streams"]}
            for k in ranks
        ]
        want = _table_by_record(items, book, ranks, coords, kinds)
        _tables_equal(table_from_wire(items, book), want)


def _batch_cols(rec: dict, rng: np.random.Generator) -> dict:
    """A kernel_batch of ``rec``'s rank and window: 3 kernels x 40 events on stream 7."""
    n = 120
    return {
        "host": "h",
        "source": "simulator",
        "names": ["gemm", "attn", "norm"],
        "name_idx": (np.arange(n) % 3).astype("<u4").tobytes(),
        "stream": np.full(n, 7, "<u4").tobytes(),
        "start_ns": np.arange(n, dtype="<i8").tobytes(),
        "duration_ns": rng.lognormal(13.0, 0.1, n).astype("<i8").tobytes(),
        "streams": [{"id": 7, "kind": "compute", "label": ""}],
        "dropped": 0,
        "part": 0,
        "parts": 1,
    }


def test_block_table_names_the_bad_record_as_the_record_by_record_check() -> None:
    import pytest

    from argus.detectors.l3_window import table_from_summaries
    from argus.summaries.summary_record import BatchError, KernelNames, summary_columns

    recs = _records(slow_rank=5, windows=1)
    bad = dict(recs[3], cluster_count=recs[3]["cluster_count"][:-4])
    with pytest.raises(BatchError) as want:
        summary_columns(bad)
    with pytest.raises(BatchError) as got:
        table_from_summaries([*recs[:3], bad, *recs[4:]], KernelNames())
    assert str(got.value) == str(want.value) and "cluster_count" in str(got.value)
