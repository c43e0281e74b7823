"""Hand-written reader of the Avro binary body of ``kernel_batch`` (the current schema only).

``fastavro.schemaless_reader`` spends most of a 3,000-event record's decode on the name
dictionary (~100 strings of ~300 characters, the same list in every record of a producer)
and copies the four event columns into new ``bytes``. This reader gives the same dict
(same keys, same values; ``tests/schemas/test_kernel_batch_body.py`` checks it against
fastavro), with these differences in representation only:

* a name dictionary whose encoded bytes equal one seen recently is not decoded again: the
  record gets a new list of the same ``str`` objects (:class:`KernelBatchReader` keeps the
  last few dictionaries);
* the ``job``, ``host`` and ``source`` strings of recent records are the same ``str``
  objects;
* with ``shared_streams=True``, a stream list read from the cache shares its dicts with
  the records before (each record its own list);
* the columns are ``bytes`` copies (default, what fastavro gives) or, with
  ``columns="view"``, zero-copy ``memoryview`` slices of the body. The codec uses ``bytes``:
  views saved 0-3 us of a 3,000-event record's ~210 us in the compressor (unaligned int64
  columns; the copies are ~7 us with freed blocks kept), and
  ``validate_kernel_batch_columns`` counts events only in ``bytes`` columns.

Avro binary: ``int``/``long`` as zigzag varints, ``string``/``bytes`` as a long byte length
and the bytes, a record as its fields in order, an array as blocks of (count, items) ended
by a count of 0; a negative count ``-n`` means ``n`` items preceded by the block's byte size.

Errors: ``EOFError`` where fastavro raises it (the body ends inside a value, a negative
length), ``ValueError`` where it raises another type (the codec maps the first to
``DecodeError("truncated")``, the rest to ``"bad-body"``, as for fastavro's). A varint over
10 bytes is read as fastavro reads it (into 64 bits, a byte's shift taken mod 64). Trailing
bytes are the caller's to check (the returned end offset).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Literal

from argus.schemas.avro_binary import COORD_FIELDS  # the same argus.Coords record

__all__ = ["KernelBatchReader"]

_COLUMNS = ("name_idx", "stream", "start_ns", "duration_ns")
_TAIL = ("dropped", "part", "parts")
_KEY = 48  # bytes of an array's encoding that key the cache
_U64 = (1 << 64) - 1
_CACHED = 16  # array prefixes kept (name dictionaries and stream lists; cleared when full)
_ALIKE = 4  # arrays kept per prefix, newest first
_COORDS_KEPT = 16_384  # coordinates kept (cleared when full; ~0.35 kB each)
_TEXTS_KEPT = 4096  # job, host and source strings kept (cleared when full)


def _long(buf: bytes, pos: int) -> tuple[int, int]:
    """``(value, next offset)`` of the zigzag varint at ``pos``; ``IndexError`` at the end."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n = len(buf)
    if pos + 1 < n and buf[pos + 1] < 0x80:  # two bytes (a column's length): no loop
        z = (b & 0x7F) | (buf[pos + 1] << 7)
        return (z >> 1) ^ -(z & 1), pos + 2
    z, shift = b & 0x7F, 7
    while True:
        pos += 1
        if pos >= n:  # fastavro: IndexError, reported as a bad body
            raise ValueError("body ends inside a varint")
        b = buf[pos]
        z |= (b & 0x7F) << (shift & 63)  # fastavro's uint64 shifts (x86: count mod 64)
        if b < 0x80:
            z &= _U64
            return (z >> 1) ^ -(z & 1), pos + 1
        shift += 7


_PAIR = [(h & 0x7F) | ((h >> 8) & 0x7F) << 7 for h in range(1 << 16)]
"""A little-endian 16-bit pair of varint bytes -> their 14 value bits."""
_TS = struct.Struct("<HHHHB").unpack_from  # a 9-byte varint


def _ts(buf: bytes, pos: int) -> tuple[int, int]:
    """``(value, next offset)`` of the ``long`` at ``pos``; one unpack for 9 bytes (a
    nanosecond timestamp), :func:`_long` otherwise."""
    try:
        a, b, c, d, e = _TS(buf, pos)
    except struct.error:  # under 9 bytes left
        return _long(buf, pos)
    if a & b & c & d & 0x8080 == 0x8080 and e < 0x80:  # 8 continued bytes, then the last
        p = _PAIR
        z = p[a] | p[b] << 14 | p[c] << 28 | p[d] << 42 | e << 56
        return (z >> 1) ^ -(z & 1), pos + 9
    return _long(buf, pos)


