"""A production-hard timing model: Megatron layouts, a 1F1B pipeline, realistic noise.

Built to the properties of issue 18 (see ``docs/simulator.md``), independent of the older
:class:`argus.sim.model.TimingModel`:

* layouts ``tp 8 x pp 4 x dp 16|64`` (dense, 512 | 2,048 ranks) and
  ``tp 2 x ep 8 x dp 8 x pp 4`` (MoE, 512 ranks); 8 GPUs per host, host ``rank // 8``;
* a 1F1B schedule with ``M = 8`` micro-batches per step: stage ``s`` runs ``pp - 1 - s``
  warm-up forwards, then one forward / one backward, then the cool-down backwards. Every
  forward waits for its input from stage ``s - 1`` (``pp_recv_fwd``), every backward for
  its gradient from ``s + 1`` (``pp_recv_bwd``); a receive ends at
  ``max(posted, sent) + transfer``, so lateness travels along the pipeline;
* TP all-reduces after attention and MLP (forward) and after the backward, MoE
  dispatch/combine around the expert MLP, then the gradient reduce-scatter over the DP
  group, the optimizer and the parameter all-gather. A collective ends at the last arrival
  plus its transfer: an early member's phase holds the wait (long), a late one's is short;
* every compute phase is the sum of its kernels (about 230 kernel events and 68 phase
  entries per rank-step for the dense layout), so kernels and phases agree.

Noise (:class:`Noise`): log-normal kernel durations (CV per kernel name drawn in 3-8 %, or
30 % heavy), 0.2 % of kernels 1.5-4x, per-GPU speed spread (σ 1.5 %), per-(rank, step)
factor (σ 1 %), data loading log-normal (median 8 ms, σ 0.25), hiccups in 3 % of steps
(storage stall of every rank's data loading, or congested DP collectives), uneven stages
(+15 % first, +25 % last), a checkpoint every 50 steps (every rank 8x slower).

Faults (:class:`MegaFault`) slow kernels, whole compute, data loading or inter-node links
of chosen ranks, or stop a rank's reports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from argus.sim.layout import Layout

__all__ = [
    "GPUS_PER_HOST",
    "LAYOUTS",
    "MegaFault",
    "MegaModel",
    "MegaStep",
    "Noise",
    "StageBlock",
    "host_of",
    "kernel_names",
]

GPUS_PER_HOST = 8
MICRO_BATCHES = 8

LAYOUTS: Mapping[str, Layout] = {
    "dense256": Layout(dp=8, tp=8, pp=4),  # --quick: half the DP replicas
    "moe256": Layout(dp=4, tp=2, pp=4, ep=8),
    "dense512": Layout(dp=16, tp=8, pp=4),
    "dense2048": Layout(dp=64, tp=8, pp=4),
    "moe512": Layout(dp=8, tp=2, pp=4, ep=8),
}
"""Named layouts: rank order ``tp-cp-ep-dp-pp`` (fastest first), so a host (8 ranks)
holds one TP group (dense) or 4 TP pairs of one EP group (MoE)."""


def host_of(rank: int) -> str:
    """Host name of a rank (8 GPUs per host)."""
    return f"node{rank // GPUS_PER_HOST:04d}"


# -- work: kernels per op ------------------------------------------------------------------------

# (kernel name, share of the phase's base time); a phase's base is in BASE_MS
ATTN = (
    ("layernorm_fwd_kernel", 0.04),
    ("sm90_xmma_gemm_bf16_qkv", 0.26),
    ("flash_fwd_kernel", 0.40),
    ("sm90_xmma_gemm_bf16_proj", 0.24),
    ("dropout_add_fwd_kernel", 0.06),
)
MLP = (
    ("layernorm_fwd_kernel", 0.04),
    ("sm90_xmma_gemm_bf16_fc1", 0.44),
    ("gelu_fwd_kernel", 0.05),
    ("sm90_xmma_gemm_bf16_fc2", 0.41),
    ("dropout_add_fwd_kernel", 0.06),
)
MOE_MLP = (
    ("layernorm_fwd_kernel", 0.04),
    ("moe_topk_router_kernel", 0.05),
    ("grouped_gemm_bf16_fc1", 0.44),
    ("swiglu_fwd_kernel", 0.06),
    ("grouped_gemm_bf16_fc2", 0.41),
)
BWD = (
    ("dropout_add_bwd_kernel", 0.03),
    ("sm90_xmma_gemm_bf16_fc2_dgrad", 0.12),
    ("sm90_xmma_gemm_bf16_fc2_wgrad", 0.12),
    ("gelu_bwd_kernel", 0.03),
    ("sm90_xmma_gemm_bf16_fc1_dgrad", 0.12),
    ("sm90_xmma_gemm_bf16_fc1_wgrad", 0.12),
    ("layernorm_bwd_kernel", 0.04),
    ("flash_bwd_kernel", 0.22),
    ("sm90_xmma_gemm_bf16_qkv_dgrad", 0.10),
    ("sm90_xmma_gemm_bf16_qkv_wgrad", 0.10),
)
MOE_BWD = tuple(
    (n.replace("sm90_xmma_gemm_bf16_fc", "grouped_gemm_bf16_fc").replace("gelu", "swiglu"), w)
    for n, w in BWD
)
OPT = (
    ("multi_tensor_l2norm_kernel", 0.1),
    *((f"multi_tensor_adam_kernel_chunk{i}", 0.9 / 8) for i in range(8)),
)
NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
NCCL_P2P = "ncclDevKernel_SendRecv"
NCCL_A2A = "ncclDevKernel_AllToAll_bf16"
NCCL_RS = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL"
NCCL_AG = "ncclDevKernel_AllGather_bf16_RING_LL"
BUCKETS = 8  # gradient buckets: one RS and one AG kernel each

STREAM_COMPUTE, STREAM_TP, STREAM_PP, STREAM_DP, STREAM_EP = 7, 13, 17, 15, 14
STREAMS: Mapping[int, tuple[str, str]] = {
    STREAM_COMPUTE: ("compute", "default compute"),
    STREAM_TP: ("comm", "nccl tp"),
    STREAM_EP: ("comm", "nccl ep"),
    STREAM_DP: ("comm", "nccl dp"),
    STREAM_PP: ("p2p", "nccl pp"),
}

BASE_MS: Mapping[str, float] = {
    "self_attention": 10.0,  # per micro-batch, middle stage
    "mlp": 13.0,
    "backward": 46.0,
    "optimizer": 12.0,
    "tp_allreduce": 1.2,  # transfer (intra-node NVLink)
    "moe_dispatch": 2.0,  # transfer (inter-node)
    "moe_combine": 2.0,
    "pp_p2p": 0.8,  # transfer per receive (inter-node)
    "grads_reduce_scatter": 28.0,  # transfer (inter-node, whole step's gradients)
    "params_all_gather": 14.0,
    "data_load": 8.0,  # median, host
}


def kernel_names(moe: bool) -> list[str]:
    """Every kernel name the model can emit, in a fixed order (index = name id)."""
    out: list[str] = []
    for group in (ATTN, MOE_MLP if moe else MLP, MOE_BWD if moe else BWD, OPT):
        for n, _ in group:
            if n not in out:
                out.append(n)
    for n in (NCCL_AR, NCCL_P2P, NCCL_A2A, NCCL_RS, NCCL_AG):
        out.append(n)
    return out


# -- noise and faults ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Noise:
    """Healthy variability (fractions unless a unit is given).

    ``kernel_cv``: range of the per-kernel-name CV of log-normal kernel durations (each
    name draws its CV once per job); ``heavy_cv`` replaces it when set (heavy jitter).
    ``outlier_p``/``outlier_range``: share of kernels made 1.5-4x. ``gpu_sigma``: per-GPU
    static speed (log σ); ``rank_step_sigma``: per-(rank, step) factor on compute;
    ``comm_cv``: per-transfer CV. ``data_ms``/``data_sigma``: data loading median (ms) and
    log σ per (rank, step). ``hiccup_p``: share of steps with a global hiccup.
    ``stage_skew``: compute factor of the first and last stage. ``checkpoint_every``:
    steps between checkpoints (0: none); ``checkpoint_factor``: slowdown of those steps.
    """

    kernel_cv: tuple[float, float] = (0.03, 0.08)
    heavy_cv: float | None = None
    outlier_p: float = 0.002
    outlier_range: tuple[float, float] = (1.5, 4.0)
    gpu_sigma: float = 0.015
    rank_step_sigma: float = 0.01
    comm_cv: float = 0.05
    data_ms: float = 8.0
    data_sigma: float = 0.25
    hiccup_p: float = 0.0
    stage_skew: tuple[float, float] = (1.0, 1.0)
    checkpoint_every: int = 0
    checkpoint_factor: float = 8.0


@dataclass(frozen=True)
class MegaFault:
    """One injected fault.

    Attributes
    ----------
    kind : str
        ``kernels`` (kernels whose name matches ``kernels``, a regex, are ``factor`` x),
        ``compute`` (every compute kernel ``factor`` x), ``drift`` (every compute kernel
        ``1 + rate * (step - onset)`` x), ``data_stall`` (``stall_ms`` added to data loading
        at ``at_steps``), ``nic`` (inter-node transfers touching the ranks ``factor`` x),
        ``stop`` (the ranks report nothing from ``onset``).
    ranks : tuple of int
    onset : int
        First affected step.
    """

    kind: str
    ranks: tuple[int, ...]
    onset: int = 0
    factor: float = 1.0
    kernels: str = ""
    rate: float = 0.0
    stall_ms: float = 0.0
    at_steps: tuple[int, ...] = ()

    def active(self, step: int) -> bool:
        if self.kind == "data_stall":
            return step in self.at_steps
        return step >= self.onset


# -- the step -----------------------------------------------------------------------------------


@dataclass
class StageBlock:
    """One pipeline stage's ranks for one step (every rank of a stage has the same entries).

    ``phase_names`` (E,) and ``phase_kinds`` (E,) stream kinds; ``phase_start``/``phase_dur``
    (n, E) ms from the step start. ``kernel_name`` (K,) ids into :func:`kernel_names`,
    ``kernel_stream`` (K,); ``kernel_start``/``kernel_dur`` (n, K) ms.
    """

    ranks: np.ndarray
    phase_names: list[str]
    phase_kinds: list[str]
    phase_start: np.ndarray
    phase_dur: np.ndarray
    kernel_name: np.ndarray
    kernel_stream: np.ndarray
    kernel_start: np.ndarray
    kernel_dur: np.ndarray


@dataclass
class MegaStep:
    """All ranks for one step: ``blocks`` per stage, ``end_ms`` (R,) each rank's step end
    from the common step start, ``reporting`` (R,) bool (False: the rank sends nothing)."""

    step: int
    blocks: list[StageBlock]
    end_ms: np.ndarray
    reporting: np.ndarray
    hiccup: str = ""
    checkpoint: bool = False


class _Builder:
    """Collects one stage's phase entries and kernels in order, vectorised over its ranks."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pn: list[str] = []
        self.pk: list[str] = []
        self.ps: list[np.ndarray] = []
        self.pd: list[np.ndarray] = []
        self.kn: list[int] = []
        self.ks: list[int] = []
        self.kst: list[np.ndarray] = []
        self.kd: list[np.ndarray] = []

    def phase(self, name: str, kind: str, start: np.ndarray, dur: np.ndarray) -> None:
        self.pn.append(name)
        self.pk.append(kind)
        self.ps.append(start)
        self.pd.append(dur)

    def kernel(self, name: int, stream: int, start: np.ndarray, dur: np.ndarray) -> None:
        self.kn.append(name)
        self.ks.append(stream)
        self.kst.append(start)
        self.kd.append(dur)

    def block(self, ranks: np.ndarray) -> StageBlock:
        return StageBlock(
            ranks,
            self.pn,
            self.pk,
            np.stack(self.ps, axis=1),
            np.stack(self.pd, axis=1),
            np.asarray(self.kn, dtype=np.int64),
            np.asarray(self.ks, dtype=np.int64),
            np.stack(self.kst, axis=1),
            np.stack(self.kd, axis=1),
        )


