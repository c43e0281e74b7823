"""A window's ``kernel_batch`` split into parts that each fit one Kafka message, and merged back.

A kernel window can hold more events than one message carries (24 bytes an event: 1 MB is
~41,600 events, the collectors keep up to 200,000 and the pipeline takes 1,000,000). The
collectors split such a window into consecutive slices of its events (:func:`split_batch`);
each part is a complete ``kernel_batch`` with the window's header, the names its events use
(re-indexed) and ``part``/``parts`` saying which it is (``dropped`` rides on part 0). Readers
merge the parts of a (job, rank, window_id) before they summarise (:func:`merge_parts`): the
compressor as they arrive (:class:`PartAssembler`), offline readers over a whole recording
(:func:`assemble`). A merged window has the events of the unsplit one in the same order and
its name dictionary in the same first-appearance order, so its summary is the same.

Pure: no Kafka; numpy only.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from argus.errors import ArgusError
from argus.schemas.arrays import pack, unpack

__all__ = [
    "EVENT_BYTES",
    "MAX_PARTS",
    "PART_REASONS",
    "Incomplete",
    "PartAssembler",
    "PartError",
    "assemble",
    "batch_size_bytes",
    "merge_parts",
    "split_batch",
]

#: Encoded bytes per kernel event: name_idx uint32 + stream uint32 + start int64 + duration int64.
EVENT_BYTES = 24
#: Most parts one window may claim (a 2,000,000-event window in parts of one event each is
#: absurd; this only bounds what a reader holds for a malformed ``parts``).
MAX_PARTS = 100_000
_COLUMNS = (
    ("name_idx", "uint32"),
    ("stream", "uint32"),
    ("start_ns", "int64"),
    ("duration_ns", "int64"),
)
_SLACK = 64  # Avro length prefixes of four bytes columns, two arrays' block counts, part/parts


PART_REASONS = ("bad-part", "incomplete-batch")
"""The DLQ reasons of :class:`PartError`."""


class PartError(ArgusError, ValueError):
    """Parts that cannot be merged. ``reason``: ``bad-part`` (``part``/``parts`` out of range
    or disagreeing) or ``incomplete-batch`` (a window whose other parts never came)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def _str_bytes(s: str) -> int:
    return len(s.encode()) + 3  # utf-8 + its zig-zag varint length (< 2**20 bytes)


def _header_bytes(rec: Mapping[str, Any]) -> int:
    """Upper bound of the encoded bytes of everything but the events and the names."""
    n = 16 * 5 + 10 * 5  # longs/ints of the header, ten coords
    n += sum(_str_bytes(str(rec.get(k, ""))) for k in ("job", "host", "source"))
    for s in rec.get("streams") or ():
        n += 10 + _str_bytes(str(s.get("kind", ""))) + _str_bytes(str(s.get("label", "")))
    return n + _SLACK


def batch_size_bytes(rec: Mapping[str, Any]) -> int:
    """Upper bound of the encoded size of a ``kernel_batch`` record (bytes, Avro body + 10 of
    framing); within ~200 bytes of the truth."""
    names = rec.get("names") or ()
    cols = sum(len(rec.get(c) or b"") for c, _ in _COLUMNS)
    return _header_bytes(rec) + sum(_str_bytes(str(x)) for x in names) + cols + 10


