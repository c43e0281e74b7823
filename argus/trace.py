"""L4 drill-down: a Perfetto trace (native TrackEvent protobuf) of some ranks' records.

Layout, all on event time (ns since epoch, the records' own clocks):

* one process track per rank (``rank R (host)``; a culprit rank is named
  ``rank R (host) CULPRIT`` and carries the process label ``culprit``);
* under it one track per stream, each holding properly nested slices (one track, no
  ``#2`` lanes): ``steps`` (the whole step), ``phases <stream kind>`` (step phases of
  ``step_record`` on the stream kind they ran), ``cuda stream <id> (<kind>)`` (GPU kernels
  of ``kernel_batch`` records, one track per CUDA stream), ``CPU ops thread <tid>`` (the
  ``cpu_ops`` source's operators, one track per host thread) and ``stacks`` (one slice per
  ``stack_batch`` / ``stack_summary`` window, named by the hottest leaf frame of the
  training's own threads, argus's collector threads left out, the top stacks as
  arguments);
* a counter track ``iteration time (ms)`` per rank, one value per step;
* with ``--around``, a top-level track ``argus alert`` spanning the alert's window, named by
  its summary.

A slice that starts inside another and ends after it (a partial overlap, which a track cannot
show nested) is clipped to its parent's end and annotated ``clipped_ns``.
:func:`build_trace` is pure (records in, bytes out); :func:`trace_from_kafka` reads the
records with :func:`argus.replay.read_range`. Written with
``perfetto.trace_builder.proto_builder.TraceProtoBuilder`` (no TraceProcessor binary).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from argus.errors import ArgusError

__all__ = ["TraceError", "TraceStats", "build_trace", "nest", "trace_from_kafka"]

_SEQ = 1


class TraceError(ArgusError):
    """A trace that cannot be built (no records, malformed columns)."""


@dataclass
class TraceStats:
    """What went into a trace: slices per track name, per rank."""

    slices: dict[int, dict[str, int]] = field(default_factory=dict)
    """rank -> {track name: slices}."""
    clipped: int = 0
    """Slices clipped to their parent's end (partial overlaps)."""

    def total(self) -> int:
        return sum(n for d in self.slices.values() for n in d.values())


def nest(intervals: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """``(start_ns, end_ns, depth)`` of each interval (input order) so that the intervals
    of one track nest: sorted by start (longest first), an interval inside the open one is
    its child (depth + 1); one that outlasts its parent is clipped to the parent's end; a
    zero-length interval lasts 1 ns.
    """
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], -intervals[i][1]))
    open_ends: list[int] = []
    out: list[tuple[int, int, int]] = [(0, 0, 0)] * len(intervals)
    for i in order:
        a, b = intervals[i]
        b = max(b, a + 1)
        while open_ends and open_ends[-1] <= a:
            open_ends.pop()
        if open_ends and b > open_ends[-1]:
            b = open_ends[-1]
        out[i] = (a, b, len(open_ends))
        open_ends.append(b)
    return out


def _leaf(stack: str) -> str:
    return stack.rsplit(";", 1)[-1].strip() or stack


