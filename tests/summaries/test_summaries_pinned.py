"""The compressor's summaries, byte for byte, pinned to those of 240783d (before issue 21's
last CPU cuts in ``SummarizedBatches`` and the valley search): a digest of every record's
``encoded`` bytes and ``record`` dict over polls with and without rejected durations, large
stream ids, several dictionaries, chunked polls and every preset.

The floats come from numpy's ``log``/``exp`` on this machine's SIMD dispatch, so the digest
is checked only where numpy's version and dispatch are the ones it was taken on (the 2-core
VM the benches run on); elsewhere the test is skipped (``tests/summaries/test_batched.py``
checks the batched path against the KDE core on any machine).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from argus.schemas.codec import Codec
from argus.streams import synth
from argus.summaries import kde
from argus.summaries import summary_record as sr

#: sha256 of :func:`_digest`'s bytes at 240783d, and where it was taken
PINNED = {
    "digest": "922cc8d1faa5ec14bc3bced4f35c1257c67eeb91de2969f099158a6cdd4d73b8",
    "numpy": "2.4.6",
    "dispatch": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
}


def _polls() -> list[list[dict]]:
    out = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        mix = synth.default_mix(seed)
        recs = []
        for r in range(24):
            n = int(rng.choice([1, 5, 300, 3000, 9000]))
            b = synth.kernel_batch(
                rng, mix, job="pin", rank=r, window_id=7, n_events=n, window_start_ns=10**18
            )
            kind = (r + seed) % 6
            if kind == 1:  # rejected durations
                d = np.frombuffer(b["duration_ns"], "<i8").copy()
                d[rng.random(d.size) < 0.05] = -5
                b["duration_ns"] = d.tobytes()
            elif kind == 2:  # stream ids past 65,535
                s = np.frombuffer(b["stream"], "<u4").copy()
                s[::3] += 70_000
                b["stream"] = s.tobytes()
            elif kind == 3:  # a dictionary of its own, a name twice
                b["names"] = [*b["names"], b["names"][0]]
            elif kind == 4:  # every duration rejected
                b["duration_ns"] = np.zeros(n, "<i8").tobytes()
            recs.append(b)
        out.append(recs)
        # and the compressor's usual poll: every duration valid, CUDA's small stream ids
        out.append([r for i, r in enumerate(recs) if (i + seed) % 6 in (0, 3, 5)])
    return out


def _digest() -> str:
    codec = Codec()
    h = hashlib.sha256()
    configs = [
        kde.DEFAULT,
        kde.PAPER,
        kde.ROBUST,
        dataclasses.replace(kde.ROBUST, bandwidth_rule="silverman"),
        dataclasses.replace(kde.COMPACT, max_grid_points=64, max_clusters=3),
    ]
    for recs in _polls():
        for cfg in configs:
            done = sr.SummarizedBatches(recs, config=cfg)
            for i in range(len(recs)):
                ann = None if i % 3 == 0 else set()
                h.update(repr(sorted(done.record(i, announced=ann).items())).encode())
                h.update(done.encoded(i, codec, announced=ann)[0])
    return h.hexdigest()


def _dispatch() -> str:
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    found = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    return " ".join(found)


def test_summaries_are_the_pinned_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    if np.__version__ != PINNED["numpy"] or _dispatch() != PINNED["dispatch"]:
        pytest.skip("the digest is of another numpy build or SIMD dispatch")
    assert _digest() == PINNED["digest"]
    monkeypatch.setattr(sr, "CHUNK_EVENTS", 20_000)  # polls in chunks: the same bytes
    assert _digest() == PINNED["digest"]
