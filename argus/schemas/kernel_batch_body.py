"""Hand-written reader of the Avro binary body of ``kernel_batch`` (the current schema only).

``fastavro.schemaless_reader`` spends most of a 3,000-event record's decode on the name
dictionary (~100 strings of ~300 characters, the same list in every record of a producer)
and copies the four event columns into new ``bytes``. This reader gives the same dict
(same keys, same values; ``tests/schemas/test_kernel_batch_body.py`` checks it against
fastavro), with two differences in representation only:

* a name dictionary whose encoded bytes equal one seen recently is not decoded again: the
  record gets a new list of the same ``str`` objects (:class:`KernelBatchReader` keeps the
  last few dictionaries);
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

from collections.abc import Callable
from typing import Any, Literal

from argus.schemas.step_body import COORD_FIELDS  # the same argus.Coords record

__all__ = ["KernelBatchReader"]

_COLUMNS = ("name_idx", "stream", "start_ns", "duration_ns")
_KEY = 48  # bytes of a name dictionary's encoding that key the cache
_U64 = (1 << 64) - 1
_CACHED = 16  # array prefixes kept (name dictionaries and stream lists)
_ALIKE = 4  # arrays kept per prefix


class KernelBatchReader:
    """Decode ``kernel_batch`` bodies; keeps recent name dictionaries and stream lists.

    Parameters
    ----------
    columns : {"bytes", "view"}
        ``bytes``: the four event columns copied (as fastavro gives them); ``view``:
        ``memoryview`` slices of the body (zero-copy; they keep the body alive).
    """

    __slots__ = ("_copy", "_seen")

    def __init__(self, columns: Literal["bytes", "view"] = "bytes") -> None:
        self._copy = columns == "bytes"
        # (array kind, first _KEY bytes) -> [(an array's whole encoding, its items)], newest first
        self._seen: dict[tuple[int, bytes], list[tuple[bytes, tuple[Any, ...]]]] = {}

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
        n = len(buf)

        def long() -> int:
            nonlocal pos
            b = buf[pos]  # IndexError past the end: EOFError below
            pos += 1
            if b < 0x80:
                return (b >> 1) ^ -(b & 1)
            z, shift = b & 0x7F, 7
            while True:
                if pos >= n:  # fastavro: IndexError, reported as a bad body
                    raise ValueError("body ends inside a varint")
                b = buf[pos]
                pos += 1
                z |= (b & 0x7F) << (shift & 63)  # fastavro's uint64 shifts (x86: count mod 64)
                if b < 0x80:
                    z &= _U64
                    return (z >> 1) ^ -(z & 1)
                shift += 7

        def end_of(size: int) -> int:
            if size < 0:  # as fastavro reports it
                raise EOFError(f"negative length {size}")
            if pos + size > n:
                raise EOFError(f"body ends inside a value of {size} bytes")
            return pos + size

        def string() -> str:
            nonlocal pos
            end = end_of(long())
            s, pos = buf[pos:end].decode(), end
            return s

        def count() -> int:
            c = long()
            if c < 0:
                long()  # the block's byte size, unused (as fastavro)
                c = -c
            return c

        def cached(kind: int, item: Callable[[], Any]) -> tuple[Any, ...]:
            """The array at ``pos`` (items read by ``item``), from the cache if its bytes
            are a recent array's: the same bytes parse to the same items, ending there."""
            nonlocal pos
            start = pos
            key = (kind, buf[start : start + _KEY])
            alike = self._seen.get(key)
            for enc, items in alike or ():
                if buf.startswith(enc, start):
                    pos = start + len(enc)
                    return items
            got: list[Any] = []
            c = count()
            while c:
                got += [item() for _ in range(c)]
                c = count()
            if alike is None:
                if len(self._seen) >= _CACHED:
                    del self._seen[next(iter(self._seen))]
                alike = self._seen[key] = []
            alike.insert(0, (buf[start:pos], tuple(got)))
            del alike[_ALIKE:]
            return alike[0][1]

        def stream() -> tuple[int, str, str]:
            return long(), string(), string()

        try:
            rec: dict[str, Any] = {
                "job": string(),
                "rank": long(),
                "window_id": long(),
                "window_start_ns": long(),
                "window_end_ns": long(),
                "host": string(),
                "coords": {f: long() for f in COORD_FIELDS},
                "source": string(),
                "names": list(cached(0, string)),
            }
            mv = memoryview(buf)
            for col in _COLUMNS:
                end = end_of(long())
                rec[col] = buf[pos:end] if self._copy else mv[pos:end]
                pos = end
            rec["streams"] = [{"id": i, "kind": k, "label": lb} for i, k, lb in cached(1, stream)]
            rec["dropped"] = long()
            rec["part"] = long()
            rec["parts"] = long()
        except IndexError:
            raise EOFError("body ends inside a long") from None
        return rec, pos
