"""argus.summaries.summary_record: kernel_batch -> kernel_summary -> Summary, through Avro."""

from __future__ import annotations

import numpy as np
import pytest

from argus.schemas.arrays import kernel_id, pack
from argus.schemas.codec import Codec
from argus.streams import synth
from argus.summaries import summary_record as sr
from argus.summaries.kde import COMPACT, DEFAULT, PAPER, ROBUST, summarize
from argus.summaries.quantile_wire import LOG16_MAX_REL_ERROR


def _batch(
    names: list[str], idx: list[int], stream: list[int], dur: list[float] | np.ndarray
) -> dict:
    n = len(idx)
    return {
        "job": "job1",
        "rank": 4,
        "window_id": 12,
        "window_start_ns": 1000,
        "window_end_ns": 2000,
        "coords": {"dp_rank": 1, "dp_size": 2},
        "names": names,
        "name_idx": pack(idx, "uint32"),
        "stream": pack(stream, "uint32"),
        "start_ns": pack(np.arange(n), "int64"),
        "duration_ns": pack(np.asarray(dur, dtype=np.int64), "int64"),
    }


@pytest.fixture(scope="module")
def batch() -> dict:
    return synth.kernel_batch(
        np.random.default_rng(2),
        synth.default_mix(0),
        job="j",
        rank=1,
        window_id=3,
        n_events=30_000,
    )


@pytest.mark.parametrize("cfg", [PAPER, ROBUST, COMPACT])
def test_round_trip_through_avro_matches_the_core(batch: dict, cfg) -> None:
    codec = Codec()
    rec = sr.summarize_batch(batch, config=cfg)
    back = codec.decode_as("kernel_summary", codec.encode("kernel_summary", rec))
    assert back["method"] == cfg.method and back["quantile_levels"] == list(cfg.quantile_levels)
    assert back["n_events"] == 30_000 and back["rejected"] == 0 and back["job"] == "j"
    groups = sr.groups_from_summary(back)
    names, idx, stream, dur = sr.batch_columns(batch)
    kid = np.array([kernel_id(n) for n in names], dtype=np.uint32)[idx]
    assert len(groups) == len(set(zip(kid.tolist(), stream.tolist(), strict=True)))
    assert sum(s.n for s in groups.values()) == 30_000
    for (k, s), got in list(groups.items())[:25]:
        want = summarize(dur[(kid == k) & (stream == s)], config=cfg)
        assert got.counts.tolist() == want.counts.tolist()
        # float32 wire: 6e-8; log16: half a log step (plus the float32 median)
        rtol = 1e-6 if cfg.quantile_encoding == "float32" else LOG16_MAX_REL_ERROR + 1e-6
        np.testing.assert_allclose(got.quantiles_ns, want.quantiles_ns, rtol=rtol)
    keys = list(groups)
    assert keys == sorted(keys)  # layout ordered by (kernel id, stream)


def test_announced_names_are_not_repeated(batch: dict) -> None:
    codec = Codec()
    first = sr.summarize_batch(batch)
    ids = {n["id"] for n in first["kernel_names"]}
    assert ids == {k for k, _ in sr.groups_from_summary(first)}
    steady = sr.summarize_batch(batch, announced=ids)
    assert steady["kernel_names"] == []
    some = sr.summarize_batch(batch, announced=set(list(ids)[:10]))
    assert len(some["kernel_names"]) == len(ids) - 10
    b_first, b_steady = (len(codec.encode("kernel_summary", r)) for r in (first, steady))
    assert b_steady < b_first / 5  # the names are most of a first summary
    assert b_steady < len(codec.encode("kernel_batch", batch)) / 100
    book = sr.KernelNames()
    book.update(first)
    k = next(iter(ids))
    assert k in book and len(book) == len(ids) and book.name(k) in batch["names"]
    assert book.name(12345) == "kernel#00003039"


def test_same_name_twice_in_dictionary_is_one_group() -> None:
    b = _batch(["gemm", "gemm", "add"], [0, 1, 2, 0, 1], [7, 7, 7, 9, 7], [100, 110, 5, 300, 105])
    groups = sr.groups_from_summary(sr.summarize_batch(b))
    g = kernel_id("gemm")
    assert groups[(g, 7)].n == 3 and groups[(g, 9)].n == 1 and groups[(kernel_id("add"), 7)].n == 1


def test_invalid_durations_are_counted_not_fatal() -> None:
    b = _batch(["k"], [0, 0, 0, 0], [1, 1, 1, 1], [0, -3, 100, 101])
    rec = sr.summarize_batch(b)
    assert rec["n_events"] == 2 and rec["rejected"] == 2
    only_bad = sr.summarize_batch(_batch(["k"], [0], [1], [0]))
    assert (
        only_bad["n_events"] == 0
        and only_bad["rejected"] == 1
        and sr.groups_from_summary(only_bad) == {}
    )
    empty = sr.summarize_batch(_batch([], [], [], []))
    assert empty["n_events"] == 0 and empty["group_kernel"] == b""
    Codec().encode("kernel_summary", empty)


