"""Synthetic PyTorch profiler (Kineto) traces of a data-parallel GPU job, one file per rank.

For tests and ``bench/bench_ingest.py``: the files have what :mod:`argus.ingest.kineto` reads
from real traces (``ProfilerStep#N`` and ``DistributedDataParallel.forward`` /
``Optimizer.step#AdamW.step`` annotations, ``autograd::engine::evaluate_function`` ops,
``cudaLaunchKernel`` runtime events with ``args.correlation``, GEMM/elementwise kernels on
stream 7 and an NCCL all-reduce kernel on stream 20), laid out like a synchronous DDP step:
every rank starts a step together, the all-reduce ends when the slowest rank reaches it, so
a slow rank's forward (``slow_rank``, ``slow_factor``) makes the others wait in the all-reduce.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["write_synthetic_job"]

BASE_NS = 1_780_000_000_000_000_000
_GEMM = "ampere_sgemm_128x64_tn"
_ELEM = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
_BGEMM = "ampere_sgemm_64x64_nt"
_NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def write_synthetic_job(
    out_dir: str | Path,
    *,
    ranks: int = 8,
    steps: int = 20,
    first_step: int = 10,
    kernels_per_step: int = 64,
    slow_rank: int | None = None,
    slow_factor: float = 1.5,
    seed: int = 0,
    gz: bool = True,
    distributed_info: bool = True,
) -> list[Path]:
    """Write one trace file per rank; return their paths.

    Parameters
    ----------
    out_dir : path
        Created if missing; files are ``rank-<r>.pt.trace.json[.gz]``.
    ranks, steps, first_step : int
        World size; profiled steps, numbered from ``first_step``.
    kernels_per_step : int
        GPU kernels per rank and step (half forward, half backward) besides the all-reduce.
    slow_rank : int, optional
        This rank's forward (CPU span and its kernels) runs ``slow_factor`` times longer.
    gz : bool
        gzip the files (``.json.gz``) as ``tensorboard_trace_handler(use_gzip=True)``.
    distributed_info : bool
        Write ``distributedInfo`` (else the rank is only in the file name).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    fwd_ms, bwd_ms, ar_ms, opt_ms = 30.0, 60.0, 8.0, 4.0
    nk = max(2, kernels_per_step) // 2
    events: list[list[dict[str, Any]]] = [[] for _ in range(ranks)]
    corr = [0] * ranks
    t_us = 1_000_000.0  # µs after BASE_NS
    for i in range(steps):
        step = first_step + i
        jit = rng.normal(1.0, 0.02, size=(ranks, 3)).clip(0.9, 1.1)
        fwd = fwd_ms * jit[:, 0]
        if slow_rank is not None:
            fwd[slow_rank] *= slow_factor
        bwd = bwd_ms * jit[:, 1]
        reach = fwd + bwd
        ar_end = float(reach.max()) + ar_ms
        for r in range(ranks):
            ev = events[r]
            t0 = t_us + float(rng.uniform(0, 50))
            end = t_us + (ar_end + opt_ms * float(jit[r, 2])) * 1000.0
            ev.append(_x("user_annotation", f"ProfilerStep#{step}", t0, end - t0))
            f0, f1 = t0 + 20.0, t0 + fwd[r] * 1000.0
            ev.append(_x("user_annotation", "DistributedDataParallel.forward", f0, f1 - f0))
            b0, b1 = f1, t0 + reach[r] * 1000.0
            for j in range(4):
                a = b0 + (b1 - b0) * j / 4
                ev.append(
                    _x(
                        "cpu_op",
                        "autograd::engine::evaluate_function: MmBackward0",
                        a,
                        (b1 - b0) / 5,
                    )
                )
            for a, b, names in ((f0, f1, (_GEMM, _ELEM)), (b0, b1, (_BGEMM, _ELEM))):
                width = (b - a) / nk
                for j in range(nk):
                    c = corr[r] = corr[r] + 1
                    launch = a + j * width
                    ev.append(_x("cuda_runtime", "cudaLaunchKernel", launch, 3.0, corr=c, tid=1))
                    name = names[j % 2]
                    d = width * (0.7 if name != _ELEM else 0.2) * float(rng.uniform(0.95, 1.05))
                    ev.append(_kernel(name, launch + 5.0, d, 7, c, r))
            c = corr[r] = corr[r] + 1
            ev.append(_x("cuda_runtime", "cudaLaunchKernel", b1, 3.0, corr=c, tid=1))
            ev.append(_kernel(_NCCL, b1 + 5.0, t_us + ar_end * 1000.0 - b1 - 5.0, 20, c, r))
            o0 = t_us + ar_end * 1000.0
            ev.append(_x("user_annotation", "Optimizer.step#AdamW.step", o0, end - o0 - 10.0))
        t_us += (ar_end + opt_ms * 1.1) * 1000.0 + 500.0
    paths = []
    for r in range(ranks):
        doc: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 (synthetic)"}],
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": BASE_NS,
            "traceEvents": events[r],
        }
        if distributed_info:
            doc["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": ranks}
        p = out / f"rank-{r}.pt.trace.json{'.gz' if gz else ''}"
        data = json.dumps(doc).encode()
        p.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
        paths.append(p)
    return paths


def _x(
    cat: str, name: str, ts: float, dur: float, *, corr: int = -1, tid: int = 0
) -> dict[str, Any]:
    e: dict[str, Any] = {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": round(ts, 3),
        "dur": round(dur, 3),
    }
    if corr >= 0:
        e["args"] = {"correlation": corr}
    return e


def _kernel(name: str, ts: float, dur: float, stream: int, corr: int, rank: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": rank,
        "tid": stream,
        "ts": round(ts, 3),
        "dur": round(max(dur, 1.0), 3),
        "args": {"device": rank, "stream": stream, "correlation": corr},
    }
