"""Hand-written reader of the Avro binary body of ``step_record`` (the current schema only),
for ``argus diagnose``'s container files (:func:`argus.diagnose.read_avro`).

The live path keeps fastavro: :meth:`argus.schemas.Codec.decode` reads ``step_record``
bodies with ``fastavro.schemaless_reader`` (the live steps-path bar's floor is measured with
it). Here, a recorded job's steps are read a container block at a time: 61,440 records of
nine phases (512 ranks x 120 steps) in 0.90-0.97 s of user CPU and 54,000 page faults,
against fastavro's container reader's 1.05-1.11 s and 82,500 (2-core VM, decompression
included in both).

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
from typing import Any

from argus.schemas.kernel_batch_body import _BodyReader, _long, _span

__all__ = ["StepRecordReader"]

_COLLECTOR = ("overhead_ns", "dropped_records", "dropped_bytes", "errors", "queue_depth")
_TEXTS_KEPT = 4096  # encoded strings kept (cleared when full)
_PAIR = [(h & 0x7F) | ((h >> 8) & 0x7F) << 7 for h in range(1 << 16)]
"""A little-endian 16-bit pair of varint bytes -> their 14 value bits."""
_TS = struct.Struct("<HHHHB").unpack_from  # a 9-byte varint
_TS_DUR = struct.Struct("<HHHHBHH").unpack_from  # a 9-byte varint, then a 4-byte one


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


class StepRecordReader(_BodyReader):
    """Decode ``step_record`` bodies; keeps recent strings and coordinates."""

    __slots__ = ("_pairs",)

    def __init__(self) -> None:
        super().__init__()
        self._pairs: dict[bytes, tuple[str, str]] = {}  # a phase's encoded name and kind

    def _text(self, buf: bytes, pos: int) -> tuple[str, int]:
        """The ``string`` at ``pos``, from the cache when its encoding is a recent one's."""
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
        text = self._text
        rec: dict[str, Any] = {}
        rec["job"], pos = text(buf, pos)
        rec["rank"], pos = _long(buf, pos)
        rec["step"], pos = _long(buf, pos)
        rec["start_ns"], pos = _ts(buf, pos)
        rec["end_ns"], pos = _ts(buf, pos)
        rec["host"], pos = text(buf, pos)
        rec["coords"], pos = self._coords_at(buf, pos)
        rec["phases"], pos = self._phases(buf, pos)
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
        return rec, pos + 2

    def _phases(self, buf: bytes, pos: int) -> tuple[list[dict[str, Any]], int]:
        """The ``phases`` array at ``pos``: a phase's name and kind looked up as one pair of
        encoded strings, its start and duration (9 and 3-4 bytes, the usual) in one unpack,
        its timer looked up inline."""
        text, texts, pairs, p, size = self._text, self._texts, self._pairs, _PAIR, len(buf)
        out: list[dict[str, Any]] = []
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
                    if len(pairs) >= _TEXTS_KEPT:
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
