"""kernel_summary records -> L3 RankKernels (the object path of argus diagnose)."""

from __future__ import annotations

import numpy as np
import pytest

from argus.detectors.kernel_inputs import rank_kernels_from_summaries
from argus.errors import DetectorInputError
from argus.sim.layout import Layout
from argus.streams import synth
from argus.summaries.summary_record import KernelNames, summarize_batch

LAY = Layout(dp=2, tp=1, pp=1, ep=1)


def _records(windows: int = 2) -> list[dict]:
    """kernel_summary records of 2 ranks x ``windows`` windows; names announced once a rank."""
    mix = synth.default_mix(0)
    rng = np.random.default_rng(3)
    out = []
    for r in range(LAY.world):
        announced: set[int] = set()
        for w in range(windows):
            b = synth.kernel_batch(
                rng, mix, job="j", rank=r, window_id=w, n_events=400, coords=LAY.coords(r)
            )
            rec = summarize_batch(b, announced=announced)
            announced.update(int(n["id"]) for n in rec["kernel_names"])
            out.append(rec)
    return out


def test_one_merged_rank_kernels_a_rank_named_even_before_the_announcing_record() -> None:
    recs = _records()
    alone = rank_kernels_from_summaries(recs[1:2], KernelNames())  # rank 0's second window
    assert any(k.startswith("kernel#") for k, _ in alone[0].summaries)  # named by the first
    one = rank_kernels_from_summaries(recs[:1], KernelNames())
    rks = rank_kernels_from_summaries(list(reversed(recs)), KernelNames())
    assert [rk.rank for rk in rks] == [0, 1]
    rk0 = rks[0]
    assert rk0.coords == LAY.coords(0)
    assert rk0.summaries and not any(k.startswith("kernel#") for k, _ in rk0.summaries)
    assert set(rk0.stream_kinds.values()) <= {"compute", "comm", "p2p", "unknown"}
    # the two windows merged: a group's events are those of both
    book = KernelNames()
    book.update(recs[0])
    w0, w1 = one[0].summaries, rank_kernels_from_summaries(recs[1:2], book)[0].summaries
    assert set(rk0.summaries) == set(w0) | set(w1) and set(w0) & set(w1)
    for key, s in rk0.summaries.items():
        assert s.n == sum(w[key].n for w in (w0, w1) if key in w)


def test_columns_that_disagree_are_a_detector_input_error() -> None:
    rec = dict(_records(windows=1)[0])
    rec["group_kernel"] = rec["group_kernel"][:-1]
    with pytest.raises(DetectorInputError, match="kernel_summary j/0"):
        rank_kernels_from_summaries([rec], KernelNames())
