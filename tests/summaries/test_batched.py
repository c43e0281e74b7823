"""Issue 21: many blocks (rank-windows) per KDE call give each block's single-call result, bit
for bit: ``summarize_blocks`` vs ``summarize_many``, ``summarize_batches`` vs
``summarize_batch`` (what the compressor and ``argus diagnose`` send)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from argus.schemas.arrays import kernel_id
from argus.streams import synth
from argus.summaries import kde
from argus.summaries import summary_record as sr
from argus.summaries.kde import (
    COMPACT,
    PAPER,
    ROBUST,
    ManySummary,
    SummaryInputError,
    summarize_blocks,
    summarize_many,
)
from argus.summaries.quantile_wire import encode_log16

CONFIGS = [
    PAPER,
    ROBUST,
    COMPACT,
    dataclasses.replace(ROBUST, bandwidth_rule="silverman"),
    dataclasses.replace(COMPACT, max_grid_points=64, max_clusters=3),
]


def _assert_same(a: ManySummary, b: ManySummary) -> None:
    for f in ("group_ids", "group_n", "group_first", "cluster_group", "cluster_count"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    # bit for bit, not approximately: the wire summaries must not change
    assert a.cluster_quantiles_ns.shape == b.cluster_quantiles_ns.shape
    assert a.cluster_quantiles_ns.tobytes() == b.cluster_quantiles_ns.tobytes()
    assert a.rejected == b.rejected and a.method == b.method


def _block(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = int(rng.choice([0, 1, 2, 5, 50, 500, 3000]))
    k = int(rng.integers(1, 40))
    g = rng.integers(0, k, n) * int(rng.choice([1, 7, 1000, 10**9]))
    mode = rng.integers(0, 4, n)
    d = np.exp(rng.normal(8 + 2 * mode + (g % 5), 0.1 + 0.3 * rng.random(), n))
    if rng.random() < 0.3:
        d = np.round(d)  # ties
    if rng.random() < 0.3 and n:
        bad = rng.random(n) < 0.05
        d[bad] = rng.choice([0.0, -3.0, np.nan, np.inf, -np.inf], int(bad.sum()))
    return g.astype(np.int64), d


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("key_limit", [None, 2.0**9])
def test_blocks_equal_single_calls(
    seed: int, key_limit: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random blocks (empty ones, one event, ties, invalid durations, sparse ids, every
    preset, Silverman, capped grids and clusters); with a small key limit some blocks take
    the lexsort path and others the composite key, in one call."""
    if key_limit is not None:
        monkeypatch.setattr(kde, "_KEY_LIMIT", key_limit)
    rng = np.random.default_rng(seed)
    for trial in range(8):
        cfg = CONFIGS[(seed + trial) % len(CONFIGS)]
        blocks = [_block(rng) for _ in range(int(rng.integers(1, 10)))]
        g = np.concatenate([b[0] for b in blocks])
        d = np.concatenate([b[1] for b in blocks])
        res = summarize_blocks(g, d, [b[0].size for b in blocks], config=cfg)
        assert res.n_blocks == len(blocks)
        for i, (gb, db) in enumerate(blocks):
            _assert_same(res.block(i), summarize_many(gb, db, config=cfg))
        assert res.many.rejected.total == sum(r.total for r in res.rejected)


def test_blocks_bad_sizes() -> None:
    with pytest.raises(SummaryInputError, match="sum to the 3 events"):
        summarize_blocks([0, 0, 1], [1.0, 2.0, 3.0], [1, 1])
    with pytest.raises(SummaryInputError, match=">= 0"):
        summarize_blocks([0, 0, 1], [1.0, 2.0, 3.0], [4, -1])


