"""The wire contract: every schema parses, every record round-trips, bad bytes give one typed error."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import fastavro
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from argus.schemas import (
    SINGLE_OBJECT_MAGIC,
    Codec,
    DecodeError,
    EncodeError,
    SchemaNotFound,
    kernel_id,
    load_schemas,
    pack,
    unpack,
)
from argus.topics import TOPICS

from .avro_strategies import for_schema

SCHEMAS = load_schemas()
CODEC = Codec()
REGISTRY_CODEC = Codec(registry_url="mock://test-codec")


def test_every_topic_has_a_schema_and_every_schema_parses() -> None:
    assert {t.record for t in TOPICS} <= set(SCHEMAS)
    files = sorted(Path(__file__).parents[2].joinpath("argus/schemas").glob("*.avsc"))
    assert len(files) == len(SCHEMAS) == 10
    for f in files:
        fastavro.parse_schema(json.loads(f.read_text()))


def test_fingerprints_follow_the_avro_spec_byte_order() -> None:
    # Avro's test vector: the CRC-64-AVRO fingerprint of "null" is 7195948357588979594 (LE on the wire)
    from fastavro.schema import fingerprint

    assert bytes.fromhex(fingerprint('"null"', "CRC-64-AVRO")) == (7195948357588979594).to_bytes(
        8, "little"
    )
    assert len({s.fingerprint for s in SCHEMAS.values()}) == len(SCHEMAS)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_round_trip_of_every_record_type(name: str) -> None:
    strat = for_schema(SCHEMAS[name].raw)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(strat)
    def check(value: dict) -> None:
        for codec in (CODEC, REGISTRY_CODEC):
            data = codec.encode(name, value)
            got_name, got = codec.decode(data)
            assert got_name == name
            assert got == value

    check()


@given(st.lists(st.integers(0, 2**32 - 1), max_size=50))
def test_packed_columns_round_trip_zero_copy(values: list[int]) -> None:
    buf = pack(values, "uint32")
    arr = unpack(buf, "uint32")
    assert arr.tolist() == values
    assert not arr.flags.writeable  # a view over the message bytes, not a copy


def test_packed_columns_extremes_and_length_errors() -> None:
    ext = np.array([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max])
    assert unpack(pack(ext, "int64"), "int64").tolist() == ext.tolist()
    assert unpack(b"", "float32").size == 0
    with pytest.raises(DecodeError, match="not a multiple of 4"):
        unpack(b"\x00" * 5, "uint32", field="name_idx")


def test_kernel_id_is_stable() -> None:
    assert kernel_id("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") == kernel_id(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    )
    assert 0 <= kernel_id("x") < 2**32
    assert kernel_id("a") != kernel_id("b")


DLQ = {"source_topic": "t", "value": b"x", "error_type": "E", "reason": "r", "failed_ns": 1}


def test_single_object_frame_layout() -> None:
    data = CODEC.encode("dlq_record", DLQ)
    assert data[:2] == SINGLE_OBJECT_MAGIC
    assert data[2:10] == SCHEMAS["dlq_record"].fingerprint


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\xc3", "bad-magic"),
        (b"\xc3\x01\x01\x02", "truncated"),
        (b"\xc3\x01" + b"\xff" * 8 + b"\x00", "unknown-fingerprint"),
        (b"\x00\x00\x00", "truncated"),
        (b"\x00\x00\x00\x00\x07\x02", "unknown-schema-id"),
        (b'{"json": true}', "bad-magic"),
    ],
)
def test_typed_errors_name_what_was_wrong(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        CODEC.decode(data)
    assert info.value.reason == reason
    assert reason in str(info.value)


def test_truncated_body_and_trailing_bytes() -> None:
    data = CODEC.encode("dlq_record", DLQ)
    for cut in range(10, len(data)):
        with pytest.raises(DecodeError) as info:
            CODEC.decode(data[:cut])
        assert info.value.reason in {"truncated", "bad-body"}
    with pytest.raises(DecodeError, match="trailing"):
        CODEC.decode(data + b"\x00")


def test_wrong_record_and_unknown_schema() -> None:
    data = CODEC.encode("dlq_record", DLQ)
    with pytest.raises(DecodeError, match="expected alert"):
        CODEC.decode_as("alert", data)
    with pytest.raises(SchemaNotFound):
        CODEC.encode("nope", {})


def test_encode_error_names_the_record() -> None:
    with pytest.raises(EncodeError, match="dlq_record"):
        CODEC.encode("dlq_record", {**DLQ, "failed_ns": "soon"})


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_escape_as_anything_but_decode_error(data: bytes) -> None:
    for frame in (data, SINGLE_OBJECT_MAGIC + SCHEMAS["step_record"].fingerprint + data):
        with contextlib.suppress(DecodeError):
            CODEC.decode(frame)