def split_batch(rec: Mapping[str, Any], max_bytes: int) -> list[dict[str, Any]]:
    """Split one window's ``kernel_batch`` record into parts of at most ``max_bytes`` encoded.

    Parameters
    ----------
    rec : mapping
        A ``kernel_batch`` record (columns packed as on the wire), not split yet.
    max_bytes : int
        Largest encoded record (bytes; :func:`batch_size_bytes` of every part is below it).

    Returns
    -------
    list of dict
        ``[rec]`` with ``part`` 0, ``parts`` 1 when it fits; else consecutive slices of its
        events, each with the names it uses (in the window's dictionary order) and the
        window's header and streams, ``part`` i of ``parts``; ``dropped`` only on part 0.
        A single event whose record alone exceeds ``max_bytes`` is still one part (the
        producer counts it as too large).
    """
    whole = {**rec, "part": 0, "parts": 1}
    if batch_size_bytes(rec) <= max_bytes:
        return [whole]
    names = [str(x) for x in rec.get("names") or ()]
    cols = {c: unpack(rec.get(c) or b"", t, field=c) for c, t in _COLUMNS}
    idx = cols["name_idx"]
    n = int(idx.size)
    nb = np.fromiter((_str_bytes(x) for x in names), dtype=np.int64, count=len(names))
    head = _header_bytes(rec) + 10
    room = max_bytes - head - int(nb.sum())
    step = (
        max(1024, room // EVENT_BYTES)
        if room > 0
        else max(1, (max_bytes - head) // (2 * EVENT_BYTES))
    )
    todo = [(a, min(a + step, n)) for a in range(0, n, step)][::-1]
    spans: list[tuple[int, int, np.ndarray]] = []
    while todo:
        a, b = todo.pop()
        used = np.unique(idx[a:b])
        size = head + int(nb[used].sum()) + EVENT_BYTES * (b - a)
        if size > max_bytes and b - a > 1:
            mid = (a + b) // 2
            todo += [(mid, b), (a, mid)]
            continue
        spans.append((a, b, used))
    if len(spans) == 1:
        return [whole]
    out = []
    for i, (a, b, used) in enumerate(spans):
        remap = np.zeros(max(len(names), 1), dtype=np.uint32)
        remap[used] = np.arange(used.size, dtype=np.uint32)
        part = dict(rec)
        part.update(
            names=[names[j] for j in used.tolist()],
            name_idx=pack(remap[idx[a:b]], "uint32"),
            stream=cols["stream"][a:b].tobytes(),
            start_ns=cols["start_ns"][a:b].tobytes(),
            duration_ns=cols["duration_ns"][a:b].tobytes(),
            dropped=int(rec.get("dropped", 0)) if i == 0 else 0,
            part=i,
            parts=len(spans),
        )
        out.append(part)
    return out


def _part_of(rec: Mapping[str, Any]) -> tuple[int, int]:
    part, parts = rec.get("part", 0), rec.get("parts", 1)
    if not (isinstance(part, int) and isinstance(parts, int) and 0 <= part < parts <= MAX_PARTS):
        raise PartError(
            "bad-part",
            f"kernel_batch {rec.get('job')}/{rec.get('rank')} window {rec.get('window_id')}: "
            f"part {part!r} of {parts!r}; needs 0 <= part < parts <= {MAX_PARTS}",
        )
    return part, parts


def merge_parts(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One ``kernel_batch`` record from all parts of a window, in part order.

    Events are concatenated in part order; the name dictionary is the union in order of
    first use; streams the union by id; ``dropped`` the sum; ``part`` 0 of ``parts`` 1.

    Raises
    ------
    PartError
        ``bad-part``: not exactly parts 0..n-1 of one (job, rank, window_id).
    """
    if not parts:
        raise PartError("bad-part", "no parts to merge")
    first = parts[0]
    key = (first.get("job"), first.get("rank"), first.get("window_id"))
    n = len(parts)
    for i, p in enumerate(parts):
        part, of = _part_of(p)
        if (p.get("job"), p.get("rank"), p.get("window_id")) != key or part != i or of != n:
            raise PartError(
                "bad-part",
                f"kernel_batch {key[0]}/{key[1]} window {key[2]}: merging part {part} of {of} "
                f"of {p.get('job')}/{p.get('rank')} window {p.get('window_id')} as part {i} of {n}",
            )
    if n == 1:
        return {**first, "part": 0, "parts": 1}
    index: dict[str, int] = {}
    name_idx = []
    for p in parts:
        names = [str(x) for x in p.get("names") or ()]
        remap = np.fromiter(
            (index.setdefault(x, len(index)) for x in names), dtype=np.uint32, count=len(names)
        )
        idx = unpack(p.get("name_idx") or b"", "uint32", field="name_idx")
        if idx.size and int(idx.max()) >= remap.size:
            raise PartError(
                "bad-part",
                f"kernel_batch {key[0]}/{key[1]} window {key[2]} part {p.get('part')}: name_idx "
                f"{int(idx.max())} but the part names {remap.size} kernels",
            )
        name_idx.append(remap[idx])
    streams: dict[int, Any] = {}
    for p in parts:
        for s in p.get("streams") or ():
            streams.setdefault(int(s["id"]), s)
    out = dict(first)
    out.update(
        names=list(index),
        name_idx=pack(np.concatenate(name_idx), "uint32"),
        streams=list(streams.values()),
        dropped=sum(int(p.get("dropped", 0)) for p in parts),
        part=0,
        parts=1,
    )
    for c, _ in _COLUMNS[1:]:
        out[c] = b"".join(bytes(p.get(c) or b"") for p in parts)
    return out


@dataclass
class Incomplete:
    """A window some of whose parts never came: what arrived, and the caller's tokens."""

    job: str
    rank: int
    window_id: int
    parts: int
    have: list[int]
    tokens: list[Any] = field(default_factory=list)

    def error(self) -> PartError:
        missing = sorted(set(range(self.parts)) - set(self.have))
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        return PartError(
            "incomplete-batch",
            f"kernel_batch {self.job}/{self.rank} window {self.window_id}: parts {shown} of "
            f"{self.parts} never came (dropped by the producer, or before a restart's "
            f"committed offset); {len(self.have)} parts not summarised",
        )


@dataclass
class _Open:
    parts: int
    opened_s: float  # time.monotonic() of its first part here
    got: dict[int, tuple[Mapping[str, Any], Any]] = field(default_factory=dict)
    nbytes: int = 0


class PartAssembler:
    """Merges the parts of each window as they arrive, in the order of one rank's partition.

    A rank's parts are sent consecutively on its key's partition, so when a record of
    another window of the same (job, rank) arrives, an open window will not complete: it
    is returned as :class:`Incomplete` (the compressor sends its parts to the DLQ). Memory
    is bounded: past ``max_windows`` open windows or ``max_bytes`` of held columns the
    oldest is given up the same way, and :meth:`expire` gives up windows open too long.

    Tokens: every part's token is handed back exactly once, so a caller that holds
    something per part (the compressor holds its Kafka offset uncommitted) can release
    it: in an :class:`Incomplete`, or by :meth:`take_released` (the parts of a window that
    completed, a part replaced by a later copy).
    """

    def __init__(self, *, max_windows: int = 4096, max_bytes: int = 512 * 1024 * 1024) -> None:
        self.max_windows = max_windows
        self.max_bytes = max_bytes
        self._open: OrderedDict[tuple[str, int, int], _Open] = OrderedDict()
        self._by_rank: dict[tuple[str, int], tuple[str, int, int]] = {}
        self._bytes = 0
        self._released: list[Any] = []

    def add(
        self, batch: Mapping[str, Any], token: Any = None
    ) -> tuple[dict[str, Any] | Mapping[str, Any] | None, list[Incomplete]]:
        """Take one record; returns (the window's whole batch when this completed it, else
        None; windows given up). ``token`` (e.g. the Kafka event) comes back with them.

        Raises
        ------
        PartError
            ``bad-part``: ``part``/``parts`` out of range, or ``parts`` disagreeing with
            the window's earlier parts.
        """
        part, parts = _part_of(batch)
        if parts == 1 and not self._by_rank:  # nothing open: a whole window passes through
            return batch, []
        job, rank, window = str(batch["job"]), int(batch["rank"]), int(batch["window_id"])
        key = (job, rank, window)
        given_up: list[Incomplete] = []
        prev = self._by_rank.get((job, rank))
        if prev is not None and prev != key:
            given_up.append(self._give_up(prev))
        if parts == 1:
            return batch, given_up
        entry = self._open.get(key)
        if entry is not None and entry.parts != parts:
            raise PartError(
                "bad-part",
                f"kernel_batch {job}/{rank} window {window}: part {part} says {parts} parts, "
                f"earlier parts said {entry.parts}",
            )
        if entry is None:
            entry = self._open[key] = _Open(parts, time.monotonic())
            self._by_rank[(job, rank)] = key
        size = sum(len(batch.get(c) or b"") for c, _ in _COLUMNS)
        old = entry.got.get(part)
        if old is not None:  # a replayed part: the newer copy wins
            entry.nbytes -= sum(len(old[0].get(c) or b"") for c, _ in _COLUMNS)
            self._bytes -= sum(len(old[0].get(c) or b"") for c, _ in _COLUMNS)
            self._released.append(old[1])
        entry.got[part] = (batch, token)
        entry.nbytes += size
        self._bytes += size
        if len(entry.got) == parts:
            self._pop(key)
            self._released.extend(entry.got[i][1] for i in range(parts))
            return merge_parts([entry.got[i][0] for i in range(parts)]), given_up
        while len(self._open) > self.max_windows or (
            self._bytes > self.max_bytes and len(self._open) > 1
        ):
            given_up.append(self._give_up(next(iter(self._open))))
        return None, given_up

    def flush(self) -> list[Incomplete]:
        """Give up every open window (end of input)."""
        return [self._give_up(k) for k in list(self._open)]

    def expire(self, max_age_s: float, now_s: float | None = None) -> list[Incomplete]:
        """Give up the windows whose first part came over ``max_age_s`` seconds ago
        (``now_s``: ``time.monotonic()`` when omitted). A window's parts leave its producer
        together; one whose rank sends nothing more would otherwise be held for ever."""
        now = time.monotonic() if now_s is None else now_s
        old = [k for k, e in self._open.items() if now - e.opened_s > max_age_s]
        return [self._give_up(k) for k in old]

    def take_released(self) -> list[Any]:
        """The tokens of parts no longer held (their window completed, or a later copy
        replaced them) since the last call."""
        out, self._released = self._released, []
        return out

    @property
    def open_windows(self) -> int:
        return len(self._open)

    def _pop(self, key: tuple[str, int, int]) -> _Open:
        entry = self._open.pop(key)
        self._bytes -= entry.nbytes
        if self._by_rank.get(key[:2]) == key:
            del self._by_rank[key[:2]]
        return entry

    def _give_up(self, key: tuple[str, int, int]) -> Incomplete:
        entry = self._pop(key)
        have = sorted(entry.got)
        return Incomplete(*key, entry.parts, have, [entry.got[i][1] for i in have])


def assemble(
    batches: Iterable[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[Incomplete]]:
    """Merge the parts of every window of a recording, in any order (offline readers).

    Returns the whole windows (unsplit records as they are, split ones merged, in order of
    their first record; a part seen twice counts once) and the windows missing parts.

    Raises
    ------
    PartError
        ``bad-part``: ``part``/``parts`` out of range or disagreeing within a window.
    """
    out: list[Mapping[str, Any] | tuple[str, int, int]] = []
    groups: dict[tuple[str, int, int], dict[int, Mapping[str, Any]]] = {}
    counts: dict[tuple[str, int, int], int] = {}
    for b in batches:
        part, parts = _part_of(b)
        if parts == 1:
            out.append(b)
            continue
        key = (str(b["job"]), int(b["rank"]), int(b["window_id"]))
        if key not in groups:
            groups[key] = {}
            counts[key] = parts
            out.append(key)
        elif counts[key] != parts:
            raise PartError(
                "bad-part",
                f"kernel_batch {key[0]}/{key[1]} window {key[2]}: part {part} says {parts} "
                f"parts, earlier parts said {counts[key]}",
            )
        groups[key][part] = b
    whole: list[Mapping[str, Any]] = []
    missing: list[Incomplete] = []
    for item in out:
        if not isinstance(item, tuple):
            whole.append(item)
            continue
        got, parts = groups[item], counts[item]
        if len(got) == parts:
            whole.append(merge_parts([got[i] for i in range(parts)]))
        else:
            missing.append(Incomplete(*item, parts, sorted(got)))
    return whole, missing
