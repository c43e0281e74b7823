"""L3 over a window of kernel summaries (with the real compression and reconstruction)."""

from __future__ import annotations

import numpy as np

from argus.detectors.l3_window import RankKernels, detect_window, merge_summaries
from argus.sim.layout import Layout
from argus.streams.kde import summarize_many

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
