"""Kernel events of a simulated step, derived from the phase timings (so they agree).

Each phase launches a fixed set of kernels per layer (GEMMs, attention, norms on the compute
stream; NCCL kernels on one stream per process group). A phase's kernel time is split over
its kernels by share; every layer has its own size factor (so one kernel name is
multimodal across layers) and every launch its own jitter (lognormal σ 6 %). NCCL kernels
last as long as the collective, wait included (an NCCL kernel spins until its peers
arrive). Host stalls (JIT) do not lengthen kernels.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from argus.schemas.arrays import pack

__all__ = ["KERNELS", "STREAMS", "kernel_batch_records"]

N_LAYERS = 4
LAYER_SIZE = np.array([1.35, 1.0, 1.0, 0.7])  # relative work per layer (multimodal names)

STREAMS: Mapping[int, tuple[str, str]] = {
    7: ("compute", "default compute"),
    13: ("comm", "nccl tp"),
    14: ("comm", "nccl ep"),
    15: ("comm", "nccl dp"),
    16: ("comm", "nccl edp"),
    17: ("p2p", "nccl pp"),
}

# phase -> [(kernel name, stream id, share of the phase's kernel time, launches per layer)]
KERNELS: Mapping[str, tuple[tuple[str, int, float, int], ...]] = {
    "self_attention": (
        ("flash_attn_fwd_kernel", 7, 0.55, 1),
        ("sm90_gemm_bf16_qkv", 7, 0.25, 1),
        ("rmsnorm_fwd_kernel", 7, 0.05, 1),
        ("rotary_emb_kernel", 7, 0.15, 1),
    ),
    "tp_allreduce": (("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 13, 1.0, 1),),
    "mlp": (
        ("sm90_gemm_bf16_fc1", 7, 0.45, 1),
        ("sm90_gemm_bf16_fc2", 7, 0.40, 1),
        ("swiglu_fwd_kernel", 7, 0.15, 1),
    ),
    "ep_alltoall": (("ncclDevKernel_SendRecv", 14, 1.0, 2),),
    "backward": (
        ("flash_attn_bwd_kernel", 7, 0.30, 1),
        ("sm90_gemm_bf16_dgrad", 7, 0.30, 2),
        ("sm90_gemm_bf16_wgrad", 7, 0.30, 2),
        ("rmsnorm_bwd_kernel", 7, 0.10, 1),
    ),
    "pp_p2p": (("ncclDevKernel_SendRecv", 17, 1.0, 1),),
    "expert_grad_sync": (("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", 16, 1.0, 1),),
    "dp_grad_sync": (("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 15, 1.0, 1),),
    "optimizer": (("multi_tensor_apply_adam_kernel", 7, 1.0, 1),),
}


def kernel_batch_records(
    rng: np.random.Generator,
    *,
    job: str,
    window_id: int,
    step_start_ns: int,
    window_end_ns: int,
    coords: list[dict[str, int]],
    hosts: list[str],
    start_ms: Mapping[str, np.ndarray],
    kernel_ms: Mapping[str, np.ndarray],
    extra_factor: Mapping[str, np.ndarray] | None = None,
) -> list[dict[str, object]]:
    """One ``kernel_batch`` record per rank for one step.

    Parameters
    ----------
    rng : numpy Generator
    job : str
    window_id : int
        The step number.
    step_start_ns, window_end_ns : int
        Event time of the step start and the window end, ns since epoch.
    coords, hosts : list, length R
    start_ms, kernel_ms : mapping phase -> (R,) array, ms
        Phase start offsets and kernel time (from :class:`~argus.sim.model.StepTimes`).
    extra_factor : mapping kernel name -> (R,) array, optional
        Kernel-only slowdowns.
    """
    n_ranks = len(coords)
    names: list[str] = []
    name_of: dict[str, int] = {}
    cols_name: list[np.ndarray] = []
    cols_stream: list[np.ndarray] = []
    cols_start: list[np.ndarray] = []
    cols_dur: list[np.ndarray] = []
    for phase, kernels in KERNELS.items():
        if phase not in kernel_ms:
            continue
        total = kernel_ms[phase]  # (R,)
        t0 = start_ms[phase]
        offset = np.zeros(n_ranks)
        launches = [(k, layer) for layer in range(N_LAYERS) for k in kernels for _ in range(k[3])]
        weight = np.array([k[2] / k[3] * LAYER_SIZE[layer] for k, layer in launches])
        weight = weight / weight.sum()
        for ((kname, stream, _share, _n), _layer), w in zip(launches, weight, strict=True):
            idx = name_of.setdefault(kname, len(names))
            if idx == len(names):
                names.append(kname)
            jitter = np.exp(rng.normal(0.0, 0.06, n_ranks))
            d = total * w * jitter
            if extra_factor and kname in extra_factor:
                d = d * extra_factor[kname]
            cols_name.append(np.full(n_ranks, idx))
            cols_stream.append(np.full(n_ranks, stream))
            cols_start.append(t0 + offset)
            cols_dur.append(d)
            offset = offset + d
    name_idx = np.stack(cols_name, axis=1)
    stream_col = np.stack(cols_stream, axis=1)
    start = (step_start_ns + np.stack(cols_start, axis=1) * 1e6).astype(np.int64)
    dur = np.maximum(np.stack(cols_dur, axis=1) * 1e6, 1.0).astype(np.int64)
    streams = [{"id": sid, "kind": kind, "label": label} for sid, (kind, label) in STREAMS.items()]
    out: list[dict[str, object]] = []
    for r in range(n_ranks):
        out.append(
            {
                "job": job,
                "rank": int(r),
                "window_id": int(window_id),
                "window_start_ns": int(step_start_ns),
                "window_end_ns": int(window_end_ns),
                "host": hosts[r],
                "coords": coords[r],
                "source": "simulator",
                "names": names,
                "name_idx": pack(name_idx[r], "uint32"),
                "stream": pack(stream_col[r], "uint32"),
                "start_ns": pack(start[r], "int64"),
                "duration_ns": pack(dur[r], "int64"),
                "streams": streams,
                "dropped": 0,
            }
        )
    return out
