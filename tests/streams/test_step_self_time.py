"""The engine judges compute phases on their self time from each phase's own start.

The block tier keeps a rank's step until the step closes; it once rebuilt the records with
every phase starting at the step's start, so every p2p wait "overlapped" every compute phase
and the compute self time was 0 in any job with pipeline receives: L2 never named a slow GPU
of a pipeline job (``argus.sim`` ``mega-gemm-gpu``), only its TP peers late into
``pp_recv_bwd``.
"""

from __future__ import annotations

from typing import Any

from argus.streams.memory import replay_stream

T0 = 1_780_000_000_000_000_000
MS = 1_000_000


def _record(rank: int, step: int, forward_ms: float) -> dict[str, Any]:
    """Two pipeline stages x 8 DP replicas: a 200 ms receive wait, then the forward."""
    pp, dp = divmod(rank, 8)
    a = T0 + step * 400 * MS
    fwd = int(forward_ms * MS)
    return {
        "job": "selftime",
        "rank": rank,
        "step": step,
        "start_ns": a,
        "end_ns": a + 200 * MS + fwd + 10 * MS,
        "host": f"node{rank // 8}",
        "coords": {
            "tp_rank": 0,
            "tp_size": 1,
            "cp_rank": 0,
            "cp_size": 1,
            "ep_rank": 0,
            "ep_size": 1,
            "dp_rank": dp,
            "dp_size": 8,
            "pp_rank": pp,
            "pp_size": 2,
        },
        "phases": [
            {"name": "pp_recv_fwd", "stream_kind": "p2p", "start_ns": a, "duration_ns": 200 * MS},
            {
                "name": "forward",
                "stream_kind": "compute",
                "start_ns": a + 200 * MS,
                "duration_ns": fwd,
            },
        ],
    }


def test_a_slow_gpu_of_a_pipeline_job_is_named_in_its_compute_phase() -> None:
    recs = [
        _record(r, s, (150.0 if r == 3 else 100.0) * (1 + 0.01 * ((r * 7 + s * 3) % 5)))
        for s in range(8)
        for r in range(16)
    ]
    out = replay_stream(recs)
    named = {(tuple(f["ranks"]), f["phase"]) for f in out.findings if f["level"] == "L2"}
    assert ((3,), "forward") in named
    assert {r for rs, _ in named for r in rs} == {3}