def build_trace(
    steps: Iterable[Mapping[str, Any]] = (),
    kernel_batches: Iterable[Mapping[str, Any]] = (),
    stacks: Iterable[Mapping[str, Any]] = (),
    *,
    ranks: Iterable[int] | None = None,
    top_stacks: int = 5,
    culprits: Iterable[int] = (),
    marks: Sequence[tuple[int, int, str]] = (),
) -> tuple[bytes, TraceStats]:
    """Serialized Perfetto ``Trace`` of the records of ``ranks`` (all when None).

    Parameters
    ----------
    steps : iterable of step_record dicts
    kernel_batches : iterable of kernel_batch dicts
    stacks : iterable of stack_batch or stack_summary dicts
    ranks : iterable of int, optional
    top_stacks : int
        Stacks listed as debug annotations on each stack slice.
    culprits : iterable of int
        Ranks marked as the culprit's (process name and label).
    marks : sequence of (start_ns, end_ns, name)
        Spans drawn on a top-level track ``argus alert`` (the alert's window).

    Returns
    -------
    (bytes, TraceStats)

    Raises
    ------
    TraceError
        No record of those ranks, or kernel columns of different lengths.
    """
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import (
        CounterDescriptor,
        TrackEvent,
    )
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder

    from argus.schemas.arrays import unpack
    from argus.stacks_view import is_argus_stack

    want = None if ranks is None else {int(r) for r in ranks}
    hot = {int(r) for r in culprits}
    # rank -> track name -> list of (start, end, name, annotations)
    ev: dict[int, dict[str, list[tuple[int, int, str, dict[str, str]]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    iters: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
    hosts: dict[int, str] = {}

    def keep(rec: Mapping[str, Any]) -> int | None:
        rk = int(rec["rank"])
        return rk if want is None or rk in want else None

    for rec in steps:
        rk = keep(rec)
        if rk is None:
            continue
        hosts.setdefault(rk, str(rec.get("host", "")))
        s0, s1 = int(rec["start_ns"]), int(rec["end_ns"])
        ev[rk]["steps"].append((s0, s1, f"step {rec['step']}", {}))
        iters[rk][int(rec["step"])] = (s0, s1 - s0)
        for ph in rec.get("phases", []):
            a = int(ph["start_ns"])
            track = f"phases {ph.get('stream_kind') or 'unknown'}"
            ev[rk][track].append((a, a + int(ph["duration_ns"]), str(ph["name"]), {}))
    for rec in kernel_batches:
        rk = keep(rec)
        if rk is None:
            continue
        hosts.setdefault(rk, str(rec.get("host", "")))
        names = list(rec.get("names", []))
        try:
            idx = unpack(rec["name_idx"], "uint32", field="name_idx")
            st = unpack(rec["stream"], "uint32", field="stream")
            t0 = unpack(rec["start_ns"], "int64", field="start_ns")
            du = unpack(rec["duration_ns"], "int64", field="duration_ns")
        except ArgusError as exc:
            raise TraceError(
                f"kernel_batch rank {rk} window {rec.get('window_id')}: {exc}"
            ) from exc
        if not (len(idx) == len(st) == len(t0) == len(du)):
            raise TraceError(
                f"kernel_batch rank {rk} window {rec.get('window_id')}: columns of different "
                f"lengths ({len(idx)}, {len(st)}, {len(t0)}, {len(du)})"
            )
        if len(idx) and int(idx.max()) >= len(names):
            raise TraceError(
                f"kernel_batch rank {rk} window {rec.get('window_id')}: name_idx "
                f"{int(idx.max())} outside names ({len(names)})"
            )
        cpu = str(rec.get("source", "")) == "cpu_ops"
        kinds = {int(s["id"]): str(s.get("kind", "unknown")) for s in rec.get("streams", [])}
        for i, s, a, d in zip(idx.tolist(), st.tolist(), t0.tolist(), du.tolist(), strict=True):
            track = f"CPU ops thread {s}" if cpu else f"cuda stream {s} ({kinds.get(s, 'unknown')})"
            ev[rk][track].append((a, a + d, names[i], {}))
    for rec in stacks:
        rk = keep(rec)
        if rk is None:
            continue
        counts = sorted(rec.get("stacks", []), key=lambda c: (-int(c["count"]), c["stack"]))
        if not counts:
            continue
        ann = {
            f"#{i + 1} ({int(c['count'])})": str(c["stack"])
            for i, c in enumerate(counts[:top_stacks])
        }
        ann["samples"] = str(rec.get("samples", sum(int(c["count"]) for c in counts)))
        mine = [c for c in counts if not is_argus_stack(str(c["stack"]))]
        name = _leaf(str(mine[0]["stack"])) if mine else "(only argus threads sampled)"
        w0, w1 = int(rec["window_start_ns"]), int(rec["window_end_ns"])
        ev[rk]["stacks"].append((w0, max(w1, w0), name, ann))
    if not ev:
        raise TraceError("no records of the requested ranks")

    builder = TraceProtoBuilder()
    uuid = iter(range(1, 1 << 62))
    stats = TraceStats()
    # (ts, 0 end / 1 begin / 2 counter, depth key, seq, fill) -> sorted, then written
    todo: list[tuple[int, int, int, int, Any]] = []
    seq = iter(range(1 << 62))

    def add(ts: int, kind: int, depth_key: int, fill: Any) -> None:
        todo.append((ts, kind, depth_key, next(seq), fill))

    def add_slice(
        track: int, a: int, b: int, depth: int, name: str, ann: Mapping[str, str] | None = None
    ) -> None:
        """A slice ``name`` on ``track`` from ``a`` to ``b`` (ns) at nesting ``depth``; at the
        same time ends come before begins, deeper ends first, shallower begins first."""

        def begin(te: Any) -> None:
            te.type = TrackEvent.TYPE_SLICE_BEGIN
            te.track_uuid = track
            te.name = name
            for k, v in (ann or {}).items():
                da = te.debug_annotations.add()
                da.name = k
                da.string_value = v

        def end(te: Any) -> None:
            te.type = TrackEvent.TYPE_SLICE_END
            te.track_uuid = track

        add(a, 1, depth, begin)
        add(b, 0, -depth, end)

    if marks:
        mu = next(uuid)
        m = builder.add_packet()
        m.track_descriptor.uuid = mu
        m.track_descriptor.name = "argus alert"
        for (_a, _b, n), (a1, b1, depth) in zip(
            marks, nest([(x[0], x[1]) for x in marks]), strict=True
        ):
            add_slice(mu, a1, b1, depth, n)
    order = ["steps", "phases", "cuda stream", "CPU ops", "stacks"]
    for rk in sorted(ev):
        pu = next(uuid)
        td = builder.add_packet()
        td.track_descriptor.uuid = pu
        td.track_descriptor.process.pid = rk + 1
        host = hosts.get(rk, "")
        pname = f"rank {rk}" + (f" ({host})" if host else "")
        if rk in hot:
            pname += " CULPRIT"
            td.track_descriptor.process.process_labels.append("culprit")
        td.track_descriptor.process.process_name = pname
        stats.slices[rk] = {}
        if iters.get(rk):
            cu = next(uuid)
            c = builder.add_packet()
            c.track_descriptor.uuid = cu
            c.track_descriptor.parent_uuid = pu
            c.track_descriptor.name = "iteration time (ms)"
            c.track_descriptor.counter.unit = CounterDescriptor.UNIT_UNSPECIFIED
            c.track_descriptor.counter.unit_name = "ms"
            for step in sorted(iters[rk]):
                t, dur = iters[rk][step]

                def fill_counter(te: Any, cu: int = cu, v: float = dur / 1e6) -> None:
                    te.type = TrackEvent.TYPE_COUNTER
                    te.track_uuid = cu
                    te.double_counter_value = v

                add(t, 2, 0, fill_counter)
        names_sorted = sorted(
            ev[rk], key=lambda n: (next(i for i, o in enumerate(order) if n.startswith(o)), n)
        )
        for tname in names_sorted:
            items = ev[rk][tname]
            tu = next(uuid)
            d = builder.add_packet()
            d.track_descriptor.uuid = tu
            d.track_descriptor.parent_uuid = pu
            d.track_descriptor.name = tname
            for (a0, b0, n, ann), (a, b, depth) in zip(
                items, nest([(x[0], x[1]) for x in items]), strict=True
            ):
                if b < max(b0, a0 + 1):
                    stats.clipped += 1
                    ann = {**ann, "clipped_ns": str(max(b0, a0 + 1) - b)}

                add_slice(tu, a, b, depth, n, ann)
            stats.slices[rk][tname] = len(items)
    first = True
    for ts, _k, _d, _s, fill in sorted(todo, key=lambda x: x[:4]):
        p = builder.add_packet()
        p.timestamp = ts
        p.trusted_packet_sequence_id = _SEQ
        if first:
            p.sequence_flags = p.SEQ_INCREMENTAL_STATE_CLEARED
            first = False
        fill(p.track_event)
    return builder.serialize(), stats


def trace_from_kafka(
    settings: Any,
    job: str,
    ranks: Sequence[int],
    tr: Any,
    *,
    prefix: str | None = None,
    on_progress: Any = None,
    lag_ns: int | None = None,
    culprits: Iterable[int] = (),
    marks: Sequence[tuple[int, int, str]] = (),
) -> tuple[bytes, TraceStats]:
    """Read ``ranks``' steps, raw kernels and stacks in ``tr`` from Kafka; build the trace.

    Stacks come from ``raw.stacks``, or ``summary.stacks`` when none are left raw.

    Raises
    ------
    ReplayError
        A read failed.
    TraceError
        Nothing of those ranks in the range.
    """
    from argus.replay import read_range
    from argus.topics import topic_name

    pfx = settings.topic_prefix if prefix is None else prefix
    kw: dict[str, Any] = {"job": job, "ranks": ranks, "on_progress": on_progress, "lag_ns": lag_ns}
    steps = read_range(settings, topic_name("raw.steps", pfx), tr, **kw)
    kernels = read_range(settings, topic_name("raw.kernels", pfx), tr, **kw)
    stacks = read_range(settings, topic_name("raw.stacks", pfx), tr, **kw)
    if not stacks:
        stacks = read_range(settings, topic_name("summary.stacks", pfx), tr, **kw)
    if not (steps or kernels or stacks):
        from argus.replay import why_empty

        raise TraceError(
            f"no records of job {job!r} ranks {','.join(map(str, ranks))} in that range: "
            + why_empty(settings, topic_name("raw.steps", pfx), job, tr, lag_ns=lag_ns, ranks=ranks)
        )
    return build_trace(steps, kernels, stacks, ranks=ranks, culprits=culprits, marks=marks)
