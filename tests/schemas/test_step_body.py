"""The collectors' hand-rolled ``step_record`` body (``argus.schemas.step_body``) is the bytes
``fastavro.schemaless_writer`` writes for ``step_record.avsc``, byte for byte, over the whole
range of every field; out-of-range numbers and wrong types raise instead of writing bad bytes."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.collectors.runtime import STATS_FIELDS
from argus.schemas import Codec, load_schemas
from argus.schemas.avro_binary import COORD_FIELDS, avro_long
from argus.schemas.step_body import StepBodyEncoder

LONG = st.integers(-(1 << 63), (1 << 63) - 1)
INT = st.integers(-(1 << 31), (1 << 31) - 1)
TEXT = st.text(max_size=40)
WRITER = fastavro.parse_schema(load_schemas()["step_record"].raw)


def fastavro_body(rec: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, WRITER, rec)
    return buf.getvalue()


Args = tuple[str, int, str, dict[str, int], str, tuple[int, int, int], list[Any], tuple[Any, ...]]


def record(args: Args) -> dict[str, Any]:
    """The dict fastavro writes for the encoder's arguments ``(job, rank, host, coords, timer,
    (step, start_ns, end_ns), phases, stats)``."""
    job, rank, host, coords, timer, head, phases, stats = args
    out = dict(zip(("step", "start_ns", "end_ns"), head, strict=True))
    out.update(job=job, rank=rank, host=host)
    out["coords"] = {f: coords.get(f, 1 if f.endswith("_size") else 0) for f in COORD_FIELDS}
    out["phases"] = [
        dict(zip(("name", "stream_kind", "start_ns", "duration_ns"), p, strict=True), timer=timer)
        for p in phases
    ]
    out["collector"] = dict(zip(STATS_FIELDS, stats, strict=True))
    return out


ARGS = st.tuples(
    TEXT,
    INT,
    TEXT,
    st.dictionaries(st.sampled_from(COORD_FIELDS), INT),
    st.sampled_from(["cpu", "cuda_event"]),
    st.tuples(LONG, LONG, LONG),
    st.lists(st.tuples(TEXT, TEXT, LONG, LONG), max_size=6),
    st.tuples(LONG, LONG, LONG, LONG, INT, st.booleans(), st.booleans()),
)


@settings(max_examples=300, deadline=None)
@given(args=ARGS)
def test_body_is_fastavros_bytes(args: Args) -> None:
    job, rank, host, coords, timer, head, phases, stats = args
    enc = StepBodyEncoder(job, rank, host, coords, timer)
    want = fastavro_body(record(args))
    assert enc.encode(*head, phases, stats) == want
    assert enc.encode(*head, phases, stats) == want  # again, from the name cache


def test_a_real_step_decodes_through_the_codec() -> None:
    """Framed by the codec's header, the body decodes as the record it was written from."""
    coords = {"dp_rank": 1, "dp_size": 2}
    enc = StepBodyEncoder("gpt", 1, "node-7", coords, "cpu")
    t0 = 1_764_670_000_000_000_000
    phases = [("forward", "compute", t0 + 10, 3_000_000), ("dp_allreduce", "comm", t0 + 9, 5)]
    stats = (45_000, 2, 300, 0, 17, False, True)
    c = Codec()
    rec = c.decode_as(
        "step_record", c.header("step_record") + enc.encode(9, t0, t0 + 8_000_000, phases, stats)
    )
    assert rec == record(
        ("gpt", 1, "node-7", coords, "cpu", (9, t0, t0 + 8_000_000), phases, stats)
    )
    assert c.encode("step_record", rec) == c.header("step_record") + enc.encode(
        9, t0, t0 + 8_000_000, phases, stats
    )


@pytest.mark.parametrize(
    ("head", "stats", "exc"),
    [
        ((1 << 63, 0, 0), (0, 0, 0, 0, 0, False, False), OverflowError),
        ((0, -(1 << 63) - 1, 0), (0, 0, 0, 0, 0, False, False), OverflowError),
        ((0, 0, 0), (0, 0, 0, 0, 1 << 31, False, False), OverflowError),  # queue_depth: int
        ((0, 0, 0), (0, 0, 0, 0, 0, 1, False), TypeError),  # backed_off: a boolean
        ((0, 1.5, 0), (0, 0, 0, 0, 0, False, False), TypeError),
    ],
)
def test_out_of_range_or_mistyped_values_raise(
    head: tuple[Any, ...], stats: tuple[Any, ...], exc: type[Exception]
) -> None:
    enc = StepBodyEncoder("j", 0, "h", {}, "cpu")
    with pytest.raises(exc):
        enc.encode(*head, [], stats)


def test_bad_constant_parts_raise_at_construction() -> None:
    with pytest.raises(ValueError, match="unknown coords"):
        StepBodyEncoder("j", 0, "h", {"xx_rank": 1}, "cpu")
    with pytest.raises(OverflowError):
        StepBodyEncoder("j", 1 << 31, "h", {}, "cpu")  # rank: an Avro int


def test_avro_long_edges() -> None:
    assert avro_long(0) == b"\x00" and avro_long(-1) == b"\x01" and avro_long(1) == b"\x02"
    assert avro_long(-64) == b"\x7f" and avro_long(64) == b"\x80\x01"
    assert avro_long((1 << 63) - 1) == b"\xfe" + b"\xff" * 8 + b"\x01"
    assert avro_long(-(1 << 63)) == b"\xff" * 9 + b"\x01"
