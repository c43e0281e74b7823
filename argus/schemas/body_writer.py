"""Avro bodies of simple records written in Python, for the hot path of :class:`Codec.encode`.

``fastavro.schemaless_writer`` pays ~1 µs per nested record and ~0.3 µs per field: a
steady-state ``kernel_summary`` (ten coordinates, six stream records, seven byte columns)
took ~18 µs, ~1/30 of the compressor's whole work per 3,000-event window (issue 21). The
writer :func:`body_writer` builds from a schema appends the same bytes (Avro binary
encoding: zig-zag varints, length-prefixed strings and bytes, arrays as one block then 0,
little-endian doubles) with one closure per field.

Only ``string``, ``bytes``, ``int``, ``long``, ``double``, records and arrays are written;
a schema with any other type gets None (use fastavro). A value the writer does not take as
is (another Python type, an ``int`` out of range, a missing field without default) raises
:class:`Unsupported`, and the caller writes it with fastavro, which gives the same bytes or
its own error. Missing fields with a default are written with the default, as fastavro does
(a ``bytes`` field's default is JSON text, which fastavro refuses: so does this writer).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from argus.schemas.step_body import avro_long

__all__ = ["Unsupported", "body_writer"]

Parts = list[bytes]
Writer = Callable[[Parts, Any], None]


class Unsupported(Exception):
    """The value is not one the Python writer takes as is: write it with fastavro."""


_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_NOTHING = object()
_KEPT_MAX = 4096  # kept bytes of nested records, per record type


def _integer(lo: int, hi: int) -> Writer:
    def write(parts: Parts, v: Any) -> None:
        if type(v) is not int or not lo <= v <= hi:
            raise Unsupported
        parts.append(avro_long(v))

    return write


def _string(parts: Parts, v: Any) -> None:
    if type(v) is not str:
        raise Unsupported
    b = v.encode()
    parts.append(avro_long(len(b)))
    parts.append(b)


def _bytes(parts: Parts, v: Any) -> None:
    if type(v) is not bytes:
        raise Unsupported
    parts.append(avro_long(len(v)))
    parts.append(v)


def _double(parts: Parts, v: Any) -> None:
    if type(v) is not float:
        raise Unsupported
    parts.append(struct.pack("<d", v))


def _array(item: Any) -> Writer | None:
    if item == "double":

        def write_doubles(parts: Parts, v: Any) -> None:
            if type(v) is not list or any(type(x) is not float for x in v):
                raise Unsupported
            if v:
                parts.append(avro_long(len(v)))
                parts.append(struct.pack(f"<{len(v)}d", *v))
            parts.append(b"\x00")

        return write_doubles
    each = _writer(item)
    if each is None:
        return None

    def write(parts: Parts, v: Any) -> None:
        if type(v) is not list:
            raise Unsupported
        if v:
            parts.append(avro_long(len(v)))
            for x in v:
                each(parts, x)
        parts.append(b"\x00")

    return write


def _record(schema: dict[str, Any], nested: bool = True) -> Writer | None:
    fields = []
    for f in schema["fields"]:
        w = _writer(f["type"])
        if w is None:
            return None
        fields.append((f["name"], f.get("default", _NOTHING), w))

    def write(parts: Parts, v: Any) -> None:
        if type(v) is not dict:
            raise Unsupported
        for name, default, w in fields:
            x = v.get(name, default)
            if x is _NOTHING:
                raise Unsupported
            w(parts, x)

    flat = all(isinstance(f["type"], str) for f in schema["fields"])
    if not (nested and flat):
        return write
    # a nested record of primitives (a rank's coordinates, a stream's kind): the same few
    # values window after window, their bytes kept by the record's items
    seen: dict[tuple[Any, ...], bytes] = {}

    def write_kept(parts: Parts, v: Any) -> None:
        if type(v) is not dict:
            raise Unsupported
        key = (*v.items(), *map(type, v.values()))  # 1, 1.0 and True are one dict key
        b = seen.get(key)
        if b is None:
            mine: Parts = []
            write(mine, v)
            if len(seen) >= _KEPT_MAX:
                seen.clear()
            b = seen[key] = b"".join(mine)
        parts.append(b)

    return write_kept


_PRIMITIVE: dict[str, Writer] = {
    "string": _string,
    "bytes": _bytes,
    "int": _integer(_INT_MIN, _INT_MAX),
    "long": _integer(_LONG_MIN, _LONG_MAX),
    "double": _double,
}


def _writer(t: Any) -> Writer | None:
    if isinstance(t, str):
        return _PRIMITIVE.get(t)
    if not isinstance(t, dict) or "logicalType" in t:
        return None
    kind = t.get("type")
    if kind == "array":
        return _array(t["items"])
    if kind == "record":
        return _record(t)
    if isinstance(kind, str) and len(t) == 1:
        return _PRIMITIVE.get(kind)
    return None


def body_writer(schema: dict[str, Any]) -> Callable[[Any], bytes] | None:
    """A function writing a record of ``schema`` (the parsed JSON of an ``.avsc``) to its Avro
    body, or None when the schema has a type it does not write (named references included).

    The function raises :class:`Unsupported` for a value it does not take as is."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    write = _record(schema, nested=False)
    if write is None:
        return None

    def body(value: Any) -> bytes:
        parts: Parts = []
        try:
            write(parts, value)
        except (TypeError, ValueError, OverflowError):  # e.g. an unhashable coordinate
            raise Unsupported from None
        return b"".join(parts)

    return body
