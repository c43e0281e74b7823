"""The hand-written ``step_record`` reader (``argus.schemas.step_body_reader``) gives the dict
fastavro gives for every body of the current schema (keys in fastavro's order), and
fastavro's exception type for truncated and corrupt ones; ``argus.diagnose.read_avro``
reads today's step containers with it."""

from __future__ import annotations

import io
import random
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings

from argus.schemas import load_schemas
from argus.schemas.avro_binary import COORD_FIELDS
from argus.schemas.step_body_reader import PhaseRows, StepRecordReader
from tests.schemas.avro_strategies import for_schema

SCHEMA = load_schemas()["step_record"]
WRITER = fastavro.parse_schema(SCHEMA.raw)
NAMES = ["forward", "", "é☃𝄞", "x" * 70, "dp_grad_sync"]


def body_of(rec: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, WRITER, rec)
    return buf.getvalue()


def fastavro_decode(body: bytes) -> dict[str, Any] | str:
    """fastavro's record, or ``EOFError`` / ``ValueError`` (any other failure) by name."""
    bio = io.BytesIO(body)
    try:
        rec = fastavro.schemaless_reader(bio, WRITER, None)
    except Exception as exc:
        return "EOFError" if isinstance(exc, EOFError) else "ValueError"
    return rec if bio.tell() == len(body) else "trailing"  # type: ignore[return-value]


def reader_decode(reader: StepRecordReader, body: bytes) -> dict[str, Any] | str:
    try:
        rec, end = reader.decode(body)
    except EOFError:
        return "EOFError"
    except ValueError:
        return "ValueError"
    return rec if end == len(body) else "trailing"


def same_order(a: Any, b: Any) -> bool:
    """Equal, with every dict's keys in the same order."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same_order(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same_order, a, b))
    return bool(a == b and type(a) is type(b))


def random_record(rnd: random.Random, phases: int) -> dict[str, Any]:
    """A step of ``phases`` phases: ns timestamps of 9-byte varints (or any long), durations
    of 3 or 4 bytes (or any), names that repeat."""
    start = rnd.choice([1_780_000_000_000_000_000, rnd.randint(-(1 << 63), (1 << 63) - 1)])
    return {
        "job": rnd.choice(["job", "", "ジョブ"]),
        "rank": rnd.choice([0, 7, 300, -(1 << 31), (1 << 31) - 1]),
        "step": rnd.choice([0, 5, 1 << 40]),
        "start_ns": start,
        "end_ns": start + rnd.randint(0, 1 << 30) if start < 1 << 62 else 0,
        "host": rnd.choice(["node0001", "h" * 80]),
        "coords": {f: rnd.choice([0, 1, 3, 16, -5, 100, (1 << 31) - 1]) for f in COORD_FIELDS},
        "phases": [
            {
                "name": rnd.choice(NAMES),
                "stream_kind": rnd.choice(["compute", "comm", "p2p"]),
                "start_ns": rnd.choice([start + rnd.randint(0, 1 << 27), rnd.randint(-9, 9)]),
                "duration_ns": rnd.choice(  # 3 or 4 bytes (the unpacked ones), or any
                    [
                        rnd.randint(1 << 14, (1 << 20) - 1),
                        rnd.randint(1 << 20, (1 << 26) - 1),
                        rnd.randint(-(1 << 63), (1 << 63) - 1),
                    ]
                ),
                "timer": rnd.choice(["cuda_event", "cpu", "y" * 64]),
            }
            for _ in range(phases)
        ],
        "collector": {
            "overhead_ns": rnd.choice([0, 1 << 33]),
            "dropped_records": rnd.choice([0, 70]),
            "dropped_bytes": 0,
            "errors": rnd.choice([0, -1]),
            "queue_depth": rnd.choice([0, 1 << 20]),
            "backed_off": rnd.random() < 0.5,
            "kernels": rnd.random() < 0.5,
        },
    }


@settings(max_examples=300, deadline=None)
@given(for_schema(SCHEMA.raw))
def test_any_record_as_fastavro(rec: dict[str, Any]) -> None:
    body = body_of(rec)
    got, end = StepRecordReader().decode(b"ab" + body, 2)
    assert end == 2 + len(body)
    assert same_order(got, fastavro_decode(body)) and got == rec


def test_many_records_one_reader_as_fastavro() -> None:
    """One reader over records whose strings and coordinates repeat (its caches)."""
    rnd = random.Random(21)
    reader = StepRecordReader()
    for _ in range(600):
        body = body_of(random_record(rnd, rnd.choice([0, 1, 9])))
        got = reader_decode(reader, body)
        assert same_order(got, fastavro_decode(body))
        assert isinstance(got, dict)
        got["coords"]["dp_rank"] = -1  # a cached Coords: each record has its own dict
        for p in got["phases"]:
            p["name"] = "mutated"


def test_records_of_a_block() -> None:
    rnd = random.Random(3)
    recs = [random_record(rnd, 9) for _ in range(50)]
    block = b"".join(body_of(r) for r in recs)
    got = StepRecordReader().records(b"x" + block, len(recs), 1)
    assert same_order(got, recs)
    with pytest.raises(EOFError):
        StepRecordReader().records(block, len(recs) + 1)


def test_truncated_bodies_raise_fastavros_type() -> None:
    rnd = random.Random(5)
    reader = StepRecordReader()
    for phases in (0, 2, 9):
        body = body_of(random_record(rnd, phases))
        reader_decode(reader, body)  # its strings cached
        kinds = set()
        for k in range(len(body)):
            want = fastavro_decode(body[:k])
            assert isinstance(want, str)
            assert reader_decode(reader, body[:k]) == want, k
            kinds.add(want)
        assert "EOFError" in kinds


def test_corrupt_bodies_as_fastavro() -> None:
    """Random bytes overwritten (and some cut): the same record or the same exception type."""
    rnd = random.Random(8)
    reader = StepRecordReader()
    bodies = [body_of(random_record(rnd, n)) for n in (0, 3, 9)]
    outcomes = set()
    for i in range(6000):
        b = bytearray(bodies[i % 3])
        for _ in range(rnd.randint(1, 3)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        if rnd.random() < 0.3:
            b = b[: rnd.randrange(len(b) + 1)]
        want = fastavro_decode(bytes(b))
        got = reader_decode(reader, bytes(b))
        assert got == want
        assert not isinstance(want, dict) or same_order(got, want)
        outcomes.add(want if isinstance(want, str) else "ok")
    assert {"ok", "EOFError", "ValueError"} <= outcomes


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_read_avro_containers_as_fastavro(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    """``argus.diagnose.read_avro`` reads today's step_record containers with the reader
    (several blocks); the records are fastavro's, keys in its order."""
    from argus.diagnose import read_avro

    rnd = random.Random(6)
    recs = [random_record(rnd, rnd.choice([0, 9])) for _ in range(300)]
    path = tmp_path / "steps.avro"
    with open(path, "wb") as fh:
        fastavro.writer(fh, WRITER, recs, codec=codec, sync_interval=2000)
    with open(path, "rb") as fh:
        assert sum(1 for _ in fastavro.block_reader(fh)) > 5
        fh.seek(0)
        want = list(fastavro.reader(fh))
    calls: list[int] = []
    records = StepRecordReader.records
    monkeypatch.setattr(
        StepRecordReader,
        "records",
        lambda self, data, n: calls.append(n) or records(self, data, n),
    )
    name, it = read_avro(path)
    assert name == "step_record"
    got = list(it)
    assert same_order(got, want) and got == recs
    assert sum(calls) == len(recs)


