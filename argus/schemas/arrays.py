"""Packed little-endian numeric columns carried in Avro ``bytes`` fields.

Large arrays travel as ``bytes`` holding the raw little-endian buffer of a numpy array whose
dtype the schema's field doc names (e.g. ``uint32 LE``). Decoding is zero-copy:
:func:`unpack` returns a read-only view over the bytes.

Examples
--------
>>> import numpy as np
>>> b = pack(np.array([1, 2, 3]), "int64")
>>> len(b)
24
>>> unpack(b, "int64").tolist()
[1, 2, 3]
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from argus.errors import DecodeError

__all__ = ["kernel_id", "kernel_ids", "pack", "unpack"]


def pack(values: npt.ArrayLike, dtype: str) -> bytes:
    """Pack ``values`` as the little-endian buffer of ``dtype`` (e.g. ``"uint32"``)."""
    arr = np.ascontiguousarray(values, dtype=np.dtype(dtype).newbyteorder("<"))
    return arr.tobytes()


def unpack(buf: bytes, dtype: str, *, field: str = "column") -> np.ndarray:
    """View ``buf`` as a 1-D array of little-endian ``dtype`` without copying.

    Raises
    ------
    DecodeError
        When the byte length is not a multiple of the item size.
    """
    dt = np.dtype(dtype).newbyteorder("<")
    if len(buf) % dt.itemsize:
        raise DecodeError(
            "bad-body",
            f"{field}: {len(buf)} bytes is not a multiple of {dt.itemsize} ({dtype})",
        )
    return np.frombuffer(buf, dtype=dt)


def kernel_id(name: str) -> int:
    """Stable 32-bit id of a kernel name (first 4 bytes of BLAKE2b, little-endian).

    The same name gives the same id on every rank and in every process, so summaries can
    carry ids and announce each name only once.
    """
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "little")


def kernel_ids(names: list[str]) -> np.ndarray:
    """(len(names),) uint32 array of :func:`kernel_id`."""
    return np.fromiter((kernel_id(n) for n in names), dtype=np.uint32, count=len(names))
