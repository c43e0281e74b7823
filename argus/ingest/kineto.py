"""Read one PyTorch profiler (Kineto) trace file into steps, phases and kernel events.

Pure and typed: ``gzip``, ``json`` and numpy, no Kafka. :func:`read_kineto` reads a
``.json`` or ``.json.gz`` Chrome trace as ``torch.profiler.tensorboard_trace_handler`` and
``export_chrome_trace`` write it, and returns a :class:`RankTrace`; a file that cannot be
read as one raises :class:`TraceError` naming the file and what was wrong.

What is read (``docs/integrations.md``, "argus ingest", is the user-facing table):

* **steps**: complete events (``ph == "X"``) named ``ProfilerStep#N`` on the CPU (a ``cat``
  not starting with ``gpu_``); N is the step number; a step seen twice keeps its widest span;
* **time**: ``ts``/``dur`` are microseconds (floats; ns-resolution files carry 3 decimals);
  event time is ``baseTimeNanoseconds + ts * 1000`` ns (0 when the key is absent, as in
  older files whose ``ts`` is already µs since the epoch);
* **kernels**: ``cat == "kernel"`` events (stream ``args.stream``), each assigned to the step
  whose CPU span holds its launch (the ``cuda_runtime``/``cuda_driver`` event of the same
  ``args.correlation``; its own ``ts`` when no launch is found). A file without GPU kernels
  contributes its ``cpu_op`` events instead (stream = thread id, source ``cpu_ops``);
* **phases** per step (the union of their spans, so nested or repeated spans count once):
  see :data:`PHASE_RULES` for annotations; ``backward`` from the ``autograd::engine::
  evaluate_function`` ops when no annotation names it; ``gpu_compute`` (union of the
  non-collective kernels) and one phase per collective kernel type (``gpu_allreduce``,
  ``gpu_p2p_sendrecv``, ...) on GPU traces; ``step`` (the whole step) when nothing else is.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from argus.errors import ArgusError

__all__ = [
    "EPOCH_NS_MIN",
    "PHASE_RULES",
    "PhaseSpan",
    "RankTrace",
    "StepSpan",
    "TraceError",
    "phase_of_annotation",
    "read_kineto",
    "union_lengths",
]

EPOCH_NS_MIN = 1_000_000_000_000_000_000
"""Event times below this (2001-09-09) are not since the Unix epoch: a relative clock."""

_STEP = re.compile(r"ProfilerStep#(\d+)$")
_COLLECTIVE = re.compile(r"^(gloo|nccl|mpi|ucc|xccl):(\w+)$")
_NCCL_KERNEL = re.compile(r"^(?:void )?(?:nccl|rccl)\w*?(?:Kernel|DevKernel)_([A-Za-z]+)", re.I)
_P2P = {"send", "recv", "sendrecv", "recv_anysource", "_send", "_recv"}
_BWD_PREFIX = "autograd::engine::evaluate_function"

PHASE_RULES: tuple[tuple[str, str, str], ...] = (
    # (regex on the annotation name, argus phase, stream kind); first match wins
    (r"Optimizer\.step#.*", "optimizer", "compute"),
    (r"Optimizer\.zero_grad#.*", "zero_grad", "compute"),
    (r"(DistributedDataParallel|FullyShardedDataParallel|FSDP)\.forward", "forward", "compute"),
    (r"(## )?forward( ##)?", "forward", "compute"),
    (r"(## )?backward( ##)?", "backward", "compute"),
    (r"(## )?optimizer( ##)?", "optimizer", "compute"),
)
"""How a CPU annotation (``cat == "user_annotation"``) names a phase, case-insensitive.
``gloo:<op>``/``nccl:<op>`` (c10d's collective annotations) become ``comm_<op>`` (stream
kind ``comm``; ``p2p`` for send/recv); any other annotation is a phase of its own name
(``## x ##`` -> ``x``)."""

_RULES = tuple((re.compile(p, re.I), name, kind) for p, name, kind in PHASE_RULES)


class TraceError(ArgusError, ValueError):
    """A trace file that cannot be ingested; the message names the file and why."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


@dataclass(frozen=True)
class StepSpan:
    """One ``ProfilerStep#N`` of a rank: ``[start_ns, end_ns)``, ns since the epoch."""

    step: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class PhaseSpan:
    """A phase of one step: the union of its spans, ``duration_ns`` <= last end - start."""

    name: str
    stream_kind: str
    start_ns: int
    duration_ns: int
    timer: str  # "cpu" (host clock) | "cuda_event" (the device's kernel timestamps)


@dataclass
class RankTrace:
    """What one trace file holds for its rank.

    Attributes
    ----------
    path : Path
    rank, world : int or None
        From ``distributedInfo`` (None when absent; the caller resolves them).
    host : str
        ``host_name`` of the trace, else "".
    epoch_clock : bool
        False when event times are not since the Unix epoch (no ``baseTimeNanoseconds``
        and ``ts`` below :data:`EPOCH_NS_MIN`): the caller aligns such ranks.
    steps : list of StepSpan
        Sorted by start.
    phases : dict
        Step number -> its phases.
    kernel_source : str
        ``kineto`` (GPU kernels), ``cpu_ops`` (a CPU-only trace) or ``none``.
    names : list of str
        Kernel name dictionary; ``k_name`` indexes it.
    k_name, k_stream : (n,) uint32
    k_start, k_dur : (n,) int64
        Kernel start (ns since the epoch) and duration (ns), sorted by ``k_step``.
    k_step : (n,) int64
        The step each kernel belongs to.
    stream_kind : dict
        Stream (or thread) id -> ``compute`` | ``comm``.
    n_events : int
        Trace events in the file (for throughput figures).
    outside : int
        Kernel events outside every step (not ingested).
    """

    path: Path
    rank: int | None = None
    world: int | None = None
    host: str = ""
    epoch_clock: bool = True
    steps: list[StepSpan] = field(default_factory=list)
    phases: dict[int, list[PhaseSpan]] = field(default_factory=dict)
    kernel_source: str = "none"
    names: list[str] = field(default_factory=list)
    k_name: npt.NDArray[np.uint32] = field(default_factory=lambda: np.zeros(0, np.uint32))
    k_stream: npt.NDArray[np.uint32] = field(default_factory=lambda: np.zeros(0, np.uint32))
    k_start: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    k_dur: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    k_step: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    stream_kind: dict[int, str] = field(default_factory=dict)
    n_events: int = 0
    outside: int = 0

    def shift(self, offset_ns: int) -> None:
        """Move every event time by ``offset_ns`` (clock alignment of a relative clock)."""
        self.steps = [
            StepSpan(s.step, s.start_ns + offset_ns, s.end_ns + offset_ns) for s in self.steps
        ]
        self.phases = {
            k: [
                PhaseSpan(p.name, p.stream_kind, p.start_ns + offset_ns, p.duration_ns, p.timer)
                for p in v
            ]
            for k, v in self.phases.items()
        }
        self.k_start = self.k_start + np.int64(offset_ns)


def phase_of_annotation(name: str) -> tuple[str, str]:
    """``(argus phase, stream kind)`` of a CPU annotation name (:data:`PHASE_RULES`)."""
    for rx, phase, kind in _RULES:
        if rx.fullmatch(name):
            return phase, kind
    m = _COLLECTIVE.match(name)
    if m:
        op = m.group(2).lower()
        return f"comm_{op}", "p2p" if op in _P2P else "comm"
    n = name.strip()
    if n.startswith("## ") and n.endswith(" ##"):
        n = n[3:-3].strip()
    return n[:96] or "unnamed", "compute"


def _kernel_phase(name: str) -> tuple[str, str] | None:
    """``(phase, stream kind)`` of a collective kernel (NCCL/RCCL), else None."""
    if "ccl" not in name.lower():
        return None
    m = _NCCL_KERNEL.match(name)
    op = (m.group(1) if m else "collective").lower()
    if op in _P2P or op.startswith(("send", "recv")):
        return f"gpu_p2p_{op}", "p2p"
    return f"gpu_{op}", "comm"


def _us_to_ns(ts: npt.NDArray[np.float64], base: int) -> npt.NDArray[np.int64]:
    """µs floats -> int64 ns + ``base``, splitting whole µs from the fraction so that epoch
    µs (~1.7e15) keep their parsed precision (<= 0.25 µs) instead of float64's at 1e18 ns."""
    whole = np.floor(ts)
    frac = np.rint((ts - whole) * 1000.0).astype(np.int64)
    return whole.astype(np.int64) * 1000 + frac + np.int64(base)


def union_lengths(
    group: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    n_groups: int,
) -> npt.NDArray[np.int64]:
    """Length of the union of ``[start, end)`` intervals per group, ns.

    ``group`` (n,) in ``[0, n_groups)``; returns (n_groups,) int64 (0 for empty groups).
    """
    out = np.zeros(n_groups, np.int64)
    if start.size == 0:
        return out
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], np.maximum(end[order], start[order])
    lo = int(s.min())
    span = int(e.max()) - lo + 1
    s2 = (s - lo) + g * span  # groups far apart: the running max resets at each group
    e2 = (e - lo) + g * span
    cm = np.maximum.accumulate(e2)
    new = np.ones(s2.size, bool)
    new[1:] = s2[1:] > cm[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, s2.size - 1)
    np.add.at(out, g[first], cm[last] - s2[first])
    return out