def _gmax(x: np.ndarray, idx: np.ndarray, g: int) -> np.ndarray:
    buf = np.full(g, -np.inf)
    np.maximum.at(buf, idx, x)
    return buf[idx]


def _schedule(stage: int, pp: int, m: int) -> list[tuple[str, int]]:
    """1F1B op order of one stage: ``[("F"|"B", micro-batch), ...]``."""
    warm = min(pp - 1 - stage, m)
    ops = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        ops += [("F", warm + i), ("B", i)]
    ops += [("B", i) for i in range(m - warm, m)]
    return ops


@dataclass
class MegaModel:
    """Vectorised step generator for a layout, a noise profile and faults.

    Call :meth:`step` in increasing step order (one random stream per job and seed).
    """

    layout: Layout
    noise: Noise = field(default_factory=Noise)
    faults: tuple[MegaFault, ...] = ()
    seed: int = 0
    micro_batches: int = MICRO_BATCHES

    def __post_init__(self) -> None:
        lay = self.layout
        self.moe = lay.ep > 1
        self.names = kernel_names(self.moe)
        self.name_id = {n: i for i, n in enumerate(self.names)}
        self._rng = np.random.default_rng([self.seed, 18])
        r = self._rng
        R = lay.world
        lo, hi = self.noise.kernel_cv
        cv = r.uniform(lo, hi, len(self.names))
        if self.noise.heavy_cv is not None:
            cv[:] = self.noise.heavy_cv
        self._ksig = np.sqrt(np.log1p(cv**2))  # log σ per kernel name
        self._gpu = np.exp(r.normal(0.0, self.noise.gpu_sigma, R))
        self.per_stage = R // lay.pp
        self.stage_of = np.arange(R) // self.per_stage
        self.host = np.arange(R) // GPUS_PER_HOST
        self._tp = lay.group_index("tp")
        self._ep = lay.group_index("ep") if self.moe else None
        self._dp = lay.group_index("dp")
        self._ng = {
            "tp": int(self._tp.max()) + 1,
            "dp": int(self._dp.max()) + 1,
            "ep": int(self._ep.max()) + 1 if self._ep is not None else 0,
        }
        self._sched = [_schedule(s, lay.pp, self.micro_batches) for s in range(lay.pp)]
        skew = np.ones(lay.pp)
        if lay.pp > 1:
            skew[0], skew[-1] = self.noise.stage_skew
        self._skew = skew
        self._sig_comm = float(np.sqrt(np.log1p(self.noise.comm_cv**2)))

    # -- per-step factors ------------------------------------------------------------------

    def _kernel_factor(self, step: int, names: Sequence[str]) -> np.ndarray:
        """(R, len(names)) fault multiplier of each named compute kernel."""
        out = np.ones((self.layout.world, len(names)))
        for f in self.faults:
            if not f.active(step):
                continue
            idx = np.asarray(f.ranks, dtype=np.int64)
            if f.kind == "kernels":
                cols = [j for j, n in enumerate(names) if re.search(f.kernels, n)]
                out[np.ix_(idx, np.asarray(cols, dtype=np.int64))] *= f.factor
            elif f.kind == "compute":
                out[idx] *= f.factor
            elif f.kind == "drift":
                out[idx] *= 1.0 + f.rate * (step - f.onset)
        return out

    def _nic(self, step: int) -> np.ndarray:
        """(R,) factor on inter-node transfers touching each rank."""
        out = np.ones(self.layout.world)
        for f in self.faults:
            if f.kind == "nic" and f.active(step):
                out[np.asarray(f.ranks, dtype=np.int64)] *= f.factor
        return out

    # -- one step --------------------------------------------------------------------------

    def step(self, step: int) -> MegaStep:
        """Simulate one step for every rank (times in ms from the common step start)."""
        rng, lay, nz = self._rng, self.layout, self.noise
        R, M = lay.world, self.micro_batches
        ckpt = bool(nz.checkpoint_every) and step > 0 and step % nz.checkpoint_every == 0
        hiccup = ""
        if nz.hiccup_p and rng.random() < nz.hiccup_p:
            hiccup = "storage" if rng.random() < 0.5 else "dp-congestion"
        slow = nz.checkpoint_factor if ckpt else 1.0
        rank_step = np.exp(rng.normal(0.0, nz.rank_step_sigma, R))
        speed = self._gpu * rank_step * slow  # (R,) compute multiplier
        nic = self._nic(step)
        comp_names = {
            "self_attention": ATTN,
            "mlp": MOE_MLP if self.moe else MLP,
            "backward": MOE_BWD if self.moe else BWD,
            "optimizer": OPT,
        }
        all_comp = sorted({n for ks in comp_names.values() for n, _ in ks})
        kf_all = self._kernel_factor(step, all_comp)
        kf_col = {n: j for j, n in enumerate(all_comp)}

        def compute(ranks: np.ndarray, phase: str, b: _Builder, t: np.ndarray) -> np.ndarray:
            ks = comp_names[phase]
            base = BASE_MS[phase] * self._skew[self.stage_of[ranks]] * speed[ranks]
            ids = [self.name_id[n] for n, _ in ks]
            share = np.array([w for _, w in ks])
            sig = self._ksig[ids]
            z = rng.standard_normal((ranks.size, len(ks)))
            d = base[:, None] * share[None, :] * np.exp(sig * z - 0.5 * sig**2)
            out_mask = rng.random(d.shape) < nz.outlier_p
            if out_mask.any():
                d[out_mask] *= rng.uniform(*nz.outlier_range, int(out_mask.sum()))
            d *= kf_all[np.ix_(ranks, np.array([kf_col[n] for n, _ in ks], dtype=np.int64))]
            start = t.copy()
            for j, kid in enumerate(ids):
                b.kernel(kid, STREAM_COMPUTE, t.copy(), d[:, j])
                t = t + d[:, j] + 0.005  # launch gap, ms
            b.phase(phase, "compute", start, t - start)
            return t

        def xfer(phase: str, n: int, factor: np.ndarray | float = 1.0) -> np.ndarray:
            return (
                BASE_MS[phase]
                * slow
                * np.exp(rng.normal(-0.5 * self._sig_comm**2, self._sig_comm, n))
                * factor
            )

        t = np.zeros(R)
        builders = [_Builder(self.per_stage) for _ in range(lay.pp)]
        st_ranks = [np.arange(s * self.per_stage, (s + 1) * self.per_stage) for s in range(lay.pp)]

        # data loading (host), every rank at step start
        dl = nz.data_ms * np.exp(rng.normal(0.0, nz.data_sigma, R)) * slow
        if hiccup == "storage":
            dl = dl + float(rng.uniform(150.0, 400.0)) * np.exp(rng.normal(0.0, 0.05, R))
        for f in self.faults:
            if f.kind == "data_stall" and f.active(step):
                dl[np.asarray(f.ranks, dtype=np.int64)] += f.stall_ms
        for s in range(lay.pp):
            builders[s].phase("data_load", "host", t[st_ranks[s]].copy(), dl[st_ranks[s]])
        t = t + dl

        fwd_out = np.full((R, M), np.nan)  # time the forward activation was sent
        bwd_out = np.full((R, M), np.nan)
        pp_stride = self.per_stage

        def collective(
            name: str,
            ranks: np.ndarray,
            t: np.ndarray,
            gidx: np.ndarray,
            g: int,
            b: _Builder,
            stream: int,
            kname: str,
            tr: np.ndarray,
        ) -> np.ndarray:
            arrive = t
            end = _gmax(arrive, gidx[ranks], g) + tr
            b.phase(name, "comm", arrive.copy(), end - arrive)
            b.kernel(self.name_id[kname], stream, arrive.copy(), end - arrive)
            return end

        def tp_ar(ranks: np.ndarray, t: np.ndarray, b: _Builder) -> np.ndarray:
            tr = xfer("tp_allreduce", ranks.size)
            return collective(
                "tp_allreduce", ranks, t, self._tp, self._ng["tp"], b, STREAM_TP, NCCL_AR, tr
            )

        def ep_a2a(name: str, ranks: np.ndarray, t: np.ndarray, b: _Builder) -> np.ndarray:
            assert self._ep is not None
            tr = xfer(name, ranks.size, _gmax(nic[ranks], self._ep[ranks], self._ng["ep"]))
            return collective(name, ranks, t, self._ep, self._ng["ep"], b, STREAM_EP, NCCL_A2A, tr)

        def recv(
            name: str, ranks: np.ndarray, t: np.ndarray, sent: np.ndarray, b: _Builder
        ) -> np.ndarray:
            peer_nic = np.maximum(
                nic[ranks], nic[ranks + (pp_stride if "bwd" in name else -pp_stride)]
            )
            end = np.maximum(t, sent) + xfer("pp_p2p", ranks.size, peer_nic)
            b.phase(name, "p2p", t.copy(), end - t)
            b.kernel(self.name_id[NCCL_P2P], STREAM_PP, t.copy(), end - t)
            return end

        # one (slot, stage) at a time: forwards by ascending stage, backwards descending
        n_slots = 2 * M
        for k in range(n_slots):
            order = [s for s in range(lay.pp) if self._sched[s][k][0] == "F"]
            order += [s for s in reversed(range(lay.pp)) if self._sched[s][k][0] == "B"]
            for s in order:
                op, mb = self._sched[s][k]
                rk = st_ranks[s]
                b = builders[s]
                tr = t[rk]
                if op == "F":
                    if s > 0:
                        tr = recv("pp_recv_fwd", rk, tr, fwd_out[rk - pp_stride, mb], b)
                    tr = compute(rk, "self_attention", b, tr)
                    tr = tp_ar(rk, tr, b)
                    if self.moe:
                        tr = ep_a2a("moe_dispatch", rk, tr, b)
                    tr = compute(rk, "mlp", b, tr)
                    if self.moe:
                        tr = ep_a2a("moe_combine", rk, tr, b)
                    tr = tp_ar(rk, tr, b)
                    fwd_out[rk, mb] = tr
                else:
                    if s < lay.pp - 1:
                        tr = recv("pp_recv_bwd", rk, tr, bwd_out[rk + pp_stride, mb], b)
                    tr = compute(rk, "backward", b, tr)
                    tr = tp_ar(rk, tr, b)
                    bwd_out[rk, mb] = tr
                t[rk] = tr

        # gradient reduce-scatter, optimizer, parameter all-gather (DP group, inter-node)
        dpf = _gmax(nic, self._dp, self._ng["dp"])
        cong = float(rng.uniform(3.0, 6.0)) if hiccup == "dp-congestion" else 1.0
        for s in range(lay.pp):
            rk = st_ranks[s]
            b = builders[s]
            tr = t[rk]
            end = _gmax(t, self._dp, self._ng["dp"])[rk] + xfer(
                "grads_reduce_scatter", rk.size, dpf[rk] * cong
            )
            b.phase("grads_reduce_scatter", "comm", tr.copy(), end - tr)
            self._buckets(b, NCCL_RS, tr, end)
            t[rk] = end
        for s in range(lay.pp):
            rk = st_ranks[s]
            t[rk] = compute(rk, "optimizer", builders[s], t[rk])
        ag_end = _gmax(t, self._dp, self._ng["dp"])
        for s in range(lay.pp):
            rk = st_ranks[s]
            b = builders[s]
            tr = t[rk]
            end = ag_end[rk] + xfer("params_all_gather", rk.size, dpf[rk] * cong)
            b.phase("params_all_gather", "comm", tr.copy(), end - tr)
            self._buckets(b, NCCL_AG, tr, end)
            t[rk] = end

        reporting = np.ones(R, dtype=bool)
        for f in self.faults:
            if f.kind == "stop" and f.active(step):
                reporting[np.asarray(f.ranks, dtype=np.int64)] = False
        blocks = [builders[s].block(st_ranks[s]) for s in range(lay.pp)]
        return MegaStep(step, blocks, t, reporting, hiccup, ckpt)

    def _buckets(self, b: _Builder, kname: str, t0: np.ndarray, t1: np.ndarray) -> None:
        """``BUCKETS`` equal NCCL kernels splitting ``[t0, t1)`` (wait included)."""
        d = (t1 - t0) / BUCKETS
        kid = self.name_id[kname]
        for i in range(BUCKETS):
            b.kernel(kid, STREAM_DP, t0 + i * d, d)
