"""The steps path against its floor, side by side in one process (issue 21).

* **project**: each Avro-framed step record decoded (:class:`argus.schemas.codec.Codec`),
  routed (:func:`argus.streams.roles.steps.route_step`) and folded into the very roles
  (:class:`StepBlocks` per rank block, :class:`JobSteps` per job, L1 + L2 on), as
  ``bench_steps_tiers.py`` drives them; CPU per record, and the job tier's CPU per step.
* **floor**: the same records decoded the same way, their phases written straight into one
  ``(ranks, steps, phases)`` array (lookup tables from the first step's coords), self time and
  the L2 screen (:func:`argus.detectors.l2_batch.screen`) vectorised over every group of a
  kind once per step over the last ``l2_window_steps`` steps, ``l2.detect`` on the groups the
  screen keeps: no per-record objects, no tiers, no state. Its (rank, phase) pairs named by
  L2 stragglers are compared with the project's.
* **job-tier floor**: the part of the floor's per-step work that the job tier does in the
  project, the L2 of the groups whose ranks span more than one block (their window cells
  gathered, screened, ``l2.detect`` on the kept ones), per step. It leaves out what the job
  tier does besides (L1 of the job's step time, the transfer stats, joining the blocks'
  partial groups), so it is a lower bound of the job tier's own work.

Project and floor alternate per repetition; medians are printed with the ratio. The heap
is frozen after the setup and the collector's thresholds set
(:func:`argus.streams.app.freeze_heap`, as :class:`argus.streams.app.Worker` does once
started; ``--no-freeze``: neither), so the cyclic collector walks what the runs allocate,
not the simulated job and the modules, as often as in a worker.

    .venv/bin/python bench/bench_steps_floor.py --ranks 1024 --steps 12 --reps 3
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.detectors import l2  # noqa: E402
from argus.detectors.config import DetectorsConfig  # noqa: E402
from argus.detectors.l2_batch import screen  # noqa: E402
from argus.routing import Routing  # noqa: E402
from argus.schemas.codec import Codec  # noqa: E402
from argus.sim.simulate import SimRun, simulate  # noqa: E402
from argus.streams.app import freeze_heap  # noqa: E402
from argus.streams.memory import _MemoryCtx  # noqa: E402
from argus.streams.pipeline_config import PipelineConfig  # noqa: E402
from argus.streams.roles.steps import JobSteps, StepBlocks, route_step  # noqa: E402


async def _project(blobs: list[bytes], block_ranks: int, steps: int) -> dict[str, Any]:
    codec = Codec()
    ctx = _MemoryCtx(DetectorsConfig(), PipelineConfig(steps_block_ranks=block_ranks))
    job_tier = JobSteps(ctx)
    job_tier.levels.update({"l1", "l2"})
    blocks = StepBlocks(ctx, job_tier.levels)
    bstate: dict[str, Any] = {}
    jstate: dict[str, Any] = {}
    t_all = t_job = 0.0
    for blob in blobs:
        c0 = time.process_time()
        _name, rec = codec.decode(blob, "step_record")
        for key, item in route_step(rec, block_ranks):
            await blocks.add(key, bstate.setdefault(key, blocks.new(key)), item, 0.0)
        c1 = time.process_time()
        t_all += c1 - c0
        while ctx.queue:
            topic, job, msg = ctx.queue.popleft()
            if topic != "steps-by-job":
                continue
            c0 = time.process_time()
            st = jstate.setdefault(job, job_tier.new(job))
            for d in msg["items"]:
                await job_tier.add(job, st, d, 0.0)
            dt = time.process_time() - c0
            t_job += dt
            t_all += dt
    pairs = {
        (r, a["phase"])
        for a in ctx.anomalies
        if a.get("level") == "L2" and a.get("kind") == "straggler"
        for r in a["ranks"]
    }
    return {
        "us_per_record": 1e6 * t_all / len(blobs),
        "job_ms_per_step": 1e3 * t_job / steps,
        "pairs": pairs,
    }


class _Floor:
    """Decode + array fill + vectorised L2, no per-record objects (module doc)."""

    def __init__(
        self, first_step: list[dict[str, Any]], width: int, steps: int, block_ranks: int
    ) -> None:
        routing = Routing.default()
        self.cfg = DetectorsConfig().l2
        self.width = width
        recs = sorted(first_step, key=lambda r: r["rank"])
        self.row = {int(r["rank"]): i for i, r in enumerate(recs)}
        self.ranks = np.array([int(r["rank"]) for r in recs], dtype=np.int64)
        self.job = recs[0]["job"]
        ph = [(p["name"], p.get("stream_kind", "compute")) for p in recs[0]["phases"]]
        self.names = sorted({n for n, _ in ph})
        self.col = {n: i for i, n in enumerate(self.names)}
        sk = dict(reversed(ph))
        self.sk = [sk[n] for n in self.names]
        n, p = len(recs), len(self.names)
        self.d = np.full((n, steps, p), np.nan)
        self.start = np.zeros((n, steps, p))
        self.it = np.full((n, steps), np.nan)
        self.a = np.zeros((n, steps), dtype=np.int64)
        self.b = np.zeros((n, steps), dtype=np.int64)
        # per kind: its phase columns and its groups' member rows (G, R), from the coords
        # and whether each kind's groups span blocks (judged by the job tier in the project)
        self.kinds: list[tuple[str, list[str], np.ndarray, np.ndarray, bool]] = []
        by_kind: dict[str, list[int]] = {}
        for name, s in ph:
            k = routing.kind_of(name, s)
            if self.col[name] not in by_kind.setdefault(k, []):
                by_kind[k].append(self.col[name])
        for k, cols in sorted(by_kind.items()):
            cols.sort()
            groups: dict[str, list[int]] = {}
            for r in recs:
                groups.setdefault(routing.group_for_kind(r["coords"], k), []).append(
                    self.row[int(r["rank"])]
                )
            gids = sorted(groups)
            sizes = {len(v) for v in groups.values()}
            assert len(sizes) == 1, "the floor assumes full, equal groups"
            members = np.array([groups[g] for g in gids])
            blocks = self.ranks[members] // block_ranks  # (G, R)
            spans = (blocks.min(axis=1) != blocks.max(axis=1)).tolist()
            assert len(set(spans)) == 1, "the floor assumes a kind's groups all span or none"
            self.kinds.append((k, gids, members, np.array(cols, dtype=np.int64), spans[0]))
        self.comp = np.array([s == "compute" for s in self.sk])
        self.p2p = np.array([s == "p2p" for s in self.sk])
        self.step_i: dict[int, int] = {}
        self.pairs: set[tuple[int, str]] = set()
        self.t_job = 0.0  # CPU s in the L2 of the groups that span blocks

    def add(self, rec: dict[str, Any]) -> None:
        i = self.row[rec["rank"]]
        j = self.step_i.setdefault(rec["step"], len(self.step_i))
        a = rec["start_ns"]
        d, s = self.d[i, j], self.start[i, j]
        col = self.col
        for p in rec["phases"]:
            c = col[p["name"]]
            d[c] = p["duration_ns"]
            s[c] = p.get("start_ns", a)
        self.it[i, j] = rec["end_ns"] - a
        self.a[i, j], self.b[i, j] = a, rec["end_ns"]

    def close(self, step: int) -> None:
        j = self.step_i[step]
        d, s = self.d[:, j], self.start[:, j]  # (N, P)
        if self.p2p.any():  # self time: p2p time nested inside each compute phase
            e = s + d
            qs, qe = s[:, self.p2p], e[:, self.p2p]
            ov = np.clip(
                np.minimum(e[:, :, None], qe[:, None, :])
                - np.maximum(s[:, :, None], qs[:, None, :]),
                0,
                None,
            ).sum(axis=2)
            d[:, self.comp] -= np.minimum(ov, d)[:, self.comp]
        lo = max(0, j + 1 - self.width)
        for k, gids, members, cols, spans in self.kinds:
            c0 = time.process_time()
            dk = self.d[:, lo : j + 1][..., cols][members]  # (G, R, W, Pk)
            it = self.it[:, lo : j + 1][members]
            sks = [self.sk[c] for c in cols]
            for g in np.flatnonzero(screen(dk, it, sks, self.cfg)).tolist():
                rows = members[g]
                w = l2.GroupWindow(
                    self.job,
                    k,
                    gids[g],
                    self.ranks[rows],
                    np.arange(lo, j + 1),
                    tuple(self.names[c] for c in cols),
                    tuple(sks),
                    dk[g],
                    int(self.a[rows, lo : j + 1].min()),
                    int(self.b[rows, lo : j + 1].max()),
                    it[g],
                )
                for f in l2.detect(w, self.cfg):
                    if f.kind == "straggler" and f.phase:
                        self.pairs.update((r, f.phase) for r in f.ranks)
            if spans:
                self.t_job += time.process_time() - c0


def _floor(
    blobs: list[bytes], world: int, steps: int, width: int, block_ranks: int
) -> dict[str, Any]:
    codec = Codec()
    t = 0.0
    fl: _Floor | None = None
    first: list[dict[str, Any]] = []
    n = 0
    for blob in blobs:
        c0 = time.process_time()
        _name, rec = codec.decode(blob, "step_record")
        if fl is None:
            first.append(rec)
            if len(first) == world:  # the topology: lookup tables, once
                fl = _Floor(first, width, steps, block_ranks)
                for r in first:
                    fl.add(r)
                fl.close(first[0]["step"])
        else:
            fl.add(rec)
            n += 1
            if n % world == 0:
                fl.close(rec["step"])
        t += time.process_time() - c0
    assert fl is not None
    return {
        "us_per_record": 1e6 * t / len(blobs),
        "job_ms_per_step": 1e3 * fl.t_job / steps,
        "pairs": fl.pairs,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--block-ranks", type=int, default=PipelineConfig.steps_block_ranks)
    ap.add_argument("--scenario", default="compute-straggler")
    ap.add_argument("--no-freeze", action="store_true", help="leave the heap unfrozen")
    a = ap.parse_args()
    run = SimRun.make(a.scenario, ranks=a.ranks, steps=a.steps, seed=1, kernels=False)
    recs = [r for topic, _k, r in simulate(run) if topic == "raw.steps"]
    recs.sort(key=lambda r: (r["step"], r["rank"]))
    codec = Codec()
    blobs = [codec.encode("step_record", r) for r in recs]
    width = PipelineConfig().l2_window_steps
    if not a.no_freeze:
        freeze_heap()  # as the worker, once started
    proj: list[dict[str, Any]] = []
    flo: list[dict[str, Any]] = []
    for _ in range(a.reps):
        proj.append(asyncio.run(_project(blobs, a.block_ranks, a.steps)))
        flo.append(_floor(blobs, a.ranks, a.steps, width, a.block_ranks))
    p_us = statistics.median(m["us_per_record"] for m in proj)
    j_ms = statistics.median(m["job_ms_per_step"] for m in proj)
    f_us = statistics.median(m["us_per_record"] for m in flo)
    fj_ms = statistics.median(m["job_ms_per_step"] for m in flo)
    pp, fp = proj[0]["pairs"], flo[0]["pairs"]
    print(
        f"ranks {a.ranks} block {a.block_ranks} steps {a.steps} reps {a.reps} "
        f"load {os.getloadavg()[0]:.2f} frozen {gc.get_freeze_count()} gc {gc.get_threshold()}\n"
        f"project {p_us:.0f} us/record  floor {f_us:.1f} us/record  ratio {p_us / f_us:.1f}x\n"
        f"job tier {j_ms:.1f} ms/step  its floor {fj_ms:.1f} ms/step"
        f"  ratio {j_ms / fj_ms if fj_ms else float('nan'):.1f}x\n"
        f"L2 straggler (rank, phase) pairs: project {len(pp)}, floor {len(fp)}, both {len(pp & fp)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
