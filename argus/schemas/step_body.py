"""Hand-rolled Avro binary body of ``step_record`` for the collectors' delivery thread.

The collector writes one ``step_record`` per rank-step. Building its dict and handing it to
``fastavro.schemaless_writer`` cost ~45 us of the delivery thread's CPU per record on the
loaded 2-core bench VM (a tenth of a millisecond-scale step's budget); this writes the same
bytes straight from the values, with the constant parts (job, rank, host, coordinates, the
phase names) encoded once. The output is the Avro binary body (no framing) that
``fastavro.schemaless_writer`` writes for ``step_record.avsc``, byte for byte
(``tests/schemas/test_step_body.py`` checks it against fastavro); the codec's framing goes in
front (:meth:`argus.schemas.Codec.header`).

Avro binary: ``int``/``long`` as zigzag varints, ``string`` as a long byte length and UTF-8,
``boolean`` as one byte, an array as one block (item count, items, then ``0``; an empty array
is just ``0``), a record as its fields in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from argus.schemas.avro_binary import COORD_DEFAULTS, COORD_FIELDS, avro_long, avro_string

__all__ = ["StepBodyEncoder"]

_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_NAME_CACHE_MAX = 4096  # phase names and kinds encoded once each, up to this many


class StepBodyEncoder:
    """Avro body of ``step_record`` for one rank (constant parts encoded once).

    Parameters
    ----------
    job, host : str
        The record's ``job`` and ``host``.
    rank : int
        The record's ``rank``.
    coords : mapping
        ``Coords`` fields (missing ones take their schema defaults).
    timer : str
        Every phase's ``timer`` (``cpu`` or ``cuda_event``).
    """

    __slots__ = ("_head", "_mid", "_names", "_timer")

    def __init__(
        self, job: str, rank: int, host: str, coords: Mapping[str, int], timer: str
    ) -> None:
        unknown = set(coords) - set(COORD_FIELDS)
        if unknown:
            raise ValueError(f"unknown coords fields {sorted(unknown)}")
        self._head = avro_string(job) + avro_long(rank, _INT_MIN, _INT_MAX)
        self._mid = avro_string(host) + b"".join(
            avro_long(int(coords.get(f, COORD_DEFAULTS[f])), _INT_MIN, _INT_MAX)
            for f in COORD_FIELDS
        )
        self._timer = avro_string(timer)
        self._names: dict[str, bytes] = {}

    def _name(self, s: str) -> bytes:
        b = self._names.get(s)
        if b is None:
            b = avro_string(s)
            if len(self._names) < _NAME_CACHE_MAX:
                self._names[s] = b
        return b

    def encode(
        self,
        step: int,
        start_ns: int,
        end_ns: int,
        phases: Iterable[tuple[str, str, int, int]],
        stats: tuple[int, int, int, int, int, bool, bool],
    ) -> bytes:
        """The body of one record.

        Parameters
        ----------
        step, start_ns, end_ns : int
            The record's ``step``, ``start_ns``, ``end_ns`` (ns since the epoch).
        phases : iterable of (name, stream_kind, start_ns, duration_ns)
            ``Phase`` entries in order.
        stats : tuple
            ``CollectorStats``: (overhead_ns, dropped_records, dropped_bytes, errors,
            queue_depth, backed_off, kernels).

        Raises
        ------
        OverflowError
            A number out of its Avro type's range.
        TypeError, AttributeError
            A value of the wrong type.
        """
        parts = [self._head, avro_long(step), avro_long(start_ns), avro_long(end_ns), self._mid]
        ph = list(phases)
        if ph:
            parts.append(avro_long(len(ph)))
            name, timer = self._name, self._timer
            for n, k, s, d in ph:
                parts += (name(n), name(k), avro_long(s), avro_long(d), timer)
        parts.append(b"\x00")
        oh, drec, dbytes, errs, depth, backed, kern = stats
        parts += (
            avro_long(oh),
            avro_long(drec),
            avro_long(dbytes),
            avro_long(errs),
            avro_long(depth, _INT_MIN, _INT_MAX),
            _bool(backed),
            _bool(kern),
        )
        return b"".join(parts)


def _bool(v: Any) -> bytes:
    if not isinstance(v, bool):
        raise TypeError(f"{v!r} is not a boolean")
    return b"\x01" if v else b"\x00"