def _load(path: Path) -> Any:
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
        if head == b"\x1f\x8b":
            with gzip.open(path, "rb") as gz:
                raw = gz.read()
        else:
            raw = path.read_bytes()
    except EOFError as exc:
        raise TraceError(path, f"truncated gzip stream ({exc})") from exc
    except (OSError, zlib.error) as exc:
        raise TraceError(path, f"cannot read ({exc})") from exc
    if not raw.strip():
        raise TraceError(path, "empty file")
    try:
        return json.loads(raw)
    except UnicodeDecodeError as exc:
        raise TraceError(path, f"not UTF-8 JSON ({exc})") from exc
    except json.JSONDecodeError as exc:
        cut = exc.msg.startswith("Unterminated") or not raw.rstrip().endswith((b"}", b"]"))
        what = "truncated JSON (the file ends inside the document)" if cut else "malformed JSON"
        raise TraceError(
            path, f"{what} at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from exc


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def _intern(names: list[str]) -> tuple[list[str], npt.NDArray[np.int64]]:
    """``(distinct names in first-seen order, (n,) int64 index of each name)``."""
    table: dict[str, int] = {}
    idx = [table.setdefault(str(n), len(table)) for n in names]
    return list(table), np.asarray(idx, np.int64)


def _tid(v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v & 0xFFFFFFFF
    return zlib.crc32(str(v).encode())


def read_kineto(path: str | Path, *, max_phases: int = 64) -> RankTrace:
    """Parse one Kineto trace file.

    Parameters
    ----------
    path : str or Path
        A ``.json`` or ``.json.gz`` Chrome trace (gzip is detected by its magic bytes).
    max_phases : int
        Most phases per step; beyond it the longest are kept.

    Raises
    ------
    TraceError
        Unreadable, truncated or malformed file, no ``traceEvents``, no ``ProfilerStep#N``,
        or events without numeric ``ts``/``dur``.
    """
    p = Path(path)
    doc = _load(p)
    if isinstance(doc, list):
        events, doc = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
    else:
        raise TraceError(p, "not a Kineto/Chrome trace (no traceEvents list)")
    base = _int_or_none(doc.get("baseTimeNanoseconds")) or 0
    info = doc.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    tr = RankTrace(
        path=p,
        rank=_int_or_none(info.get("rank")),
        world=_int_or_none(info.get("world_size")),
        host=str(doc.get("host_name") or ""),
        n_events=len(events),
    )

    cols = _Cols()
    try:
        cols.collect(events)
    except (KeyError, TypeError, AttributeError) as exc:
        raise TraceError(
            p, f"a complete event without a numeric ts/dur or a name ({exc!r})"
        ) from exc
    if not cols.steps:
        raise TraceError(
            p, "no ProfilerStep#N annotations (profile with a schedule and call prof.step())"
        )
    try:
        st = _Steps.of(cols.steps, base)
        tr.epoch_clock = base > 0 or int(st.s0.min()) >= EPOCH_NS_MIN
        tr.steps = [
            StepSpan(int(n), int(a), int(b))
            for n, a, b in zip(st.nums, st.s0, st.s1, strict=True)
            if b > a
        ]
        _phases(tr, st, cols)
        if cols.kn:
            _kernels_gpu(tr, st, cols)
        elif cols.cn:
            _kernels_cpu(tr, st, cols)
    except (TypeError, ValueError) as exc:
        raise TraceError(p, f"events with non-numeric ts/dur ({exc})") from exc
    if not tr.steps:
        raise TraceError(p, "every ProfilerStep#N has a zero duration")
    for sp in tr.steps:  # the cap; the whole step when the trace names nothing inside it
        ph = tr.phases.get(sp.step, [])
        if len(ph) > max_phases:
            ph = sorted(
                sorted(ph, key=lambda x: -x.duration_ns)[:max_phases], key=lambda x: x.start_ns
            )
        tr.phases[sp.step] = ph or [
            PhaseSpan("step", "compute", sp.start_ns, sp.end_ns - sp.start_ns, "cpu")
        ]
    return tr


@dataclass
class _Cols:
    """The columns of the events :func:`read_kineto` reads, in file order (µs floats)."""

    steps: dict[int, tuple[float, float]] = field(default_factory=dict)  # N -> (ts, dur)
    ann_n: list[str] = field(default_factory=list)  # user annotations
    ann_t: list[float] = field(default_factory=list)
    ann_d: list[float] = field(default_factory=list)
    bwd_t: list[float] = field(default_factory=list)  # autograd evaluate_function ops
    bwd_e: list[float] = field(default_factory=list)
    kn: list[str] = field(default_factory=list)  # GPU kernels
    kt: list[float] = field(default_factory=list)
    kd: list[float] = field(default_factory=list)
    ks: list[int] = field(default_factory=list)
    kc: list[int] = field(default_factory=list)
    lc: list[int] = field(default_factory=list)  # launches: correlation, ts
    lt: list[float] = field(default_factory=list)
    cn: list[str] = field(default_factory=list)  # CPU ops
    ct: list[float] = field(default_factory=list)
    cd: list[float] = field(default_factory=list)
    cth: list[Any] = field(default_factory=list)

    def collect(self, events: list[Any]) -> None:
        """One pass over the events (the hot loop: plain appends, no per-event calls)."""
        steps = self.steps
        for e in events:
            if e.get("ph") != "X":
                continue
            cat = e.get("cat")
            name = e.get("name")
            if cat == "cpu_op" and not name.startswith("ProfilerStep#"):
                ts = e["ts"]
                dur = e["dur"]
                self.cn.append(name)
                self.ct.append(ts)
                self.cd.append(dur)
                self.cth.append(e.get("tid"))
                if name.startswith(_BWD_PREFIX):
                    self.bwd_t.append(ts)
                    self.bwd_e.append(ts + dur)
            elif cat == "kernel":
                a = e.get("args") or {}
                self.kn.append(name)
                self.kt.append(e["ts"])
                self.kd.append(e["dur"])
                self.ks.append(_tid(a.get("stream", e.get("tid", 0))))
                c = a.get("correlation")
                self.kc.append(c if isinstance(c, int) else -1)
            elif cat == "cuda_runtime" or cat == "cuda_driver":
                c = (e.get("args") or {}).get("correlation")
                if isinstance(c, int):
                    self.lc.append(c)
                    self.lt.append(e["ts"])
            elif isinstance(cat, str) and cat.startswith("gpu_"):
                continue
            elif isinstance(name, str) and name.startswith("ProfilerStep#"):  # any CPU cat
                m = _STEP.match(name)
                if m:
                    n = int(m.group(1))
                    ts, dur = float(e["ts"]), float(e["dur"])
                    old = steps.get(n)
                    if old is None or dur > old[1]:
                        steps[n] = (ts, dur)
            elif cat == "user_annotation":
                self.ann_n.append(name)
                self.ann_t.append(e["ts"])
                self.ann_d.append(e["dur"])


@dataclass(frozen=True)
class _Steps:
    """A file's steps sorted by start: numbers and ``[s0, s1)`` ns; ``base`` ns for ts."""

    nums: npt.NDArray[np.int64]
    s0: npt.NDArray[np.int64]
    s1: npt.NDArray[np.int64]
    base: int

    @classmethod
    def of(cls, steps: dict[int, tuple[float, float]], base: int) -> _Steps:
        nums = np.array(sorted(steps, key=lambda n: steps[n][0]), np.int64)
        s0 = _us_to_ns(np.array([steps[int(n)][0] for n in nums], np.float64), base)
        dur = np.array([steps[int(n)][1] for n in nums], np.float64)
        return cls(nums, s0, s0 + _dur_ns(dur), base)

    def ns(self, ts: list[float]) -> npt.NDArray[np.int64]:
        """µs ``ts`` -> ns since the epoch."""
        return _us_to_ns(np.asarray(ts, np.float64), self.base)

    def index(self, t: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Index of the step holding each time ``t`` (ns), -1 outside every step."""
        i = np.searchsorted(self.s0, t, side="right") - 1
        ok = (i >= 0) & (t < self.s1[np.maximum(i, 0)])
        return np.where(ok, i, -1)


def _dur_ns(dur: npt.ArrayLike) -> npt.NDArray[np.int64]:
    return np.rint(np.asarray(dur, np.float64) * 1000.0).astype(np.int64)


def _add_phases(
    tr: RankTrace,
    st: _Steps,
    names: list[tuple[str, str]],
    spans: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
    timer: str,
    at: npt.NDArray[np.int64] | None = None,
) -> None:
    """Fold ``spans`` = (phase code into ``names``, start ns, end ns) into ``tr.phases``,
    each span in the step holding ``at`` (default: its start)."""
    code, start, end = spans
    idx = st.index(start if at is None else at)
    keep = idx >= 0
    idx, code, start, end = idx[keep], code[keep], start[keep], end[keep]
    if idx.size == 0:
        return
    k = len(names)
    uniq, inv = np.unique(idx * k + code, return_inverse=True)
    lengths = union_lengths(inv.astype(np.int64), start, end, uniq.size)
    first = np.full(uniq.size, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, inv, start)
    for g, ln, t0 in zip(uniq.tolist(), lengths.tolist(), first.tolist(), strict=True):
        name, kind = names[g % k]
        tr.phases.setdefault(int(st.nums[g // k]), []).append(PhaseSpan(name, kind, t0, ln, timer))


def _phases(tr: RankTrace, st: _Steps, cols: _Cols) -> None:
    """Annotation phases, and ``backward`` from autograd ops where no annotation names it."""
    table: dict[str, int] = {}
    names: list[tuple[str, str]] = []
    codes = []
    for n in cols.ann_n:
        ph = phase_of_annotation(str(n))
        c = table.get(ph[0])
        if c is None:
            c = table[ph[0]] = len(names)
            names.append(ph)
        codes.append(c)
    a0 = st.ns(cols.ann_t)
    a1 = a0 + _dur_ns(cols.ann_d)
    code = np.asarray(codes, np.int64)
    if cols.bwd_t and "backward" not in table:
        names.append(("backward", "compute"))
        b0, b1 = st.ns(cols.bwd_t), st.ns(cols.bwd_e)
        bi = st.index(b0)
        ok = bi >= 0
        if ok.any():  # one span per step: first evaluate_function start .. last end
            first = np.full(st.nums.size, np.iinfo(np.int64).max, np.int64)
            last = np.full(st.nums.size, np.iinfo(np.int64).min, np.int64)
            np.minimum.at(first, bi[ok], b0[ok])
            np.maximum.at(last, bi[ok], b1[ok])
            has = np.flatnonzero(last > np.iinfo(np.int64).min)
            a0 = np.concatenate([a0, first[has]])
            a1 = np.concatenate([a1, np.minimum(last[has], st.s1[has])])
            code = np.concatenate([code, np.full(has.size, len(names) - 1, np.int64)])
    if names:
        _add_phases(tr, st, names, (code, a0, a1), "cpu")


def _kernels_gpu(tr: RankTrace, st: _Steps, cols: _Cols) -> None:
    """GPU kernels: step by launch correlation, ``gpu_compute`` and collective phases."""
    start = st.ns(cols.kt)
    dur = _dur_ns(cols.kd)
    corr = np.asarray(cols.kc, np.int64)
    when = start  # the launch time where the launch is in the trace
    if cols.lc:
        lcorr = np.asarray(cols.lc, np.int64)
        order = np.argsort(lcorr, kind="stable")
        lcorr, lts = lcorr[order], st.ns(cols.lt)[order]
        j = np.minimum(np.searchsorted(lcorr, corr), lcorr.size - 1)
        hit = (lcorr[j] == corr) & (corr >= 0)
        when = np.where(hit, lts[j], start)
    stream = np.asarray(cols.ks, np.uint32)
    names, inv = _intern(cols.kn)
    # phases: gpu_compute (non-collective kernels) and one per collective type
    ph_names: list[tuple[str, str]] = [("gpu_compute", "compute")]
    code_of_name = np.zeros(len(names), np.int64)
    for i, kp in enumerate(_kernel_phase(n) for n in names):
        if kp is not None:
            if kp not in ph_names:
                ph_names.append(kp)
            code_of_name[i] = ph_names.index(kp)
    code = code_of_name[inv]
    _add_phases(tr, st, ph_names, (code, start, start + dur), "cuda_event", at=when)
    comm = {int(x) for x in np.unique(stream[code > 0])}
    tr.stream_kind = {int(x): ("comm" if int(x) in comm else "compute") for x in np.unique(stream)}
    idx = st.index(when)
    _store(tr, st.nums[idx], idx >= 0, (inv, stream, start, dur), names)
    tr.kernel_source = "kineto"


def _kernels_cpu(tr: RankTrace, st: _Steps, cols: _Cols) -> None:
    """A CPU-only trace: its CPU ops are the kernels (stream = thread id)."""
    start = st.ns(cols.ct)
    stream = np.asarray([_tid(t) for t in cols.cth], np.uint32)
    names, inv = _intern(cols.cn)
    tr.stream_kind = {int(x): "compute" for x in np.unique(stream)}
    idx = st.index(start)
    _store(tr, st.nums[idx], idx >= 0, (inv, stream, start, _dur_ns(cols.cd)), names)
    tr.kernel_source = "cpu_ops"


def _store(
    tr: RankTrace,
    step: npt.NDArray[np.int64],
    keep: npt.NDArray[np.bool_],
    cols: tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.int64]],
    names: list[str],
) -> None:
    """Keep the events inside a step (``keep``), sorted by ``step``, in ``tr.k_*``."""
    name, stream, start, dur = cols
    tr.outside = int((~keep).sum())
    step = step[keep]
    order = np.argsort(step, kind="stable")
    tr.k_step = step[order]
    tr.k_name = name[keep][order].astype(np.uint32)
    tr.k_stream = stream[keep][order]
    tr.k_start = start[keep][order]
    tr.k_dur = dur[keep][order]
    tr.names = names


def group_by_step(tr: RankTrace) -> dict[int, slice]:
    """Step number -> the slice of ``tr.k_*`` holding its kernels."""
    out: dict[int, slice] = {}
    if tr.k_step.size == 0:
        return out
    u, first = np.unique(tr.k_step, return_index=True)
    ends = np.append(first[1:], tr.k_step.size)
    for s, a, b in zip(u.tolist(), first.tolist(), ends.tolist(), strict=True):
        out[int(s)] = slice(a, b)
    return out