_HEAD_READ = (
    ("rank", _long),
    ("window_id", _long),
    ("window_start_ns", _ts),
    ("window_end_ns", _ts),
)
"""The head's fields and their readers (the window's ns bounds: 9 bytes in one unpack)."""


def _span(buf: bytes, pos: int) -> tuple[int, int]:
    """``(start, end)`` of the ``bytes``/``string`` value at ``pos``."""
    size, pos = _long(buf, pos)
    if size < 0:  # as fastavro reports it
        raise EOFError(f"negative length {size}")
    if pos + size > len(buf):
        raise EOFError(f"body ends inside a value of {size} bytes")
    return pos, pos + size


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    a, b = _span(buf, pos)
    return buf[a:b].decode(), b


def _stream(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
    """A ``StreamInfo``."""
    i, pos = _long(buf, pos)
    kind, pos = _string(buf, pos)
    label, pos = _string(buf, pos)
    return {"id": i, "kind": kind, "label": label}, pos


def _count(buf: bytes, pos: int) -> tuple[int, int]:
    """An array block's item count (a negative count's byte size skipped, as fastavro)."""
    c, pos = _long(buf, pos)
    if c < 0:
        pos = _long(buf, pos)[1]
        c = -c
    return c, pos


Item = Callable[[bytes, int], tuple[Any, int]]


class _BodyReader:
    """What the hand-written body readers share (:class:`KernelBatchReader`,
    :class:`argus.schemas.step_body_reader.StepRecordReader`): :meth:`decode` and
    :meth:`records` around the subclass's ``_decode`` (a first byte past the end, an
    ``IndexError``, is fastavro's ``EOFError``), recent ``Coords`` and strings."""

    __slots__ = ("_coords", "_texts")
    _EOF = "body ends inside a value"  # the EOFError's message

    def __init__(self) -> None:
        self._texts: dict[bytes, str] = {}  # a string's encoding -> its str
        self._coords: dict[bytes, dict[str, int]] = {}  # ten one-byte varints -> Coords

    def _text(self, buf: bytes, pos: int) -> tuple[str, int]:
        """The ``string`` at ``pos``, from the cache when its encoding is a recent one's (job,
        host, source, a phase's strings: one object for every record of a producer)."""
        b = buf[pos]
        if b < 0x80 and not b & 1:  # a one-byte length (under 64 bytes)
            end = pos + 1 + (b >> 1)
            got = self._texts.get(buf[pos:end])  # a cut string is never a key
            if got is not None:
                return got, end
        a, end = _span(buf, pos)
        got = buf[a:end].decode()
        if len(self._texts) >= _TEXTS_KEPT:
            self._texts.clear()
        self._texts[buf[pos:end]] = got
        return got, end

    def _decode(self, buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        raise NotImplementedError

    def decode(self, data: bytes, pos: int = 0) -> tuple[dict[str, Any], int]:
        """``(record, end)``: the record whose body starts at offset ``pos`` of ``data`` and
        the offset just after it.

        Raises
        ------
        EOFError
            The body ends inside the record, or a negative length (as fastavro).
        ValueError
            The body ends inside a multi-byte varint (fastavro: ``IndexError``), invalid
            UTF-8 (``UnicodeDecodeError``).
        """
        buf = data if type(data) is bytes else bytes(data)
        try:
            return self._decode(buf, pos)
        except IndexError:
            raise EOFError(self._EOF) from None

    def records(self, data: bytes, count: int, pos: int = 0) -> list[dict[str, Any]]:
        """The ``count`` records whose bodies follow one another from offset ``pos`` of
        ``data`` (an Avro container's block), each as :meth:`decode` reads it; raises as it.
        One call a block: ~0.3 us a record less than :meth:`decode` in a loop."""
        buf = data if type(data) is bytes else bytes(data)
        decode, out = self._decode, []
        try:
            for _ in range(count):
                rec, pos = decode(buf, pos)
                out.append(rec)
        except IndexError:
            raise EOFError(self._EOF) from None
        return out

    def _coords_at(self, buf: bytes, pos: int) -> tuple[dict[str, int], int]:
        """``Coords`` at ``pos`` (a new dict); ten one-byte varints (any ``*_rank``/``*_size``
        < 64) are remembered by their bytes."""
        key = buf[pos : pos + 10]
        got = self._coords.get(key)
        if got is not None:
            return dict(got), pos + 10
        start, coords = pos, {}
        for f in COORD_FIELDS:
            coords[f], pos = _long(buf, pos)
        if pos - start == 10:  # each varint one byte: these bytes always read so
            if len(self._coords) >= _COORDS_KEPT:
                self._coords.clear()
            self._coords[key] = dict(coords)
        return coords, pos


class KernelBatchReader(_BodyReader):
    """Decode ``kernel_batch`` bodies; keeps recent name dictionaries, stream lists and
    coordinates.

    Parameters
    ----------
    columns : {"bytes", "view"}
        ``bytes``: the four event columns copied (as fastavro gives them); ``view``:
        ``memoryview`` slices of the body (zero-copy; they keep the body alive).
    shared_streams : bool
        False: each record's ``streams`` are new dicts (as fastavro's). True: a stream list
        read from the cache (the same bytes as a recent one's) shares its dicts with the
        records before (each record its own list), for a caller that only reads them
        (``argus diagnose``: ~1.2 kB less a 6-stream record, with the shared strings 80 MB
        and 20,000 page faults less at 512 ranks x 120 steps).
    """

    __slots__ = ("_copy", "_seen", "_share")
    _EOF = "body ends inside a long"

    def __init__(
        self, columns: Literal["bytes", "view"] = "bytes", *, shared_streams: bool = False
    ) -> None:
        super().__init__()
        self._copy = columns == "bytes"
        self._share = shared_streams
        # (array kind, first _KEY bytes) -> [(an array's whole encoding, its items)], newest first
        self._seen: dict[tuple[int, bytes], list[tuple[bytes, tuple[Any, ...]]]] = {}

    def _decode(self, buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
        """One record; one-byte varints read inline (most heads and tails), the rest by
        :func:`_long` (~4.5 us a 80-event record of the 512-rank simulation, was ~9)."""
        rec: dict[str, Any] = {}
        rec["job"], pos = self._text(buf, pos)
        for k, read in _HEAD_READ:
            b = buf[pos]
            if b < 0x80:
                rec[k], pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                rec[k], pos = read(buf, pos)
        rec["host"], pos = self._text(buf, pos)
        rec["coords"], pos = self._coords_at(buf, pos)
        rec["source"], pos = self._text(buf, pos)
        names, pos = self._array(buf, pos, 0, _string)
        rec["names"] = list(names)
        mv = None if self._copy else memoryview(buf)
        for k in _COLUMNS:
            a, pos = _span(buf, pos)
            rec[k] = buf[a:pos] if mv is None else mv[a:pos]
        streams, pos = self._array(buf, pos, 1, _stream)
        rec["streams"] = list(streams) if self._share else [d.copy() for d in streams]
        for k in _TAIL:
            b = buf[pos]
            if b < 0x80:
                rec[k], pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                rec[k], pos = _long(buf, pos)
        return rec, pos

    def _array(self, buf: bytes, pos: int, kind: int, item: Item) -> tuple[tuple[Any, ...], int]:
        """The array at ``pos`` (items read by ``item``), from the cache if its bytes are a
        recent array's: the same bytes parse to the same items, ending at the same place."""
        key = (kind, buf[pos : pos + _KEY])
        alike = self._seen.get(key)
        for enc, items in alike or ():
            if buf.startswith(enc, pos):
                return items, pos + len(enc)
        start, got = pos, []
        c, pos = _count(buf, pos)
        while c:
            for _ in range(c):
                x, pos = item(buf, pos)
                got.append(x)
            c, pos = _count(buf, pos)
        if alike is None:
            if len(self._seen) >= _CACHED:
                self._seen.clear()
            alike = self._seen[key] = []
        alike.insert(0, (buf[start:pos], tuple(got)))
        del alike[_ALIKE:]
        return alike[0][1], pos
