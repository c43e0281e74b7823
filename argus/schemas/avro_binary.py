"""Avro binary primitives shared by the hand-written encoders (``step_record`` bodies in the
collectors, ``kernel_summary`` bodies in the compressor) and the ``kernel_batch`` reader.

Avro binary: ``int``/``long`` as zigzag varints, ``string`` as a long byte length and its
UTF-8 bytes.
"""

from __future__ import annotations

__all__ = ["COORD_DEFAULTS", "COORD_FIELDS", "avro_long", "avro_string"]

#: ``Coords`` fields in schema order (the ``argus.Coords`` record of every raw schema)
COORD_FIELDS = (
    "dp_rank",
    "dp_size",
    "tp_rank",
    "tp_size",
    "pp_rank",
    "pp_size",
    "ep_rank",
    "ep_size",
    "cp_rank",
    "cp_size",
)
#: each ``Coords`` field's schema default (a ``*_size`` 1, a ``*_rank`` 0)
COORD_DEFAULTS = {f: (1 if f.endswith("_size") else 0) for f in COORD_FIELDS}
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_SMALL = [bytes((z,)) for z in range(128)]


def avro_long(n: int, lo: int = _LONG_MIN, hi: int = _LONG_MAX) -> bytes:
    """Zigzag varint of ``n``; ``OverflowError`` outside ``[lo, hi]`` (Avro ``long``)."""
    if not lo <= n <= hi:
        raise OverflowError(
            f"{n} is out of range for an Avro {'int' if hi < (1 << 32) else 'long'}"
        )
    z = (n << 1) if n >= 0 else ((-n) << 1) - 1
    if z < 0x80:
        return _SMALL[z]
    if z < 0x4000:  # two bytes: a column's length, mostly
        return bytes(((z & 0x7F) | 0x80, z >> 7))
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def avro_string(s: str) -> bytes:
    """Length-prefixed UTF-8 of ``s`` (Avro ``string``)."""
    b = s.encode()
    return avro_long(len(b)) + b