def _records(seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    mix = synth.default_mix(seed)
    out = []
    for i in range(24):
        n = int(rng.choice([1, 3, 100, 3000, 12_000]))
        b = synth.kernel_batch(rng, mix, job="j", rank=i % 5, window_id=i, n_events=n)
        kind = i % 6
        if kind == 1:  # some invalid durations
            d = np.frombuffer(b["duration_ns"], "<i8").copy()
            d[rng.random(d.size) < 0.05] = -5
            b["duration_ns"] = d.tobytes()
        elif kind == 2:  # the same name twice in the dictionary: one group
            b["names"] = [*b["names"], b["names"][0]]
            idx = np.frombuffer(b["name_idx"], "<u4").copy()
            idx[::7] = len(b["names"]) - 1
            b["name_idx"] = idx.tobytes()
        elif kind == 3:  # stream ids past 65,535
            s = np.frombuffer(b["stream"], "<u4").copy()
            s[::5] += 70_000
            b["stream"] = s.tobytes()
        elif kind == 4:  # every duration invalid: a summary without groups
            b["duration_ns"] = np.zeros(n, "<i8").tobytes()
        out.append(b)
    return out


@pytest.mark.parametrize("chunk", [None, 5000], ids=["one-call", "chunks"])
@pytest.mark.parametrize("cfg", [PAPER, COMPACT], ids=lambda c: c.method)
def test_batches_equal_summarize_batch(
    cfg: kde.KdeConfig, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one summarize_blocks call, or in chunks of ~5,000 events (a large poll's are
    ~200,000): each record as summarize_batch gives it alone."""
    if chunk is not None:
        monkeypatch.setattr(sr, "CHUNK_EVENTS", chunk)
        assert len(sr.SummarizedBatches(_records(3))._parts) > 3
    recs = _records(3)
    ann: list[set[int] | None] = [
        None if i % 3 == 0 else {kernel_id(n) for n in r["names"][: i % 4]}
        for i, r in enumerate(recs)
    ]
    got = sr.summarize_batches(recs, config=cfg, announced=ann)
    for r, a, g in zip(recs, ann, got, strict=True):
        assert g == sr.summarize_batch(r, config=cfg, announced=a)


def test_summarized_batches_any_order_and_empty() -> None:
    recs = _records(5)[:6]
    done = sr.SummarizedBatches(recs)
    assert len(done) == 6
    for i in (5, 0, 3):
        assert done.record(i, announced=set()) == sr.summarize_batch(recs[i], announced=set())
    assert sr.summarize_batches([]) == []


def test_batches_bad_record_raises() -> None:
    recs = _records(1)[:3]
    recs[1] = {**recs[1], "names": []}
    with pytest.raises(sr.BatchError, match="bad-name-index"):
        sr.summarize_batches(recs)


@pytest.mark.parametrize("scale", [1, 3, 1000, 50_000])
def test_batches_any_stream_numbering(scale: int) -> None:
    """Stream ids used as they are (small ones), densified (sparse ones) or through
    ``np.unique`` (past 65,535): the same summaries, streams renamed by the same increasing
    map (``s -> scale * s + 1``), so groups keep their order."""
    recs = _records(7)[:12]
    moved = []
    for r in recs:
        s = np.frombuffer(r["stream"], "<u4").astype(np.int64)
        moved.append({**r, "stream": (scale * s + 1).astype("<u4").tobytes()})
    for a, b in zip(sr.summarize_batches(recs), sr.summarize_batches(moved), strict=True):
        gs = np.frombuffer(a.pop("group_stream"), "<u4").astype(np.int64)
        assert np.frombuffer(b.pop("group_stream"), "<u4").tolist() == (scale * gs + 1).tolist()
        assert a == b


@pytest.mark.parametrize("valid", [False, True], ids=["some-rejected", "all-valid"])
@pytest.mark.parametrize("key_limit", [None, 2.0**9], ids=["composite", "lexsort"])
@pytest.mark.parametrize("cfg", [PAPER, COMPACT], ids=lambda c: c.method)
def test_batches_equal_the_kde_core(
    cfg: kde.KdeConfig, key_limit: float | None, valid: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each record of a poll, against ``summarize_many`` of its own events (int64 durations,
    one group per (kernel id, stream)): the poll's numbering, float durations and trusted
    call of the KDE give the core's groups, counts and quantile bits. A poll whose durations
    are all valid has the groups' offsets looked up per (name, stream) slot, one with a
    rejected duration per group; a small key limit sends blocks through the lexsort."""
    if key_limit is not None:
        monkeypatch.setattr(kde, "_KEY_LIMIT", key_limit)
    recs = _records(11)
    if valid:  # no rejected durations, stream ids for a slot table
        recs = [r for i, r in enumerate(recs) if i % 6 in (0, 2, 5)]
    done = sr.SummarizedBatches(recs, config=cfg)
    for i, r in enumerate(recs):
        names, idx, stream, dur = sr.batch_columns(r)
        kids = np.array([kernel_id(n) for n in names], np.uint64)
        key = (kids[idx] << np.uint64(32)) | stream.astype(np.uint64)
        ids, label = np.unique(key, return_inverse=True)
        many = summarize_many(label.reshape(-1), dur, config=cfg)
        got = done.record(i)
        gk = np.frombuffer(got["group_kernel"], "<u4").astype(np.uint64)
        gs = np.frombuffer(got["group_stream"], "<u4").astype(np.uint64)
        assert ((gk << np.uint64(32)) | gs).tolist() == ids[many.group_ids].tolist()
        assert got["cluster_count"] == many.cluster_count.astype("<u4").tobytes()
        assert got["n_events"] == int(many.group_n.sum())
        q = many.cluster_quantiles_ns
        if cfg.quantile_encoding == "log16":
            med, off = encode_log16(q, many.quantile_levels)
            assert got["cluster_quantiles_ns"] == med.astype("<f4").tobytes()
            assert got["cluster_log_offsets"] == off.astype("<i2").tobytes()
        else:
            assert got["cluster_quantiles_ns"] == q.astype("<f4").tobytes()
