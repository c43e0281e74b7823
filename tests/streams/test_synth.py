"""argus.streams.synth: reproducible, realistic rank-windows with slowdown injection."""

from __future__ import annotations

import numpy as np
import pytest

from argus.schemas.arrays import unpack
from argus.schemas.codec import Codec
from argus.streams import synth


@pytest.fixture(scope="module")
def mix() -> synth.Mix:
    return synth.default_mix(0)


def test_default_mix_shape(mix: synth.Mix) -> None:
    assert 140 <= mix.n_groups <= 170
    kinds = set(mix.kinds().tolist())
    assert kinds == set(synth.KINDS)
    classes = {g.kclass for g in mix.groups}
    assert {"gemm", "attention", "norm", "elementwise", "nccl", "moe"} <= classes
    nccl_streams = {g.stream for g in mix.groups if g.kclass == "nccl"}
    compute_streams = {g.stream for g in mix.groups if g.kclass == "gemm"}
    assert nccl_streams.isdisjoint(compute_streams)  # collectives on their own streams
    assert len({(g.name, g.stream) for g in mix.groups}) == mix.n_groups
    assert synth.default_mix(0).names == mix.names  # reproducible
    assert synth.default_mix(1).groups != mix.groups


def test_rank_window_is_reproducible_and_typed(mix: synth.Mix) -> None:
    a = synth.rank_window(np.random.default_rng(5), mix, n_events=30_000)
    b = synth.rank_window(np.random.default_rng(5), mix, n_events=30_000)
    names, idx, stream, dur = a
    assert (
        len(dur) == 30_000
        and dur.dtype == np.int64
        and idx.dtype == np.uint32
        and stream.dtype == np.uint32
    )
    assert int(dur.min()) >= 1 and int(idx.max()) < len(names)
    for x, y in zip(a[1:], b[1:], strict=True):
        np.testing.assert_array_equal(x, y)
    groups = np.unique(idx.astype(np.int64) * 100 + stream)
    assert groups.size >= 140
    # multimodal: durations span from ~µs elementwise to ms collectives
    assert np.percentile(dur, 1) < 5_000 and np.percentile(dur, 99.9) > 1_000_000


def test_slowdown_scales_only_the_chosen_kernels(mix: synth.Mix) -> None:
    base = synth.rank_window(np.random.default_rng(9), mix, n_events=20_000)
    slow = synth.rank_window(np.random.default_rng(9), mix, n_events=20_000, slowdown={"gemm": 2.0})
    names = base[0]
    gemm = np.array([any(g.name == n and g.kclass == "gemm" for g in mix.groups) for n in names])
    hit = gemm[base[1]]
    ratio = slow[3] / base[3]
    np.testing.assert_allclose(ratio[hit], 2.0, rtol=1e-3)
    np.testing.assert_array_equal(slow[3][~hit], base[3][~hit])
    star = synth.rank_window(
        np.random.default_rng(9), mix, n_events=20_000, slowdown={"*": 1.5, "gemm": 1.0}
    )
    np.testing.assert_array_equal(star[3][hit], base[3][hit])  # most specific key wins
    np.testing.assert_allclose((star[3] / base[3])[~hit], 1.5, rtol=1e-2)


@pytest.mark.parametrize("bad", [{"gpu": 2.0}, {"gemm": 0.0}, {"*": float("nan")}])
def test_bad_slowdown_raises(mix: synth.Mix, bad: dict) -> None:
    with pytest.raises(synth.SynthError):
        synth.rank_window(np.random.default_rng(0), mix, n_events=10, slowdown=bad)


def test_non_stationary_kinds_behave(mix: synth.Mix) -> None:
    rng = np.random.default_rng(3)
    _names, idx, stream, dur = synth.rank_window(rng, mix, n_events=200_000)
    key = idx.astype(np.int64) * 100 + stream
    for g in mix.groups:
        gi = mix.arrays["name_idx"][mix.groups.index(g)] * 100 + g.stream
        d = dur[key == gi].astype(float)
        if g.kind == "drift":  # later events are slower
            half = d.size // 2
            assert np.median(d[half:]) > np.median(d[:half]) * 1.05
        if g.kind == "jit":  # rare ~40x spikes above the bulk
            assert np.sum(d > 20 * np.median(d)) >= 1


def test_kernel_batch_record_encodes_and_streams_do_not_overlap(mix: synth.Mix) -> None:
    rec = synth.kernel_batch(
        np.random.default_rng(1),
        mix,
        job="j",
        rank=3,
        window_id=7,
        n_events=3000,
        window_start_ns=10**18,
    )
    codec = Codec()
    back = codec.decode_as("kernel_batch", codec.encode("kernel_batch", rec))
    start = unpack(back["start_ns"], "int64")
    dur = unpack(back["duration_ns"], "int64")
    stream = unpack(back["stream"], "uint32")
    assert start.min() >= 10**18 and back["window_end_ns"] == int((start + dur).max())
    for s in np.unique(stream):
        o = np.argsort(start[stream == s])
        st, du = start[stream == s][o], dur[stream == s][o]
        assert np.all(st[1:] >= st[:-1] + du[:-1])  # one kernel at a time per stream
    assert {s["id"] for s in back["streams"]} == set(np.unique(stream).tolist())


def test_lay_out_starts_is_sequential_per_stream() -> None:
    st = synth.lay_out_starts(
        np.array([1, 2, 1, 1, 2]), np.array([10, 5, 20, 30, 7]), window_start_ns=100, gap_ns=1
    )
    assert st.tolist() == [100, 100, 111, 132, 106]


def test_mix_rejects_duplicate_groups() -> None:
    g = synth.GroupSpec("k", 7, "gemm", "stationary", 1.0, ((1.0, 1000.0, 0.1),))
    with pytest.raises(synth.SynthError, match="twice"):
        synth.Mix((g, g))
    with pytest.raises(synth.SynthError, match="kind"):
        synth.Mix((synth.GroupSpec("k", 7, "gemm", "weird", 1.0, ((1.0, 1000.0, 0.1),)),))
