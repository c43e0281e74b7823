"""Fuzz the codec: any bytes decode to a record or raise DecodeError with a known reason."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from argus.schemas import DecodeError
from argus.schemas.codec import SINGLE_OBJECT_MAGIC, load_schemas

from .strategies import CODEC, FUZZ, byte_mutants, good_records

DECODE_REASONS = {
    "empty",
    "bad-magic",
    "truncated",
    "unknown-fingerprint",
    "unknown-schema-id",
    "bad-body",
    "wrong-record",
}
FPS = [s.fingerprint for s in load_schemas().values()]
GOOD = {n: CODEC.encode(n, r) for n, r in good_records().items()}


def _decode(data: bytes, expect: str | None = None) -> None:
    try:
        name, rec = CODEC.decode(data, expect=expect)
    except DecodeError as exc:
        assert exc.reason in DECODE_REASONS, exc
        return
    assert isinstance(rec, dict) and name in load_schemas()
    # whatever decodes is a valid value of its schema (overlong varints decode too, so the
    # bytes need not round-trip)
    CODEC.encode(name, rec)


@FUZZ
@given(st.binary(max_size=512))
def test_arbitrary_bytes(data: bytes) -> None:
    _decode(data)


@FUZZ
@given(st.sampled_from(FPS), st.binary(max_size=512))
def test_arbitrary_bodies_behind_a_known_fingerprint(fp: bytes, body: bytes) -> None:
    _decode(SINGLE_OBJECT_MAGIC + fp + body)


@FUZZ
@given(st.data())
def test_mutated_valid_records(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(GOOD)))
    raw = data.draw(byte_mutants(GOOD[name]))
    _decode(raw)
    _decode(raw, expect=name)