def test_large_stream_ids_are_handled() -> None:
    b = _batch(["k"], [0, 0, 0], [2**31 + 5, 2**31 + 5, 3], [100, 101, 102])
    groups = sr.groups_from_summary(sr.summarize_batch(b))
    assert set(groups) == {(kernel_id("k"), 2**31 + 5), (kernel_id("k"), 3)}


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda b: b.update(stream=pack([1], "uint32")), "bad-column"),
        (lambda b: b.update(name_idx=pack([0, 5], "uint32")), "bad-name-index"),
        (lambda b: b.update(duration_ns=b"\x00\x01\x02"), "bad-column"),
        (lambda b: b.pop("names"), "bad-column"),
    ],
)
def test_inconsistent_batches_raise_typed_errors(mutate, reason: str) -> None:
    b = _batch(["k"], [0, 0], [1, 1], [5, 6])
    mutate(b)
    with pytest.raises(sr.BatchError) as err:
        sr.summarize_batch(b)
    assert err.value.reason == reason


def test_inconsistent_summary_raises(batch: dict) -> None:
    rec = sr.summarize_batch(batch)
    bad = dict(rec, cluster_count=rec["cluster_count"][:-4])
    with pytest.raises(sr.BatchError, match="bad-summary"):
        sr.groups_from_summary(bad)
    with pytest.raises(sr.BatchError, match="bad-summary"):
        sr.groups_from_summary(dict(rec, quantile_levels=[0.5]))


def test_default_is_the_compact_log16_encoding(batch: dict) -> None:
    codec = Codec()
    rec = sr.summarize_batch(batch)
    assert DEFAULT is COMPACT and rec["method"] == "kde-q7l"
    c, n_levels = len(rec["cluster_count"]) // 4, len(rec["quantile_levels"])
    assert len(rec["cluster_quantiles_ns"]) == 4 * c  # float32 medians only
    assert len(rec["cluster_log_offsets"]) == 2 * c * (n_levels - 1)  # int16 offsets
    gk, _gs, gc, cc, q, levels = sr.summary_columns(rec)
    assert gk.size == gc.size and cc.size == c
    assert (
        q.shape == (c, n_levels)
        and q.dtype.kind == "f"
        and levels.tolist() == rec["quantile_levels"]
    )
    assert np.all(np.diff(q, axis=1) >= 0) and np.all(q > 0)
    # 7 levels cost what kde-q4i's 4 float32 levels cost (20 bytes per cluster)
    q4i = sr.summarize_batch(batch, config=ROBUST)
    c4 = len(q4i["cluster_count"]) // 4
    per_q7 = (len(rec["cluster_quantiles_ns"]) + len(rec["cluster_log_offsets"])) / c
    assert per_q7 == 4 + 2 * 6 and len(q4i["cluster_quantiles_ns"]) / c4 == 16
    old = sr.summarize_batch(batch, config=PAPER)
    assert old["cluster_log_offsets"] == b""
    back = codec.decode_as("kernel_summary", codec.encode("kernel_summary", rec))
    assert back["cluster_log_offsets"] == rec["cluster_log_offsets"]


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda r: r.update(cluster_log_offsets=r["cluster_log_offsets"][:-2]), "log16 needs"),
        (
            lambda r: r.update(cluster_log_offsets=r["cluster_log_offsets"] + b"\x00"),
            "multiple of 2",
        ),
        (lambda r: r.update(cluster_quantiles_ns=r["cluster_quantiles_ns"][:-4]), "medians"),
        (lambda r: r.update(cluster_quantiles_ns=r["cluster_quantiles_ns"] * 2), "medians"),
        (
            lambda r: r.update(quantile_levels=[0.05, 0.2, 0.35, 0.51, 0.7, 0.9, 0.99]),
            r"level 0\.5",
        ),
        (lambda r: r.update(quantile_levels=r["quantile_levels"][:-1]), "log16 needs"),
    ],
)
def test_bad_log16_columns_raise_bad_summary(batch: dict, mutate, match: str) -> None:
    rec = dict(sr.summarize_batch(batch, config=COMPACT))
    mutate(rec)
    with pytest.raises(sr.BatchError, match=match) as err:
        sr.groups_from_summary(rec)
    assert err.value.reason == "bad-summary"


def test_a_record_without_the_offsets_field_reads_as_float32(batch: dict) -> None:
    rec = sr.summarize_batch(batch, config=ROBUST)
    rec.pop("cluster_log_offsets")  # as an older producer's record decodes
    got = sr.groups_from_summary(rec)
    assert sum(s.n for s in got.values()) == 30_000
