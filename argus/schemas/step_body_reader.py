"""Hand-written reader of the Avro binary body of ``step_record`` (the current schema only),
for ``argus diagnose``'s container files (:func:`argus.diagnose.read_avro`) and the live
records (:meth:`argus.schemas.Codec.decode`, one at a time: 36 against fastavro's 42-45 µs
a 450-byte record, ``bench/bench_codec_decode.py``; ``Codec(step_record_reader=False)``
reads with fastavro). A recorded job's steps are read a container block at a time: 61,440
records of nine phases (512 ranks x 120 steps) in 0.90-0.97 s of user CPU and 54,000 page
faults, against fastavro's container reader's 1.05-1.11 s and 82,500 (2-core VM,
decompression included in both).

It gives the dict fastavro gives (same keys in the same order, same values;
``tests/schemas/test_step_body_reader.py`` checks it against fastavro), with one difference
in representation only: equal strings (job, host, the phases' names, kinds and timers) read
from recent records are the same ``str`` objects (28 MB fewer at that size). Where it is
quick:

* the nanosecond timestamps (9-byte varints) and a phase's duration (3-4 bytes) are read
  with one ``struct`` unpack and a table of 16-bit pairs, not byte by byte;
* strings of under 64 bytes are looked up by their encoded bytes (a phase's name and kind
  as one pair);
* coordinates of ten one-byte varints are remembered by their bytes (a copy each record).

With ``phase_rows=True`` (``argus diagnose``) a record's ``phases`` are the rows the steps
router sends on (:class:`PhaseRows`), and :meth:`StepRecordReader.records` reads a block's
phases arrays by their layout: an array whose bytes match a recent array's layout (the same
names, kinds and timers, varints of the same widths: one integer comparison) has its values
read with the block's others in a few numpy operations; the rest, phase by phase as above.
The 512 x 120 job: 12 layouts; the steps file in 1.2-1.35 s of CPU, was 2.2-2.5 s (this
VM, ~2x slower than the figures above), the router's conversion 0.43 -> 0.24 s.

Avro binary: ``int``/``long`` as zigzag varints, ``string`` as a long byte length and UTF-8,
``boolean`` as one byte (fastavro: any byte but 0 is true), a record as its fields in
order, an array as blocks of (count, items) ended by a count of 0; a negative count ``-n``
means ``n`` items preceded by the block's byte size.

Errors (as :mod:`argus.schemas.kernel_batch_body`): ``EOFError`` where fastavro raises it
(the body ends inside a value, a negative length), ``ValueError`` where it raises another
type (the body ends inside a multi-byte varint, invalid UTF-8).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from argus.schemas.kernel_batch_body import _PAIR, _BodyReader, _long, _ts

__all__ = ["PhaseRows", "StepRecordReader"]

_COLLECTOR = ("overhead_ns", "dropped_records", "dropped_bytes", "errors", "queue_depth")
_PAIRS_KEPT = 4096  # encoded phase (name, kind) pairs kept (cleared when full)
_TS_DUR = struct.Struct("<HHHHBHH").unpack_from  # a 9-byte varint, then a 4-byte one
_LAYOUTS_KEPT = 32  # phases layouts learnt per reader (then no more)
_NINE = np.arange(9, dtype=np.int64)
_SHIFTS = (7 * _NINE).astype(np.uint64)


class PhaseRows(list[tuple[str, str, int, int]]):
    """A record's ``phases`` as the rows the steps router sends on: ``(name, stream_kind,
    duration_ns, start_ns)`` per phase (:func:`argus.streams.roles.steps.route_step` takes
    them as they are instead of converting one dict per phase)."""

    __slots__ = ()


class StepRecordReader(_BodyReader):
    """Decode ``step_record`` bodies; keeps recent strings and coordinates.

    ``phase_rows=True``: each record's ``phases`` is a :class:`PhaseRows` of tuples instead
    of a list of dicts (``argus diagnose``: 553,000 dicts fewer at 512 ranks x 120 steps,
    and no conversion in the router); the other fields are the same.
    """

    __slots__ = ("_all", "_layouts", "_pairs", "_rows", "_table")

    def __init__(self, *, phase_rows: bool = False) -> None:
        super().__init__()
        self._pairs: dict[bytes, tuple[str, str]] = {}  # a phase's encoded name and kind
        self._rows = phase_rows
        self._all: list[_Layout] = []  # the layouts learnt, by id
        self._layouts: list[_Layout] = []  # the same, most recently seen first
        self._table: tuple[np.ndarray, np.ndarray] | None = None  # _layout_table(_all)

    def _decode(self, buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        rec, pos = self._head(buf, pos)
        rec["phases"], pos = self._phases(buf, pos)
        return rec, self._tail(buf, pos, rec)

    def _head(self, buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        """The fields before ``phases``."""
        text = self._text
        rec: dict[str, Any] = {}
        rec["job"], pos = text(buf, pos)
        rec["rank"], pos = _long(buf, pos)
        rec["step"], pos = _long(buf, pos)
        rec["start_ns"], pos = _ts(buf, pos)
        rec["end_ns"], pos = _ts(buf, pos)
        rec["host"], pos = text(buf, pos)
        rec["coords"], pos = self._coords_at(buf, pos)
        return rec, pos

    @staticmethod
    def _tail(buf: bytes, pos: int, rec: dict[str, Any]) -> int:
        """The ``collector`` field, into ``rec``; the offset after it (the record's end)."""
        col: dict[str, Any] = {}
        for k in _COLLECTOR:
            b = buf[pos]
            if b < 0x80:
                col[k], pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                col[k], pos = _long(buf, pos)
        col["backed_off"] = buf[pos] != 0
        col["kernels"] = buf[pos + 1] != 0
        rec["collector"] = col
        return pos + 2

    def records(self, data: bytes, count: int, pos: int = 0) -> list[dict[str, Any]]:
        """As :meth:`_BodyReader.records`; with ``phase_rows``, a ``phases`` array laid out
        as a recent one's (:class:`_Layout`: the same names, kinds and timers, varints of
        the same widths) is recognised in one comparison and its values are read for the
        whole block at once (:func:`_layout_values`), not phase by phase."""
        if not self._rows:
            return super().records(data, count, pos)
        buf = data if type(data) is bytes else bytes(data)
        head, tail, phases, layouts = self._head, self._tail, self._phases, self._layouts
        size, out = len(buf), []
        hits: list[tuple[dict[str, Any], _Layout, int]] = []
        try:
            for _ in range(count):
                rec, pos = head(buf, pos)
                for i, lay in enumerate(layouts):
                    end = pos + lay.size
                    if (
                        end <= size
                        and int.from_bytes(buf[pos:end], "little") & lay.mask == lay.want
                    ):
                        rec["phases"] = None  # read below (the key in its place)
                        hits.append((rec, lay, pos))
                        if i:  # move to front: the usual layouts are tried first
                            layouts.insert(0, layouts.pop(i))
                        pos = end
                        break
                else:
                    start = pos
                    rec["phases"], pos = phases(buf, pos)
                    self._learn(buf, start, pos)
                pos = tail(buf, pos, rec)
                out.append(rec)
        except IndexError:
            raise EOFError(self._EOF) from None
        if hits:
            self._fill(buf, hits)
        return out

    def _learn(self, buf: bytes, start: int, end: int) -> None:
        """Keep the layout of the ``phases`` array at ``buf[start:end]`` (read already)."""
        if len(self._layouts) >= _LAYOUTS_KEPT:
            return
        lay = _layout_of(buf, start, end, self._text, len(self._all))
        if lay is None:
            return
        self._all.append(lay)
        self._layouts.insert(0, lay)
        self._table = None  # rebuilt with it

    def _fill(self, buf: bytes, hits: list[tuple[dict[str, Any], _Layout, int]]) -> None:
        """Each hit record's ``phases`` rows, its values read from ``buf`` at once."""
        if self._table is None:
            self._table = _layout_table(self._all)
        offs, keep = self._table
        at = np.fromiter((h[2] for h in hits), np.int64, len(hits))
        which = np.fromiter((h[1].id for h in hits), np.intp, len(hits))
        values = _layout_values(buf, at, offs[which], keep[which])
        starts, durs = values[:, 0::2].tolist(), values[:, 1::2].tolist()
        for (rec, lay, _), t0, dur in zip(hits, starts, durs, strict=True):
            # zip: a layout of fewer phases than the table's widest ends at its last
            rec["phases"] = PhaseRows(zip(lay.names, lay.kinds, dur, t0, strict=False))

    def _phases(self, buf: bytes, pos: int) -> tuple[list[Any], int]:
        """The ``phases`` array at ``pos``: a phase's name and kind looked up as one pair of
        encoded strings, its start and duration (9 and 3-4 bytes, the usual) in one unpack,
        its timer looked up inline (and not kept in a :class:`PhaseRows`)."""
        text, texts, pairs, p, size = self._text, self._texts, self._pairs, _PAIR, len(buf)
        rows = self._rows
        out: list[Any] = PhaseRows() if rows else []
        n, pos = _long(buf, pos)
        while n:
            if n < 0:  # a block with its byte size
                pos = _long(buf, pos)[1]
                n = -n
            for _ in range(n):
                got, b = None, buf[pos]
                if b < 0x80:  # the encoded pair ends at `end` if both lengths are one byte
                    end = pos + 1 + (b >> 1)
                    if end < size and buf[end] < 0x80:
                        end += 1 + (buf[end] >> 1)
                        got = pairs.get(buf[pos:end])  # a cut pair is never a key
                if got is not None:
                    name, kind = got
                    pos = end
                else:
                    start = pos
                    name, pos = text(buf, pos)
                    kind, pos = text(buf, pos)
                    if len(pairs) >= _PAIRS_KEPT:
                        pairs.clear()
                    pairs[buf[start:pos]] = (name, kind)
                try:
                    a, b, c, d, e, f, g = _TS_DUR(buf, pos)
                except struct.error:  # under 13 bytes left
                    a = b = c = d = e = f = g = 0
                if a & b & c & d & f & 0x8080 == 0x8080 and e < 0x80 and not g & 0x8000:
                    z = p[a] | p[b] << 14 | p[c] << 28 | p[d] << 42 | e << 56
                    t0 = (z >> 1) ^ -(z & 1)
                    if g & 0x80:  # a 4-byte duration
                        z = p[f] | p[g] << 14
                        pos += 13
                    else:  # 3 bytes
                        z = p[f] | (g & 0x7F) << 14
                        pos += 12
                    dur = (z >> 1) ^ -(z & 1)
                else:
                    t0, pos = _ts(buf, pos)
                    dur, pos = _long(buf, pos)
                b = buf[pos]
                timer = texts.get(buf[pos : pos + 1 + (b >> 1)]) if b < 0x80 else None
                if timer is None:
                    timer, pos = text(buf, pos)
                else:
                    pos += 1 + (b >> 1)
                if rows:
                    out.append((name, kind, dur, t0))
                    continue
                out.append(
                    {
                        "name": name,
                        "stream_kind": kind,
                        "start_ns": t0,
                        "duration_ns": dur,
                        "timer": timer,
                    }
                )
            n, pos = _long(buf, pos)
        return out, pos


@dataclass(frozen=True)
class _Layout:
    """The byte layout of one ``phases`` array: its phases' names, kinds and timers (their
    encodings) and the widths of its varints (a phase's start and duration). An array
    whose ``size`` bytes, as a little-endian integer, give ``want`` under ``mask`` has this
    layout: ``mask`` keeps every byte of the count, the strings and the final 0, and the
    continuation bit of every varint byte.

    ``offsets``: each phase's start and duration varints, in that order, as (offset from
    the array's start, width in bytes), 2 per phase."""

    id: int
    size: int
    mask: int
    want: int
    names: tuple[str, ...]
    kinds: tuple[str, ...]
    offsets: tuple[tuple[int, int], ...]


def _varint_width(buf: bytes, pos: int) -> int:
    """Bytes of the varint at ``pos`` (11 if over 10 or cut)."""
    for w in range(10):
        if pos + w >= len(buf):
            return 11
        if buf[pos + w] < 0x80:
            return w + 1
    return 11


def _layout_of(
    buf: bytes, start: int, end: int, text: Callable[[bytes, int], tuple[str, int]], lid: int
) -> _Layout | None:
    """The layout of the ``phases`` array read already at ``buf[start:end]``; None where
    the values are not all read in one pass (several blocks, a varint over 9 bytes)."""
    n, pos = _long(buf, start)
    if n < 0:
        return None
    names: list[str] = []
    kinds: list[str] = []
    offsets: list[tuple[int, int]] = []
    for _ in range(n):
        name, pos = text(buf, pos)
        kind, pos = text(buf, pos)
        names.append(name)
        kinds.append(kind)
        for _v in range(2):  # the start, then the duration
            w = _varint_width(buf, pos)
            if w > 9:
                return None
            offsets.append((pos - start, w))
            pos += w
        pos = text(buf, pos)[1]  # the timer
    if pos + 1 != end or buf[pos] != 0:
        return None
    mask, want = bytearray(b"\xff" * (end - start)), bytearray(buf[start:end])
    for off, w in offsets:
        for j in range(w):
            mask[off + j] = 0x80
            want[off + j] = 0x80 if j < w - 1 else 0
    return _Layout(
        id=lid,
        size=end - start,
        mask=int.from_bytes(mask, "little"),
        want=int.from_bytes(want, "little"),
        names=tuple(names),
        kinds=tuple(kinds),
        offsets=tuple(offsets),
    )


def _layout_table(layouts: list[_Layout]) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, keep)`` of the layouts by id: (L, V) int64 offsets of their varints
    (V the most any has; 0 past a layout's own) and (L, V, 9) uint64 masks of the value
    bits of each varint's bytes (0x7F within its width, else 0)."""
    v = max((len(lay.offsets) for lay in layouts), default=0)
    offs = np.zeros((len(layouts), v), dtype=np.int64)
    keep = np.zeros((len(layouts), v, 9), dtype=np.uint64)
    for i, lay in enumerate(layouts):
        for j, (off, w) in enumerate(lay.offsets):
            offs[i, j] = off
            keep[i, j, :w] = 0x7F
    return offs, keep


def _layout_values(buf: bytes, at: np.ndarray, offs: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """(R, V) int64: the zigzag varints of R ``phases`` arrays at offsets ``at`` (R,) of
    ``buf``, each array's varints at ``offs`` (R, V) from its start, their value bits
    ``keep`` (R, V, 9)."""
    data = np.frombuffer(buf, dtype=np.uint8)
    idx = (at[:, None] + offs)[:, :, None] + _NINE
    np.minimum(idx, len(data) - 1, out=idx)  # bytes past the body are masked off
    z = ((data[idx].astype(np.uint64) & keep) << _SHIFTS).sum(axis=2, dtype=np.uint64)
    return (z >> np.uint64(1)).view(np.int64) ^ -(z & np.uint64(1)).view(np.int64)
