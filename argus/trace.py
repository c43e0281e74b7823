"""L4 drill-down: a Perfetto trace (native TrackEvent protobuf) of some ranks' records.

Layout, all on event time (ns since epoch, the records' own clocks):

* one process track per rank (``rank R (host)``);
* under it, one thread-like child track per stream:
  ``phases <stream kind>`` (step phases of ``step_record``, on the stream kind they ran),
  ``steps`` (the whole step), ``cuda stream <id> (<kind>)`` (kernels of ``kernel_batch``
  records, one track per CUDA stream), and ``stacks`` (one slice per ``stack_batch`` /
  ``stack_summary`` window, named by its hottest leaf frame, with the top stacks as debug
  annotations).

Slices that overlap on one track go to extra lanes (``… #2``) so each track is properly
nested. :func:`build_trace` is pure (records in, bytes out); :func:`trace_from_kafka` reads
the records with :func:`argus.replay.read_range`. Written with
``perfetto.trace_builder.proto_builder.TraceProtoBuilder`` (no TraceProcessor binary).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from argus.errors import ArgusError

__all__ = ["TraceError", "TraceStats", "build_trace", "lanes", "trace_from_kafka"]

_SEQ = 1


class TraceError(ArgusError):
    """A trace that cannot be built (no records, malformed columns)."""


@dataclass
class TraceStats:
    """What went into a trace: slices per track name, per rank."""

    slices: dict[int, dict[str, int]] = field(default_factory=dict)
    """rank -> {track name: slices}."""

    def total(self) -> int:
        return sum(n for d in self.slices.values() for n in d.values())


def lanes(intervals: Sequence[tuple[int, int]]) -> list[int]:
    """Lane of each ``(start_ns, end_ns)`` so that no two intervals of a lane overlap.

    Greedy on start order: an interval takes the first lane whose last slice ended at or
    before its start. Returns the lane index (0-based) of each interval, in input order.
    """
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], intervals[i][1]))
    ends: list[int] = []
    out = [0] * len(intervals)
    for i in order:
        s, e = intervals[i]
        for lane, last in enumerate(ends):
            if last <= s:
                ends[lane] = e
                out[i] = lane
                break
        else:
            ends.append(e)
            out[i] = len(ends) - 1
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

    Returns
    -------
    (bytes, TraceStats)

    Raises
    ------
    TraceError
        No record of those ranks, or kernel columns of different lengths.
    """
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
    from perfetto.trace_builder.proto_builder import TraceProtoBuilder

    from argus.schemas.arrays import unpack

    want = None if ranks is None else {int(r) for r in ranks}
    # rank -> track name -> list of (start, end, name, annotations)
    ev: dict[int, dict[str, list[tuple[int, int, str, dict[str, str]]]]] = defaultdict(
        lambda: defaultdict(list)
    )
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
        kinds = {int(s["id"]): str(s.get("kind", "unknown")) for s in rec.get("streams", [])}
        for i, s, a, d in zip(idx.tolist(), st.tolist(), t0.tolist(), du.tolist(), strict=True):
            track = f"cuda stream {s} ({kinds.get(s, 'unknown')})"
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
        name = _leaf(str(counts[0]["stack"]))
        w0, w1 = int(rec["window_start_ns"]), int(rec["window_end_ns"])
        ev[rk]["stacks"].append((w0, max(w1, w0), name, ann))
    if not ev:
        raise TraceError("no records of the requested ranks")

    builder = TraceProtoBuilder()
    uuid = iter(range(1, 1 << 62))
    stats = TraceStats()
    first = True

    def packet(ts: int) -> Any:
        nonlocal first
        p = builder.add_packet()
        p.timestamp = ts
        p.trusted_packet_sequence_id = _SEQ
        if first:
            p.sequence_flags = p.SEQ_INCREMENTAL_STATE_CLEARED
            first = False
        return p

    order = ["steps", "phases", "cuda stream", "stacks"]
    for rk in sorted(ev):
        pu = next(uuid)
        td = builder.add_packet()
        td.track_descriptor.uuid = pu
        td.track_descriptor.process.pid = rk + 1
        host = hosts.get(rk, "")
        td.track_descriptor.process.process_name = f"rank {rk}" + (f" ({host})" if host else "")
        stats.slices[rk] = {}
        names_sorted = sorted(
            ev[rk], key=lambda n: (next(i for i, o in enumerate(order) if n.startswith(o)), n)
        )
        for tname in names_sorted:
            items = sorted(ev[rk][tname], key=lambda x: (x[0], -x[1]))
            lane_of = lanes([(a, b) for a, b, _n, _x in items])
            tracks: dict[int, int] = {}
            for lane in sorted(set(lane_of)):
                tu = next(uuid)
                tracks[lane] = tu
                d = builder.add_packet()
                d.track_descriptor.uuid = tu
                d.track_descriptor.parent_uuid = pu
                d.track_descriptor.name = tname if lane == 0 else f"{tname} #{lane + 1}"
            for (a, b, n, ann), lane in zip(items, lane_of, strict=True):
                p = packet(a)
                p.track_event.type = TrackEvent.TYPE_SLICE_BEGIN
                p.track_event.track_uuid = tracks[lane]
                p.track_event.name = n
                for k, v in ann.items():
                    da = p.track_event.debug_annotations.add()
                    da.name = k
                    da.string_value = v
                q = packet(b)
                q.track_event.type = TrackEvent.TYPE_SLICE_END
                q.track_event.track_uuid = tracks[lane]
            stats.slices[rk][tname] = len(items)
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
    return build_trace(steps, kernels, stacks, ranks=ranks)
