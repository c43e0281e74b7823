"""False group-level L3 pages of a healthy job (issue 9, soak run 3), offline and without Kafka.

Reproduces the soak's kernel workload: a pool of 257 independent rank-windows of the
150-kernel synthetic mix (3,000 events each, compressed once by the compressor's
``summarize_batch``); every rank draws one pool window at random at every step. Every block
of ``--block`` steps (the L3 block = one funnel window) goes through
:func:`argus.detectors.l3_window.detect_window` for the whole job and then
:func:`argus.detectors.funnel.step`. Reports ``group_divergence`` findings per block, the
(group, kernel) pairs flagged in >= 3 consecutive blocks, and the funnel's group-level
triggers (what paged in the soak), and the ``kernel_divergence`` findings (ranks named) per
block: the per-rank comparison's false findings (issue 9 follow-up, ``l3.rank_alpha``).

    .venv/bin/python bench/bench_l3_groups.py --ranks 1024 --blocks 12
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from argus.detectors.config import L3Config
from argus.detectors.findings import Finding
from argus.detectors.funnel import FunnelState, step
from argus.detectors.l3_window import detect_window, table_from_summaries
from argus.sim.layout import Layout
from argus.streams import synth
from argus.summaries.summary_record import KernelNames, summarize_batch

POOL = 257  # as bench/soak.py


def pool_summaries(n_events: int, seed: int = 0, pool: int = POOL) -> list[dict[str, Any]]:
    """``pool`` compressed rank-windows (kernel_summary records of rank 0, window 0)."""
    mix = synth.default_mix(0)
    rng = np.random.default_rng(seed)
    return [
        summarize_batch(
            synth.kernel_batch(rng, mix, job="j", rank=0, window_id=0, n_events=n_events)
        )
        for _ in range(pool)
    ]


def blocks(
    lay: Layout, pool: list[dict[str, Any]], n_blocks: int, block: int, seed: int = 1
) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """Per block: the kernel_summary records of every rank x step (random pool draws)."""
    rng = np.random.default_rng(seed)
    coords = [lay.coords(r) for r in range(lay.world)]
    for b in range(n_blocks):
        recs = []
        for s in range(b * block, (b + 1) * block):
            picks = rng.integers(0, len(pool), lay.world)
            for r in range(lay.world):
                recs.append(dict(pool[picks[r]], rank=r, coords=coords[r], window_id=s))
        yield b, recs


def run(
    lay: Layout,
    pool: list[dict[str, Any]],
    n_blocks: int,
    block: int,
    cfg: L3Config | None = None,
    seed: int = 1,
) -> dict[str, Any]:
    """Findings, persistent (group, kernel) pairs and funnel group triggers of a healthy run."""
    state = FunnelState()
    names = KernelNames()
    per_block: list[list[Finding]] = []
    triggers: list[dict[str, Any]] = []
    t_detect = 0.0
    for b, recs in blocks(lay, pool, n_blocks, block, seed):
        names.update_many(recs)
        t0 = time.perf_counter()
        found = detect_window(
            "j",
            table_from_summaries(recs, names),
            window=(b * block, (b + 1) * block - 1, b, b + 1),
            cfg=cfg,
        )
        t_detect += time.perf_counter() - t0
        per_block.append(found)
        state, out = step(state, found)
        triggers += [a for a in out.alerts if a["action"] == "trigger"]
    groups = [[f for f in fs if f.kind == "group_divergence"] for fs in per_block]
    keys = [{(f.group_kind, f.group_id, f.kernel) for f in g} for g in groups]
    persist = {k for i in range(len(keys) - 2) for k in keys[i] & keys[i + 1] & keys[i + 2]}
    return {
        "group_findings": [len(g) for g in groups],
        "by_kind": Counter(f.group_kind for g in groups for f in g),
        "kernels": Counter(f.kernel for g in groups for f in g),
        "persist3": sorted(persist, key=str),
        "rank_findings": [len(fs) - len(g) for fs, g in zip(per_block, groups, strict=True)],
        "rank_named": [
            sum(len(f.ranks) for f in fs if f.kind == "kernel_divergence") for fs in per_block
        ],
        "group_triggers": [a for a in triggers if not a.get("ranks")],
        "triggers": len(triggers),
        "detect_s": t_detect / max(n_blocks, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--blocks", type=int, default=12, help="L3 blocks (funnel windows)")
    ap.add_argument("--block", type=int, default=10, help="steps per L3 block")
    ap.add_argument("--events", type=int, default=3000, help="kernel events per rank-step")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    lay = Layout.for_ranks(a.ranks)
    t0 = time.perf_counter()
    pool = pool_summaries(a.events)
    print(
        f"{lay.world} ranks ({lay}); pool of {len(pool)} compressed in {time.perf_counter() - t0:.1f} s"
    )
    res = run(lay, pool, a.blocks, a.block, seed=a.seed)
    n = sum(res["group_findings"])
    print(f"  group_divergence findings per block: {res['group_findings']} (total {n})")
    print(
        f"  by partition kind: {dict(res['by_kind'])}; top kernels: {[(k[:60], n) for k, n in res['kernels'].most_common(3)]}"
    )
    print(f"  (group, kernel) flagged in 3 consecutive blocks: {len(res['persist3'])}")
    for k in res["persist3"][:10]:
        print(f"    {k}")
    rf = res["rank_findings"]
    print(
        f"  kernel_divergence findings per block: {rf} (total {sum(rf)}, "
        f"{sum(rf) / max(len(rf), 1):.1f} per block); (rank, kernel) pairs named per block: "
        f"{res['rank_named']}"
    )
    print(
        f"  funnel triggers: {res['triggers']}, of them group-level (no rank named): "
        f"{len(res['group_triggers'])}"
    )
    for t in res["group_triggers"][:10]:
        print(f"    {t.get('summary')}")
    print(f"  detect_window: {res['detect_s']:.2f} s per block")


if __name__ == "__main__":
    main()