# --- phase_rows: the phases as the steps router's rows, read a block at a time -----------

LAYOUT = [("self_attention", "compute"), ("tp_allreduce", "comm"), ("pp_p2p", "p2p")]


def layout_record(rnd: random.Random, rank: int) -> dict[str, Any]:
    """A step as the simulator writes them: the same phases in every record, ns starts of
    9 bytes, durations of 3 or 4 bytes (a few layouts, repeating)."""
    rec = random_record(rnd, 0)
    start = 1_780_000_000_000_000_000 + rnd.randint(0, 1 << 40)
    rec.update(rank=rank, start_ns=start, end_ns=start + (1 << 26), host="node0001")
    rec["phases"] = [
        {
            "name": name,
            "stream_kind": kind,
            "start_ns": start + rnd.randint(0, 1 << 25),
            "duration_ns": rnd.choice(
                [rnd.randint(1 << 14, (1 << 20) - 1), rnd.randint(1 << 20, (1 << 26) - 1)]
            ),
            "timer": "cuda_event",
        }
        for name, kind in LAYOUT
    ]
    return rec


def as_rows(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` with its phases as ``phase_rows`` gives them."""
    rows = [(p["name"], p["stream_kind"], p["duration_ns"], p["start_ns"]) for p in rec["phases"]]
    return {**rec, "phases": rows}


def rows_outcome(reader: StepRecordReader, block: bytes, n: int) -> list[dict[str, Any]] | str:
    try:
        got = reader.records(block, n)
    except EOFError:
        return "EOFError"
    except ValueError:
        return "ValueError"
    for rec in got:
        assert type(rec["phases"]) is PhaseRows
        rec["phases"] = list(rec["phases"])
    return got


def mixed_block(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    return [
        layout_record(rnd, i) if rnd.random() < 0.9 else random_record(rnd, rnd.choice([0, 9]))
        for i in range(n)
    ]


def test_phase_rows_records_as_dicts() -> None:
    """Blocks of repeating layouts (read at once) and others (one phase at a time): the
    rows of fastavro's phases, the other fields and their order as fastavro's."""
    rnd = random.Random(11)
    reader = StepRecordReader(phase_rows=True)
    for _ in range(20):
        recs = mixed_block(rnd, 60)
        block = b"".join(body_of(r) for r in recs)
        got = reader.records(b"xy" + block, len(recs), 2)
        assert all(type(r["phases"]) is PhaseRows for r in got)
        want = [as_rows(r) for r in recs]
        assert [list(r) for r in got] == [list(r) for r in want]
        assert [{**r, "phases": list(r["phases"])} for r in got] == want
    assert 8 <= len(reader._all) <= 32  # the layouts learnt (8 of LAYOUT), then reused
    one, _end = StepRecordReader(phase_rows=True).decode(body_of(recs[0]))
    assert type(one["phases"]) is PhaseRows and list(one["phases"]) == want[0]["phases"]


def test_phase_rows_cut_and_corrupt_blocks_as_dicts() -> None:
    """Cut or overwritten blocks: the records of the dict reader (as rows) or the same
    exception type."""
    rnd = random.Random(12)
    rows, dicts = StepRecordReader(phase_rows=True), StepRecordReader()
    recs = [layout_record(rnd, i) for i in range(8)]
    block = b"".join(body_of(r) for r in recs)
    rows.records(block, len(recs))  # the layouts learnt
    outcomes = set()
    for i in range(3000):
        b = bytearray(block)
        if i % 2:
            for _ in range(rnd.randint(1, 3)):
                b[rnd.randrange(len(b))] = rnd.randrange(256)
        else:
            b = b[: rnd.randrange(len(b))]
        got = rows_outcome(rows, bytes(b), len(recs))
        try:
            want: Any = [as_rows(r) for r in dicts.records(bytes(b), len(recs))]
        except EOFError:
            want = "EOFError"
        except ValueError:
            want = "ValueError"
        assert got == want
        outcomes.add(want if isinstance(want, str) else "ok")
    assert {"ok", "EOFError", "ValueError"} <= outcomes


def test_phase_rows_route_step_as_dicts() -> None:
    """The router's item of a record with rows is that of the same record with dicts."""
    from argus.streams.roles.steps import route_step

    rnd = random.Random(13)
    recs = [layout_record(rnd, i) for i in range(30)]
    block = b"".join(body_of(r) for r in recs)
    for a, b in zip(
        StepRecordReader().records(block, 30),
        StepRecordReader(phase_rows=True).records(block, 30),
        strict=True,
    ):
        assert route_step(a) == route_step(b)
        assert type(route_step(b)[0][1]["phases"]) is list


def test_read_avro_phase_rows(tmp_path: Any) -> None:
    """``read_avro(..., phase_rows=True)``: fastavro's records, phases as rows."""
    from argus.diagnose import read_avro

    rnd = random.Random(14)
    recs = mixed_block(rnd, 300)
    path = tmp_path / "steps.avro"
    with open(path, "wb") as fh:
        fastavro.writer(fh, WRITER, recs, codec="deflate", sync_interval=2000)
    name, it = read_avro(path, phase_rows=True)
    got = [{**r, "phases": list(r["phases"])} for r in it]
    assert name == "step_record" and got == [as_rows(r) for r in recs]


def test_the_codec_reads_step_records_as_with_fastavro() -> None:
    """``Codec.decode`` (the live path, this reader) and ``Codec(step_record_reader=False)``
    (fastavro): the same record, or the same ``DecodeError`` reason, for whole, cut and
    corrupt bodies; trailing bytes refused by both."""
    from argus.errors import DecodeError
    from argus.schemas import Codec
    from argus.schemas.codec import SINGLE_OBJECT_MAGIC

    fast, slow = Codec(), Codec(step_record_reader=False)
    head = SINGLE_OBJECT_MAGIC + SCHEMA.fingerprint

    def outcome(codec: Codec, data: bytes) -> Any:
        try:
            return codec.decode_as("step_record", data)
        except DecodeError as e:
            return e.reason

    rnd = random.Random(13)
    reasons = set()
    for i in range(1500):
        body = bytearray(body_of(random_record(rnd, rnd.choice([0, 1, 9]))))
        if i % 3 == 1:
            body[rnd.randrange(len(body))] = rnd.randrange(256)
        elif i % 3 == 2:
            body = body[: rnd.randrange(len(body) + 1)] if i % 2 else body + b"\x00"
        want = outcome(slow, head + bytes(body))
        got = outcome(fast, head + bytes(body))
        assert got == want
        if isinstance(want, dict):
            assert same_order(got, want)
        reasons.add(want if isinstance(want, str) else "ok")
    assert {"ok", "truncated", "bad-body"} <= reasons
