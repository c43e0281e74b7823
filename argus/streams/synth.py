"""Reproducible synthetic GPU kernel events of one rank-window (pure numpy).

A :class:`Mix` describes the kernels of one training step of a dense+MoE transformer on one
rank: ~150 (kernel, stream) groups with realistic CUDA kernel names, each with its share of
the events, its duration modes and its behaviour inside a window (its *kind*):

==============  ===========================================================================
kind            what happens inside one window
==============  ===========================================================================
``stationary``  fixed modes, log-normal noise (GEMMs with several shapes, norms,
                elementwise, NCCL collectives on their own streams with wide durations)
``drift``       durations grow linearly over the window by 15-50% (thermal / clock drift)
``jit``         rare spikes ~40× (JIT compilation of an uncached shape, paper case 4)
``moe``         expert GEMMs whose time follows the tokens routed to the expert (Gamma
                per call) and a per-window routing imbalance per rank
``shapes``      attention over packed sequences: a few sequence-length modes whose mix
                changes from window to window (Dirichlet per window)
==============  ===========================================================================

:func:`rank_window` draws one rank-window; slowdowns (a fail-slow rank) multiply the
durations of chosen kernels, kernel classes or everything. It is vectorized: 64 ranks ×
3,000 events take a few ms.

Examples
--------
>>> import numpy as np
>>> mix = default_mix(0)
>>> names, name_idx, stream, dur = rank_window(np.random.default_rng(1), mix, n_events=3000)
>>> len(dur), dur.dtype.name, int(dur.min()) > 0
(3000, 'int64', True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from argus.errors import ArgusError
from argus.schemas.arrays import pack

__all__ = [
    "KINDS",
    "GroupSpec",
    "Mix",
    "SynthError",
    "default_mix",
    "kernel_batch",
    "lay_out_starts",
    "rank_window",
]

KINDS = ("stationary", "drift", "jit", "moe", "shapes")
CLASSES = ("gemm", "attention", "norm", "elementwise", "nccl", "moe", "optimizer")

#: stream id -> (kind, label), as ``kernel_batch.streams`` describes them
STREAMS: dict[int, tuple[str, str]] = {
    7: ("compute", "default"),
    13: ("compute", "side"),
    20: ("comm", "nccl dp"),
    24: ("comm", "nccl tp"),
    28: ("comm", "nccl ep"),
    32: ("p2p", "nccl pp"),
}


class SynthError(ArgusError, ValueError):
    """A bad argument to the generator (unknown slowdown key, bad factor, ...)."""


@dataclass(frozen=True)
class GroupSpec:
    """One (kernel, stream) group of a mix.

    ``modes`` are ``(weight, median_ns, sigma)`` of log-normal modes (sigma of ln duration).
    ``drift`` is the relative growth over a window; ``jit_rate`` the probability that a call
    is a JIT spike of ``jit_factor``; ``moe_k`` the Gamma shape of the routed-token factor
    (0: none); ``shape_factors`` / ``shape_weights`` the sequence-length modes of attention.
    """

    name: str
    stream: int
    kclass: str
    kind: str
    share: float
    modes: tuple[tuple[float, float, float], ...]
    drift: float = 0.0
    jit_rate: float = 0.0
    jit_factor: float = 40.0
    moe_k: float = 0.0
    shape_factors: tuple[float, ...] = ()
    shape_weights: tuple[float, ...] = ()


@dataclass(frozen=True, eq=False)
class Mix:
    """The kernels of one rank-step; build with :func:`default_mix` or from ``GroupSpec``s."""

    groups: tuple[GroupSpec, ...]
    names: tuple[str, ...] = field(init=False)
    arrays: dict[str, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.groups:
            raise SynthError("a mix needs at least one group")
        names: list[str] = []
        where: dict[str, int] = {}
        seen: set[tuple[str, int]] = set()
        for g in self.groups:
            if (g.name, g.stream) in seen:
                raise SynthError(f"group ({g.name!r}, stream {g.stream}) appears twice")
            seen.add((g.name, g.stream))
            if g.kind not in KINDS:
                raise SynthError(f"{g.name}: kind {g.kind!r} not in {KINDS}")
            if g.name not in where:
                where[g.name] = len(names)
                names.append(g.name)
        share = np.array([g.share for g in self.groups], dtype=np.float64)
        if np.any(share <= 0):
            raise SynthError("every group needs a positive share")
        comp_group, comp_w, comp_mu, comp_sigma = [], [], [], []
        for i, g in enumerate(self.groups):
            w = np.array([m[0] for m in g.modes], dtype=np.float64)
            w = w / w.sum()
            comp_group += [i] * len(g.modes)
            comp_w += np.cumsum(w).tolist()
            comp_mu += [np.log(m[1]) for m in g.modes]
            comp_sigma += [m[2] for m in g.modes]
        arrays = {
            "share": share / share.sum(),
            "name_idx": np.array([where[g.name] for g in self.groups], dtype=np.uint32),
            "stream": np.array([g.stream for g in self.groups], dtype=np.uint32),
            "drift": np.array([g.drift for g in self.groups]),
            "jit_rate": np.array([g.jit_rate for g in self.groups]),
            "log_jit": np.log(np.array([g.jit_factor for g in self.groups])),
            "moe_k": np.array([g.moe_k for g in self.groups]),
            # component i of group g ends at key g + cumulative weight: searchsorted(g + u)
            "comp_key": np.array(comp_group, dtype=np.float64) + np.minimum(comp_w, 1.0 - 1e-12),
            "comp_mu": np.array(comp_mu),
            "comp_sigma": np.array(comp_sigma),
        }
        arrays["comp_key"][np.r_[np.diff(comp_group) != 0, True]] = (
            np.arange(len(self.groups)) + 1.0
        )
        for a in arrays.values():
            a.setflags(write=False)
        object.__setattr__(self, "names", tuple(names))
        object.__setattr__(self, "arrays", arrays)

    @property
    def n_groups(self) -> int:
        return len(self.groups)

    def kinds(self) -> np.ndarray:
        """(G,) kind of each group."""
        return np.array([g.kind for g in self.groups])

    def slowdown_factors(self, slowdown: Mapping[str, float] | None) -> np.ndarray:
        """(G,) duration factor per group for a slowdown mapping (see :func:`rank_window`)."""
        f = np.ones(self.n_groups)
        if not slowdown:
            return f
        by_name = {g.name for g in self.groups}
        for key, factor in slowdown.items():
            if not (factor > 0 and np.isfinite(factor)):
                raise SynthError(
                    f"slowdown factor for {key!r} must be a positive number, got {factor!r}"
                )
            if key != "*" and key not in CLASSES and key not in by_name and key not in KINDS:
                raise SynthError(
                    f"slowdown key {key!r} is no kernel name, class {CLASSES}, kind {KINDS} or '*'"
                )
        star = float(slowdown.get("*", 1.0))
        for i, g in enumerate(self.groups):
            f[i] = float(slowdown.get(g.name, slowdown.get(g.kclass, slowdown.get(g.kind, star))))
        return f


def rank_window(
    rng: np.random.Generator,
    mix: Mix,
    *,
    n_events: int,
    slowdown: Mapping[str, float] | None = None,
) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """Draw the kernel events of one rank-window.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of randomness; the same seed gives the same window.
    mix : Mix
        The workload (see :func:`default_mix`).
    n_events : int
        Number of kernel events; the groups share them by ``GroupSpec.share`` (multinomial).
    slowdown : mapping str -> float, optional
        Duration factors for a slow rank. Keys: a kernel name, a class (``gemm``,
        ``attention``, ``norm``, ``elementwise``, ``nccl``, ``moe``, ``optimizer``), a kind,
        or ``"*"`` for everything; the most specific key wins (name > class > kind > ``*``).

    Returns
    -------
    names : list of str
        Kernel name dictionary (all names of the mix).
    name_idx : (n,) uint32
        Index into ``names`` per event.
    stream : (n,) uint32
        CUDA stream id per event.
    duration_ns : (n,) int64, ns
        Durations (≥ 1 ns), in the events' time order within the window.

    Raises
    ------
    SynthError
        ``n_events`` negative, or a bad slowdown key or factor.
    """
    if n_events < 0:
        raise SynthError(f"n_events must be >= 0, got {n_events}")
    a = mix.arrays
    factors = np.log(mix.slowdown_factors(slowdown))
    counts = rng.multinomial(n_events, a["share"])
    grp = np.repeat(np.arange(mix.n_groups), counts)
    n = grp.size
    t = rng.random(n)  # position inside the window, 0..1
    comp = np.searchsorted(a["comp_key"], grp + rng.random(n), side="right")
    logd = a["comp_mu"][comp] + a["comp_sigma"][comp] * rng.standard_normal(n)
    logd += factors[grp]
    drift = a["drift"][grp]
    logd += np.log1p(drift * t)
    spike = rng.random(n) < a["jit_rate"][grp]
    if spike.any():
        logd[spike] += a["log_jit"][grp[spike]] + 0.15 * rng.standard_normal(int(spike.sum()))
    moe_groups = np.flatnonzero(a["moe_k"] > 0)
    if moe_groups.size:
        routing = np.zeros(mix.n_groups)
        routing[moe_groups] = 0.12 * rng.standard_normal(moe_groups.size)
        k = a["moe_k"][grp]
        moe = k > 0
        logd[moe] += routing[grp[moe]] + np.log(rng.gamma(k[moe], 1.0 / k[moe]))
    for g in (i for i, s in enumerate(mix.groups) if s.shape_factors):
        sel = np.flatnonzero(grp == g)
        if sel.size == 0:
            continue
        spec = mix.groups[g]
        w = rng.dirichlet(20.0 * np.asarray(spec.shape_weights))
        pick = np.searchsorted(np.cumsum(w)[:-1], rng.random(sel.size), side="right")
        logd[sel] += np.log(np.asarray(spec.shape_factors))[pick]
    order = np.argsort(t, kind="stable")
    grp = grp[order]
    dur = np.maximum(np.rint(np.exp(logd[order])), 1.0).astype(np.int64)
    return list(mix.names), a["name_idx"][grp], a["stream"][grp], dur


def lay_out_starts(
    stream: np.ndarray, duration_ns: np.ndarray, *, window_start_ns: int = 0, gap_ns: int = 1_500
) -> np.ndarray:
    """(n,) int64 start times (ns since epoch): each stream runs its events back to back.

    Events keep their order within a stream, separated by ``gap_ns`` (launch gap).
    """
    stream = np.asarray(stream)
    d = np.asarray(duration_ns, dtype=np.int64) + gap_ns
    order = np.argsort(stream, kind="stable")
    ds = d[order]
    cs = np.cumsum(ds) - ds
    ss = stream[order]
    first = np.r_[True, ss[1:] != ss[:-1]]
    base = np.maximum.accumulate(np.where(first, cs, 0))
    out = np.empty_like(d)
    out[order] = window_start_ns + cs - base
    return out


def kernel_batch(
    rng: np.random.Generator,
    mix: Mix,
    *,
    job: str,
    rank: int,
    window_id: int,
    n_events: int,
    window_start_ns: int = 1_700_000_000_000_000_000,
    slowdown: Mapping[str, float] | None = None,
    coords: Mapping[str, int] | None = None,
    source: str = "simulator",
) -> dict[str, Any]:
    """A ``kernel_batch`` record (ready for ``Codec.encode("kernel_batch", ...)``)."""
    names, name_idx, stream, dur = rank_window(rng, mix, n_events=n_events, slowdown=slowdown)
    start = lay_out_starts(stream, dur, window_start_ns=window_start_ns)
    end = int((start + dur).max()) if dur.size else window_start_ns
    used = sorted({int(s) for s in np.unique(stream)})
    return {
        "job": job,
        "rank": int(rank),
        "window_id": int(window_id),
        "window_start_ns": int(window_start_ns),
        "window_end_ns": end,
        "host": f"node{int(rank) // 8:04d}",
        "coords": dict(coords or {}),
        "source": source,
        "names": names,
        "name_idx": pack(name_idx, "uint32"),
        "stream": pack(stream, "uint32"),
        "start_ns": pack(start, "int64"),
        "duration_ns": pack(dur, "int64"),
        "streams": [
            {
                "id": s,
                "kind": STREAMS.get(s, ("unknown", ""))[0],
                "label": STREAMS.get(s, ("", ""))[1],
            }
            for s in used
        ],
        "dropped": 0,
    }


# -- the default workload ---------------------------------------------------------------------


def _gemm_names() -> list[str]:
    out = []
    for tn in ("tn", "nt", "nn"):
        for a, b in ((128, 128), (128, 256), (256, 128), (64, 128)):
            out.append(
                f"sm90_xmma_gemm_bf16bf16_bf16f32_f32_{tn}_n_tilesize{a}x{b}x64_warpgroupsize"
                f"{2 if a == 256 else 1}x1x1_execute_segment_k_off_kernel__5x_cublas"
            )
    for a, b, k, st in ((128, 256, 64, 3), (256, 128, 64, 3), (128, 128, 32, 5), (64, 64, 32, 6)):
        for tn in ("tn", "nt"):
            t = f"cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_{a}x{b}_{k}x{st}_{tn}_align8"
            out.append(f"void cutlass::Kernel2<{t}>({t}::Params)")
    for a, b in ((256, 128), (128, 128), (128, 64)):
        for tn in ("nn", "tn"):
            out.append(f"ampere_bf16_s16816gemm_bf16_{a}x{b}_ldg8_f2f_stages_64x3_{tn}")
    out += [
        "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>(cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, float const*, __nv_bfloat16*, void*, long, float*, int*)",
        "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, false, false, cublasGemvParamsEx<int, __nv_bfloat16 const, __nv_bfloat16 const, __nv_bfloat16, float> >(cublasGemvParamsEx<int, __nv_bfloat16 const, __nv_bfloat16 const, __nv_bfloat16, float>, float, float)",
    ]
    return out


def _attention_names() -> list[str]:
    out = []
    for hd, bn in ((128, 64), (64, 128)):
        for causal in ("true", "false"):
            tr = f"Flash_fwd_kernel_traits<{hd}, 128, {bn}, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<{hd}, 128, {bn}, 4, cutlass::bfloat16_t> >"
            out.append(
                f"void flash::flash_fwd_kernel<{tr}, {causal}, false, false, false, true, true, false, false>(flash::Flash_fwd_params)"
            )
            btr = f"Flash_bwd_kernel_traits<{hd}, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<{hd}, 64, 128, 8, cutlass::bfloat16_t> >"
            out.append(
                f"void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<{btr}, {causal}, false, false, false, false, false, false>(flash::Flash_bwd_params)"
            )
    out += [
        "void flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(flash::Flash_bwd_params)",
        "void flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false>(flash::Flash_bwd_params, int)",
        "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 11, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",
        "void (anonymous namespace)::softmax_warp_backward<c10::BFloat16, c10::BFloat16, float, 11, false, false>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, int, int, int, bool const*)",
    ]
    return out


def _norm_names() -> list[str]:
    out = []
    for h in (2048, 4096):
        for d in ("fwd", "bwd"):
            out.append(
                f"void transformer_engine::normalization::rmsnorm_{d}_tuned_kernel<transformer_engine::normalization::Kernel_traits<float, __nv_bfloat16, __nv_bfloat16, float, unsigned int, {h}u, 1u, 4u, 1u, 16u, 4u> >(transformer_engine::normalization::{'FwdParams' if d == 'fwd' else 'BwdParams'})"
            )
    for t in ("c10::BFloat16, float", "float, float"):
        out.append(
            f"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<{t}>(int, float, {t.split(',')[0]} const*, {t.split(',')[0]} const*, {t.split(',')[0]} const*, float*, float*, {t.split(',')[0]}*)"
        )
        out.append(
            f"void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<{t}>({t.split(',')[0]} const*, {t.split(',')[0]} const*, float const*, float const*, {t.split(',')[0]} const*, {t.split(',')[0]}*, int)"
        )
        out.append(
            f"void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<{t}>(long, long, {t.split(',')[0]} const*, {t.split(',')[0]} const*, float const*, float const*, {t.split(',')[0]}*, {t.split(',')[0]}*)"
        )
    out.append(
        "void transformer_engine::normalization::rmsnorm_bwd_finalize_tuned_kernel<transformer_engine::normalization::Kernel_traits_finalize<4096u, float, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 32u, 32u, 1u, 4u> >(transformer_engine::normalization::BwdParams)"
    )
    return out


def _elementwise_names() -> list[str]:
    out = []
    functors = [
        "at::native::CUDAFunctor_add<c10::BFloat16>",
        "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >",
        "at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16)#1}",
        "at::native::(anonymous namespace)::silu_backward_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::{lambda(c10::BFloat16, c10::BFloat16)#1}",
        "at::native::FillFunctor<c10::BFloat16>",
        "at::native::FillFunctor<float>",
        "at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}",
        "at::native::float_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}",
        "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >",
        "at::native::(anonymous namespace)::gelu_kernel_impl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}",
        "at::native::CUDAFunctorOnSelf_add<float>",
        "at::native::sqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}",
    ]
    for i, f in enumerate(functors):
        vec = 4 if i % 3 else 8
        out.append(
            f"void at::native::vectorized_elementwise_kernel<{vec}, {f}, at::detail::Array<char*, {2 + i % 2}> >(int, {f}, at::detail::Array<char*, {2 + i % 2}>)"
        )
    for f in functors[:6]:
        out.append(
            f"void at::native::unrolled_elementwise_kernel<{f}, at::detail::Array<char*, 3>, TrivialOffsetCalculator<2, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<2>, at::native::memory::StoreWithCast<1> >(int, {f}, at::detail::Array<char*, 3>, TrivialOffsetCalculator<2, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<2>, at::native::memory::StoreWithCast<1>)"
        )
    for op, t in (("sum", "float"), ("max", "float"), ("sum", "c10::BFloat16"), ("norm", "float")):
        out.append(
            f"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<{t}, at::native::func_wrapper_t<{t}, at::native::{op}_functor<{t}, float, {t}>::operator()(at::TensorIterator&)::{{lambda(float, float)#1}}>, unsigned int, {t}, 4> >(at::native::ReduceOp<{t}, at::native::func_wrapper_t<{t}, at::native::{op}_functor<{t}, float, {t}>::operator()(at::TensorIterator&)::{{lambda(float, float)#1}}>, unsigned int, {t}, 4>)"
        )
    out += [
        "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_kernel_impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&)::{lambda(int)#1}>(long, at::native::gpu_index_kernel<at::native::index_kernel_impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, at::native::index_kernel_impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&)::{lambda(int)#1})",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)",
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)",
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1})",
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 2, 128, 1>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
        "void transformer_engine::scaled_aligned_causal_masked_softmax_warp_forward<__nv_bfloat16, __nv_bfloat16, float, 11>(__nv_bfloat16*, __nv_bfloat16 const*, float, int, int, int)",
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::PhiloxCudaState)",
        "void transformer_engine::multi_tensor_scale::multi_tensor_apply_kernel<transformer_engine::multi_tensor_scale::TensorListMetadata<2>, transformer_engine::multi_tensor_scale::ScaleFunctor<float, float> >(long, int volatile*, transformer_engine::multi_tensor_scale::TensorListMetadata<2>, transformer_engine::multi_tensor_scale::ScaleFunctor<float, float>, float)",
    ]
    return out


def _nccl_names() -> list[str]:
    sig = "(ncclDevComm*, unsigned long, ncclWork*)"
    return [
        f"ncclDevKernel_AllReduce_Sum_bf16_RING_LL{sig}",
        f"ncclDevKernel_AllReduce_Sum_bf16_RING_LL128{sig}",
        f"ncclDevKernel_AllReduce_Sum_f32_RING_LL{sig}",
        f"ncclDevKernel_AllReduce_Sum_bf16_TREE_LL{sig}",
        f"ncclDevKernel_AllGather_RING_LL{sig}",
        f"ncclDevKernel_AllGather_RING_LL128{sig}",
        f"ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL{sig}",
        f"ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL128{sig}",
        f"ncclDevKernel_ReduceScatter_Sum_f32_RING_LL{sig}",
        f"ncclDevKernel_AllGather_RING_SIMPLE{sig}",
        f"ncclDevKernel_SendRecv{sig}",
        f"ncclDevKernel_Broadcast_RING_LL{sig}",
    ]


def _moe_names() -> list[str]:
    gg = "cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int> >, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90GroupGemmTmaGmmaWarpSpecializedCooperative<{st}, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>, cute::tuple<cute::C<{a}>, cute::C<{b}>, cute::C<64> >, cutlass::bfloat16_t, cute::tuple<long, cute::C<1>, long>*, cutlass::bfloat16_t, cute::tuple<long, cute::C<1>, long>*>, cutlass::epilogue::collective::CollectiveEpilogue<cutlass::epilogue::Sm90PtrArrayTmaWarpSpecializedCooperative<4, 2, 64, true, false> >, void, void>"
    out = []
    for a, b, st in (
        (128, 128, 4),
        (128, 256, 3),
        (256, 128, 3),
        (64, 256, 5),
        (256, 256, 2),
        (128, 64, 5),
    ):
        g = gg.format(a=a, b=b, st=st)
        out.append(f"void cutlass::device_kernel<{g}>({g}::Params)")
    out += [
        "void moe_permute_row_map<__nv_bfloat16, 4>(int const*, int*, int, int, int)",
        "void moe_unpermute_kernel<__nv_bfloat16, float, true>(__nv_bfloat16 const*, __nv_bfloat16*, int const*, float const*, __nv_bfloat16*, int, int, int)",
        "void moe_permute_kernel<__nv_bfloat16, __nv_bfloat16, false>(__nv_bfloat16 const*, __nv_bfloat16*, int const*, float const*, float*, int const*, int, int, int)",
        "void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float const, unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, unsigned int*)",
    ]
    return out


def _optimizer_names() -> list[str]:
    return [
        "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, float, float>, float, float, float, float, float, float, adamMode_t, float>(long, int volatile*, TensorListMetadata<4>, AdamFunctor<float, float, float>, float, float, float, float, float, float, adamMode_t, float)",
        "void multi_tensor_apply_kernel<TensorListMetadata<1>, L2NormFunctor<float, 512, 8, 1>, float*, float*, bool, int>(long, int volatile*, TensorListMetadata<1>, L2NormFunctor<float, 512, 8, 1>, float*, float*, bool, int)",
        "void cleanup<float, 512, 8>(float*, float*, float*, float*, float*, bool, int)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::ScaleFunctor<float, float>, float>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::ScaleFunctor<float, float>, float)",
    ]


def _modes(
    rng: np.random.Generator,
    lo_ns: float,
    hi_ns: float,
    n_modes: int,
    sigma: tuple[float, float],
    ratio: tuple[float, float],
) -> tuple[tuple[float, float, float], ...]:
    base = float(np.exp(rng.uniform(np.log(lo_ns), np.log(hi_ns))))
    out = []
    for i in range(n_modes):
        med = base * float(np.prod(rng.uniform(*ratio, size=i))) if i else base
        out.append((float(rng.uniform(0.5, 2.0)), med, float(rng.uniform(*sigma))))
    return tuple(out)


def default_mix(seed: int = 0) -> Mix:
    """The default rank-step workload: ~150 (kernel, stream) groups of a MoE transformer.

    The seed fixes every random choice (durations, shares, which groups drift or spike), so
    ``default_mix(s)`` is the same workload on every rank and in every process.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA2605]))
    groups: list[GroupSpec] = []

    def add(
        name: str,
        stream: int,
        kclass: str,
        kind: str,
        share: float,
        modes: tuple[tuple[float, float, float], ...],
        **kw: Any,
    ) -> None:
        groups.append(GroupSpec(name, stream, kclass, kind, share, modes, **kw))

    gemm = _gemm_names()
    kinds = ["stationary"] * len(gemm)
    for i in rng.choice(len(gemm), 5, replace=False):
        kinds[i] = "drift"
    for i in rng.choice([i for i, k in enumerate(kinds) if k == "stationary"], 4, replace=False):
        kinds[i] = "jit"
    for name, kind in zip(gemm, kinds, strict=True):
        modes = _modes(rng, 30e3, 1.5e6, int(rng.integers(1, 4)), (0.01, 0.04), (1.4, 4.0))
        add(
            name,
            7,
            "gemm",
            kind,
            float(rng.lognormal(0, 0.5)),
            modes,
            drift=float(rng.uniform(0.15, 0.5)) if kind == "drift" else 0.0,
            jit_rate=float(rng.uniform(0.003, 0.01)) if kind == "jit" else 0.0,
        )
        if "cutlass" in name:  # weight-gradient GEMMs overlapped on the side stream
            add(
                name,
                13,
                "gemm",
                "stationary",
                float(rng.lognormal(-0.5, 0.4)),
                _modes(rng, 30e3, 800e3, int(rng.integers(1, 3)), (0.01, 0.04), (1.4, 3.0)),
            )
    for i, name in enumerate(_attention_names()):
        if i < 8:  # flash fwd/bwd: packed sequences, or JIT of uncached shapes (paper case 4)
            kind = "jit" if i in (1, 3) else "shapes"
            modes = _modes(rng, 150e3, 900e3, 1, (0.02, 0.04), (1.0, 1.0))
            add(
                name,
                7,
                "attention",
                kind,
                float(rng.lognormal(0, 0.3)),
                modes,
                jit_rate=0.006 if kind == "jit" else 0.0,
                shape_factors=(0.14, 0.39, 0.7, 1.0) if kind == "shapes" else (),
                shape_weights=(0.2, 0.3, 0.3, 0.2) if kind == "shapes" else (),
            )
        else:
            add(
                name,
                7,
                "attention",
                "stationary",
                float(rng.lognormal(0, 0.3)),
                _modes(rng, 20e3, 120e3, 2, (0.02, 0.05), (1.5, 3.0)),
            )
    for name in _norm_names():
        add(
            name,
            7,
            "norm",
            "stationary",
            float(rng.lognormal(0.3, 0.3)),
            _modes(rng, 8e3, 40e3, int(rng.integers(1, 3)), (0.03, 0.06), (1.5, 2.5)),
        )
        if "bwd" in name or "grad" in name:
            add(
                name,
                13,
                "norm",
                "stationary",
                float(rng.lognormal(-0.3, 0.3)),
                _modes(rng, 8e3, 40e3, 1, (0.03, 0.06), (1.0, 1.0)),
            )
    ew = _elementwise_names()
    for i, name in enumerate(ew):
        kind = "drift" if i % 9 == 4 else "stationary"
        modes = _modes(rng, 2e3, 60e3, int(rng.integers(1, 4)), (0.05, 0.12), (1.5, 5.0))
        add(
            name,
            7,
            "elementwise",
            kind,
            float(rng.lognormal(1.0, 0.6)),
            modes,
            drift=float(rng.uniform(0.15, 0.4)) if kind == "drift" else 0.0,
        )
        if i % 2 == 0:  # the same kernel on the side stream (e.g. overlapped grad casts)
            add(
                name,
                13,
                "elementwise",
                "stationary",
                float(rng.lognormal(0.0, 0.5)),
                _modes(rng, 2e3, 30e3, 1, (0.05, 0.1), (1.0, 1.0)),
            )
    for name in _nccl_names():
        streams = (
            (20, 24)
            if "AllReduce" in name or "AllGather" in name
            else ((32,) if "SendRecv" in name else (20,))
        )
        if "ReduceScatter" in name:
            streams = (20, 24)
        for s in streams:
            add(
                name,
                s,
                "nccl",
                "stationary",
                float(rng.lognormal(-0.5, 0.4)),
                _modes(rng, 40e3, 4e6, int(rng.integers(1, 3)), (0.12, 0.35), (2.0, 8.0)),
            )
        if "SendRecv" in name:  # all-to-all dispatch/combine of MoE tokens: routing variance
            add(
                name,
                28,
                "nccl",
                "moe",
                float(rng.lognormal(0, 0.3)),
                _modes(rng, 200e3, 1.5e6, 1, (0.05, 0.1), (1.0, 1.0)),
                moe_k=6.0,
            )
    for name in _moe_names():
        add(
            name,
            7,
            "moe",
            "moe",
            float(rng.lognormal(0.3, 0.3)),
            _modes(rng, 40e3, 600e3, 1, (0.03, 0.06), (1.0, 1.0)),
            moe_k=3.0,
        )
    for name in _optimizer_names():
        add(
            name,
            7,
            "optimizer",
            "stationary",
            float(rng.lognormal(-1.0, 0.3)),
            _modes(rng, 50e3, 2e6, 1, (0.01, 0.03), (1.0, 1.0)),
        )
    return Mix(tuple(groups))
