"""The Python body writer (argus.schemas.body_writer) against fastavro: the same bytes."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from argus.errors import EncodeError
from argus.schemas.body_writer import Unsupported, body_writer
from argus.schemas.codec import Codec
from argus.summaries.summary_record import summarize_batch
from tests.schemas.avro_strategies import for_schema

CODEC = Codec()
RAW = CODEC.schema("kernel_summary").raw
BODY = body_writer(RAW)
PARSED = fastavro.parse_schema(RAW)


def _fastavro(value: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, PARSED, value)
    return buf.getvalue()


def test_kernel_summary_is_written_in_python() -> None:
    assert BODY is not None


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(for_schema(RAW))
def test_any_kernel_summary_has_fastavros_bytes(value: dict[str, Any]) -> None:
    assert BODY is not None
    assert BODY(value) == _fastavro(value)
    assert BODY(value) == _fastavro(value)  # the nested records' kept bytes


def test_a_real_summary_and_missing_defaults() -> None:
    rng = np.random.default_rng(1)
    batch = {
        "job": "j\u00e9",
        "rank": 3,
        "window_id": 7,
        "window_start_ns": 1,
        "window_end_ns": 2,
        "coords": {"dp_rank": 3, "dp_size": 4},
        "streams": [{"id": 7, "kind": "compute", "label": "default"}],
        "names": ["a", "b"],
        "name_idx": rng.integers(0, 2, 500).astype("<u4").tobytes(),
        "stream": np.full(500, 7, "<u4").tobytes(),
        "duration_ns": rng.integers(1, 10**6, 500).astype("<i8").tobytes(),
    }
    rec = summarize_batch(batch)
    assert BODY is not None
    assert BODY(rec) == _fastavro(rec)
    short = {k: v for k, v in rec.items() if k not in ("rejected", "streams")}
    short["coords"] = {"tp_size": 2}  # the other coordinates: their defaults
    assert BODY(short) == _fastavro(short)
    assert CODEC.decode_as("kernel_summary", CODEC.encode("kernel_summary", rec)) == {
        **rec,
        "coords": {
            **rec["coords"],
            **{k: v for k, v in _defaults().items() if k not in rec["coords"]},
        },
    }


def _defaults() -> dict[str, int]:
    coords = next(f for f in RAW["fields"] if f["name"] == "coords")["type"]
    return {f["name"]: f["default"] for f in coords["fields"]}


@pytest.mark.parametrize(
    "change",
    [
        {"rank": np.int64(3)},  # another type: fastavro writes it
        {"rank": 2**31},  # out of an int's range: fastavro's error
        {"coords": {"dp_rank": [1]}},  # unhashable
        {"quantile_levels": [0, 1]},  # ints for doubles
        {"group_kernel": bytearray(b"ab")},
        {"coords": {"dp_rank": 1.0, "dp_size": 2}},  # after the same coordinates as ints
        {"coords": {"dp_rank": True, "dp_size": 2}},
    ],
)
def test_values_it_does_not_take_go_to_fastavro(change: dict[str, Any]) -> None:
    rec = {**_value(), **change}
    assert BODY is not None
    BODY(_value())  # its coordinates' bytes kept
    with pytest.raises(Unsupported):
        BODY(rec)
    try:
        want = _fastavro(rec)
    except Exception:
        with pytest.raises(EncodeError):
            CODEC.encode("kernel_summary", rec)
    else:
        assert CODEC.encode("kernel_summary", rec)[10:] == want


@pytest.mark.parametrize("field", ["job", "extra"])  # no default; a bytes default fastavro refuses
def test_missing_field_is_fastavros_error(field: str) -> None:
    rec = _value()
    del rec[field]
    with pytest.raises(EncodeError):
        CODEC.encode("kernel_summary", rec)


def test_schemas_with_other_types_are_left_to_fastavro() -> None:
    assert (
        body_writer(
            {"type": "record", "name": "U", "fields": [{"name": "x", "type": ["null", "long"]}]}
        )
        is None
    )
    assert (
        body_writer({"type": "record", "name": "F", "fields": [{"name": "x", "type": "float"}]})
        is None
    )
    assert body_writer("long") is None


def _value() -> dict[str, Any]:
    return {
        "job": "j",
        "rank": 1,
        "window_id": 2,
        "window_start_ns": 3,
        "window_end_ns": 4,
        "coords": {"dp_rank": 1, "dp_size": 2},
        "method": "kde-q7l",
        "quantile_levels": [0.5],
        "kernel_names": [{"id": 5, "name": "k"}],
        "group_kernel": b"\x05\x00\x00\x00",
        "group_stream": b"\x07\x00\x00\x00",
        "group_clusters": b"\x01",
        "cluster_count": b"\x02\x00\x00\x00",
        "cluster_quantiles_ns": b"\x00\x00\x80?",
        "extra": b"",
        "n_events": 2,
        "rejected": 0,
        "streams": [],
        "cluster_log_offsets": b"",
    }
