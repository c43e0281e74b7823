"""Small groups (3-4 ranks) are judged over the long L2 window (``l2_small_window_steps``,
:mod:`argus.detectors.l2_small`): a 4-rank job on a loaded host (+-50 % per-step noise
on every rank) whose rank 2 runs its ``mlp`` 2.5x from step 20. Over 4-step windows L2
rarely names it (``min_effect`` asks 2.5 per-step sigmas of 4 steps); over 16 it names it in
most windows, a noise-only job names no one, and a restart finds the same."""

from __future__ import annotations

from typing import Any

import numpy as np

from argus.detectors import l2_small
from argus.detectors.config import L2Config
from argus.streams.memory import run_engine
from argus.streams.pipeline_config import PipelineConfig

STEP_NS = 100_000_000


def _job(slow: float, seed: int, steps: int = 80, world: int = 4) -> list[dict[str, Any]]:
    """Step records of a ``world``-rank DP job, every phase log-normal (sigma 0.4) per rank
    and step, rank 2's ``mlp`` ``slow``x from step 20."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(steps):
        t0 = 1_700_000_000_000_000_000 + s * 2 * STEP_NS
        for r in range(world):
            fwd = 30e6 * np.exp(rng.normal(0, 0.4))
            mlp = 15e6 * np.exp(rng.normal(0, 0.4)) * (slow if r == 2 and s >= 20 else 1.0)
            bwd = 45e6 * np.exp(rng.normal(0, 0.4))
            own = fwd + mlp + bwd
            phases = [
                ("forward", "compute", fwd + mlp),
                ("mlp", "compute", mlp),
                ("backward", "compute", bwd),
                ("dp_allreduce", "comm", 5e6 + 2 * STEP_NS - own - 20e6),
            ]
            out.append(
                {
                    "job": "small",
                    "rank": r,
                    "step": s,
                    "start_ns": t0,
                    "end_ns": t0 + 2 * STEP_NS,
                    "host": "h0",
                    "coords": {f"{d}_{k}": 0 for d in ("tp", "pp", "ep", "cp") for k in ("rank",)}
                    | {f"{d}_size": 1 for d in ("tp", "pp", "ep", "cp")}
                    | {"dp_rank": r, "dp_size": world},
                    "phases": [
                        {
                            "name": n,
                            "stream_kind": k,
                            "start_ns": t0,
                            "duration_ns": int(max(d, 1e5)),
                            "timer": "cpu",
                        }
                        for n, k, d in phases
                    ],
                    "collector": {"kernels": False},
                }
            )
    return out


def _named(res: Any) -> dict[int, int]:
    """Rank -> L2 straggler evaluations that named it in ``mlp`` or ``forward``."""
    out: dict[int, int] = {}
    for a in res.anomalies:
        if a["level"] == "L2" and a["kind"] == "straggler" and a["phase"] in ("mlp", "forward"):
            for r in a["ranks"]:
                out[r] = out.get(r, 0) + 1
    return out


def test_the_gate_is_scaled_to_the_same_standard_error() -> None:
    cfg = L2Config()
    assert l2_small.small_config(cfg, 4, 4) is cfg
    assert l2_small.small_config(cfg, 16, 4).min_effect == cfg.min_effect / 2


def test_a_small_groups_slow_rank_is_named_over_the_long_window() -> None:
    long_, short = PipelineConfig(), PipelineConfig(l2_small_window_steps=4)
    hits_long = hits_short = 0
    for seed in range(3):
        steps = _job(2.5, seed)
        by_long, by_short = (
            _named(run_engine(steps, pcfg=long_)),
            _named(run_engine(steps, pcfg=short)),
        )
        assert set(by_long) <= {2}, by_long  # no healthy rank
        hits_long += by_long.get(2, 0)
        hits_short += by_short.get(2, 0)
    assert hits_long >= 2 * max(hits_short, 10), (hits_long, hits_short)


def test_noise_alone_names_no_rank_and_a_restart_finds_the_same() -> None:
    for seed in range(3):
        steps = _job(1.0, 10 + seed)
        once = run_engine(steps)
        assert not [a for a in once.anomalies if a["level"] == "L2" and a["kind"] == "straggler"]
    steps = _job(2.5, 7)
    pcfg = PipelineConfig(steps_block_ranks=2)  # the group spans two blocks: the job tier
    once = run_engine(steps, pcfg=pcfg)
    again = run_engine(steps, pcfg=pcfg, restart_every=7)
    assert _named(once).get(2, 0) > 0
    assert sorted(a["id"] for a in again.anomalies) == sorted(a["id"] for a in once.anomalies)
