"""The hand-written ``kernel_batch`` reader (``argus.schemas.kernel_batch_body``) gives the dict
fastavro gives for every body of the current schema, and the codec's ``DecodeError`` reason
fastavro's failure would give for truncated and corrupt ones; other schema versions keep
fastavro."""

from __future__ import annotations

import io
import json
import random
from importlib import resources
from typing import Any

import fastavro
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.errors import DecodeError
from argus.schemas import Codec, load_schemas
from argus.schemas.avro_binary import COORD_FIELDS, avro_long, avro_string
from argus.schemas.codec import SINGLE_OBJECT_MAGIC
from argus.schemas.kernel_batch_body import KernelBatchReader
from tests.schemas.avro_strategies import for_schema

SCHEMA = load_schemas()["kernel_batch"]
WRITER = fastavro.parse_schema(SCHEMA.raw)
HEADER = SINGLE_OBJECT_MAGIC + SCHEMA.fingerprint
NAMES = ["a", "", "é☃𝄞 kernel", "x" * 1000, "void gemm<float, 128>(float*, int)", "名前"]


def fastavro_decode(body: bytes) -> dict[str, Any] | str:
    """fastavro's record, or the codec's ``DecodeError`` reason for its failure."""
    bio = io.BytesIO(body)
    try:
        rec = fastavro.schemaless_reader(bio, WRITER, None)
    except Exception as exc:
        return "truncated" if isinstance(exc, EOFError) else "bad-body"
    return rec if bio.tell() == len(body) else "bad-body"  # type: ignore[return-value]


def codec_decode(codec: Codec, body: bytes) -> dict[str, Any] | str:
    try:
        return codec.decode_as("kernel_batch", HEADER + body)
    except DecodeError as exc:
        return exc.reason


def as_bytes(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in rec.items()}


def body_of(rec: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, WRITER, rec)
    return buf.getvalue()


def random_record(rnd: random.Random, n: int) -> dict[str, Any]:
    """A record with ``n`` events, names from :data:`NAMES` (repeating dictionaries)."""
    names = rnd.sample(NAMES, rnd.randint(0, len(NAMES)))
    r = np.random.default_rng(rnd.randrange(1 << 30))
    return {
        "job": rnd.choice(["job", "", "ジョブ"]),
        "rank": rnd.choice([0, 7, -(1 << 31), (1 << 31) - 1]),
        "window_id": rnd.choice([0, 1, 1 << 40, (1 << 63) - 1]),
        "window_start_ns": rnd.randint(-(1 << 63), (1 << 63) - 1),
        "window_end_ns": rnd.randint(0, 1 << 62),
        "host": rnd.choice(["h", "node-0001"]),
        "coords": {f: rnd.choice([0, 1, 3, -5, (1 << 31) - 1]) for f in COORD_FIELDS},
        "source": rnd.choice(["cupti", "simulator"]),
        "names": names,
        "name_idx": r.integers(0, max(len(names), 1), n, dtype="<u4").tobytes(),
        "stream": r.integers(0, 1 << 32, n, dtype="<u4").tobytes(),
        "start_ns": r.integers(-(1 << 63), (1 << 63) - 1, n, dtype="<i8").tobytes(),
        "duration_ns": r.integers(0, 1 << 40, n, dtype="<i8").tobytes(),
        "streams": [
            {"id": rnd.randint(-(1 << 63), (1 << 63) - 1), "kind": k, "label": rnd.choice(NAMES)}
            for k in rnd.sample(["compute", "comm", "p2p", "unknown"], rnd.randint(0, 4))
        ],
        "dropped": rnd.choice([0, 12, (1 << 63) - 1]),
        "part": rnd.choice([0, 2]),
        "parts": rnd.choice([1, 3]),
    }


@settings(max_examples=300, deadline=None)
@given(for_schema(SCHEMA.raw), st.sampled_from(["bytes", "view"]))
def test_any_record_as_fastavro(rec: dict[str, Any], columns: Any) -> None:
    body = body_of(rec)
    got, end = KernelBatchReader(columns).decode(HEADER + body, len(HEADER))
    assert end == len(HEADER) + len(body)
    assert as_bytes(got) == fastavro_decode(body) == rec
    assert all(
        type(got[c]) is (bytes if columns == "bytes" else memoryview)
        for c in ("name_idx", "stream", "start_ns", "duration_ns")
    )


def test_many_records_one_reader_as_fastavro() -> None:
    """One reader over records whose dictionaries repeat (its cache), the codec's path."""
    rnd = random.Random(21)
    codec, view = Codec(), KernelBatchReader("view")
    slow = Codec(kernel_batch_reader=False)
    for _ in range(400):
        rec = random_record(rnd, rnd.choice([0, 1, 5, 3000]))
        body = body_of(rec)
        want = fastavro_decode(body)
        assert want == rec
        got = codec.decode_as("kernel_batch", HEADER + body)
        assert got == want
        assert as_bytes(view.decode(HEADER + body, len(HEADER))[0]) == want
        assert slow.decode_as("kernel_batch", HEADER + body) == want
        got["names"].append("mutated")  # a cached dictionary: each record has its own list
        got["streams"][:0] = [{"id": 0}]


def _blocks(items: list[bytes], sizes: list[int], negative: bool) -> bytes:
    """An Avro array of the encoded ``items`` in blocks of ``sizes`` (negative counts with
    their byte size when ``negative``), then the closing 0."""
    out, i = b"", 0
    for s in sizes:
        part = b"".join(items[i : i + s])
        out += avro_long(-s) + avro_long(len(part)) + part if negative else avro_long(s) + part
        i += s
    return out + b"\x00"


@pytest.mark.parametrize("negative", [False, True])
def test_arrays_in_several_blocks(negative: bool) -> None:
    rec = random_record(random.Random(3), 4)
    rec["names"] = NAMES
    rec["streams"] = [{"id": i, "kind": f"k{i}", "label": NAMES[i]} for i in range(5)]
    whole = body_of(rec)
    names = _blocks([avro_string(x) for x in NAMES], [2, 1, 3], negative)
    streams = _blocks(
        [
            avro_long(s["id"]) + avro_string(s["kind"]) + avro_string(s["label"])
            for s in rec["streams"]
        ],
        [1, 4],
        negative,
    )
    one_names = avro_long(len(NAMES)) + b"".join(avro_string(x) for x in NAMES) + b"\x00"
    a = whole.index(one_names)
    cols = a + len(one_names)
    c_end = cols + sum(
        len(avro_long(len(rec[c]))) + len(rec[c])
        for c in ("name_idx", "stream", "start_ns", "duration_ns")
    )
    one_streams = (
        avro_long(5)
        + b"".join(
            avro_long(s["id"]) + avro_string(s["kind"]) + avro_string(s["label"])
            for s in rec["streams"]
        )
        + b"\x00"
    )
    assert whole[c_end : c_end + len(one_streams)] == one_streams
    body = whole[:a] + names + whole[cols:c_end] + streams + whole[c_end + len(one_streams) :]
    codec = Codec()
    for _ in range(2):  # parsed, then from the cache
        assert fastavro_decode(body) == rec
        assert codec_decode(codec, body) == rec
    assert codec_decode(codec, whole) == rec  # the one-block form: another cache entry


def test_truncated_bodies_raise_fastavros_reason() -> None:
    rec = random_record(random.Random(5), 3)
    rec["names"], rec["streams"] = NAMES[:3], [{"id": 300, "kind": "comm", "label": "nccl"}]
    body = body_of(rec)
    codec = Codec()
    codec_decode(codec, body)  # its arrays cached
    reasons = set()
    for k in range(len(body)):
        want = fastavro_decode(body[:k])
        assert isinstance(want, str)
        assert codec_decode(codec, body[:k]) == want, k
        reasons.add(want)
    assert reasons == {"truncated", "bad-body"}  # bad-body: cut inside a multi-byte varint
    assert codec_decode(codec, body + b"\x00") == "bad-body"  # trailing bytes


def test_corrupt_bodies_as_fastavro() -> None:
    """Random bytes overwritten (and some cut): the same record or the same reason."""
    rnd = random.Random(8)
    codec = Codec()
    bodies = [body_of(random_record(rnd, n)) for n in (0, 2, 40)]
    outcomes = set()
    for i in range(6000):
        b = bytearray(bodies[i % 3])
        for _ in range(rnd.randint(1, 3)):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        if rnd.random() < 0.3:
            b = b[: rnd.randrange(len(b) + 1)]
        want = fastavro_decode(bytes(b))
        assert codec_decode(codec, bytes(b)) == want
        outcomes.add(want if isinstance(want, str) else "ok")
    assert outcomes == {"ok", "truncated", "bad-body"}


@pytest.mark.parametrize(
    ("varint", "ok"),
    [
        (b"\xff" * 9 + b"\x01", True),
        (b"\xff" * 9 + b"\x7f", True),  # high bits of the 10th byte dropped, as fastavro
        (b"\x80" * 10 + b"\x01", True),  # 11 bytes, as fastavro reads them
        (b"\xff" * 30 + b"\x03", True),
        (b"\xff" * 30, False),  # the body ends inside it
        (b"\x80\x01", True),  # two bytes: the inline path
        (b"\xff\x7f", True),
        (b"\x81", False),  # the body ends after its first byte
    ],
)
def test_long_varints(varint: bytes, ok: bool) -> None:
    rec = random_record(random.Random(1), 0)
    rec["job"], rec["rank"] = "j", 1
    body = body_of(rec)
    assert body[:3] == b"\x02j\x02"
    body = body[:2] + varint + body[3:]
    if not ok:
        body = body[:2] + varint
    got = codec_decode(Codec(), body)
    assert got == fastavro_decode(body)
    assert isinstance(got, dict) is ok


def test_older_schema_keeps_fastavro() -> None:
    """A record of history/kernel_batch.1 (no part/parts) resolves into today's schema."""
    folder = resources.files("argus.schemas").joinpath("history")
    old = fastavro.parse_schema(json.loads(folder.joinpath("kernel_batch.1.avsc").read_text()))
    rec = random_record(random.Random(2), 2)
    del rec["part"], rec["parts"]
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, rec)
    from argus.schemas.codec import schema_fingerprint

    data = SINGLE_OBJECT_MAGIC + schema_fingerprint(old) + buf.getvalue()
    assert Codec().decode_as("kernel_batch", data) == {
        **rec,
        "part": 0,
        "parts": 1,
    }


def test_cached_arrays_are_not_shared() -> None:
    """Records from the cache get their own names list and stream dicts."""
    rec = random_record(random.Random(4), 3)
    rec["names"], rec["streams"] = NAMES, [{"id": 1, "kind": "comm", "label": ""}]
    data = HEADER + body_of(rec)
    codec = Codec()
    first = codec.decode_as("kernel_batch", data)
    first["names"][0] = "changed"
    first["streams"][0]["kind"] = "changed"
    assert codec.decode_as("kernel_batch", data) == rec


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_read_avro_containers_as_fastavro(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, codec: str
) -> None:
    """``argus.diagnose.read_avro`` reads today's kernel_batch containers with the reader
    (several blocks, both codecs); the records are fastavro's."""
    from argus.diagnose import read_avro

    rnd = random.Random(6)
    recs = [random_record(rnd, rnd.choice([0, 3, 80])) for _ in range(300)]
    for r in recs[::2]:
        r["streams"] = [{"id": 3, "kind": "comm", "label": "nccl " * 20}]  # > _KEY bytes
    path = tmp_path / "kernels.avro"
    with open(path, "wb") as fh:
        fastavro.writer(fh, WRITER, recs, codec=codec, sync_interval=2000)
    with open(path, "rb") as fh:
        assert sum(1 for _ in fastavro.block_reader(fh)) > 5
        fh.seek(0)
        want = list(fastavro.reader(fh))
    calls = []
    records = KernelBatchReader.records
    monkeypatch.setattr(
        KernelBatchReader,
        "records",
        lambda self, data, n: calls.append(n) or records(self, data, n),
    )
    name, it = read_avro(path)
    assert name == "kernel_batch"
    got = list(it)
    assert got == want == recs
    assert sum(calls) == len(recs)
    # stream lists of equal bytes share their dicts (read only), each record its own list
    alike = [r["streams"] for r in got[::2]]
    assert len({id(s) for s in alike}) == len(alike)
    assert len({id(s[0]) for s in alike}) < len(alike) / 4


def test_records_of_a_block_as_decode() -> None:
    """:meth:`KernelBatchReader.records` over bodies one after another: each record as
    :meth:`decode` reads it; a cut block raises what ``decode`` raises at the cut."""
    rnd = random.Random(12)
    recs = [random_record(rnd, rnd.choice([0, 2, 80])) for _ in range(30)]
    block = b"".join(body_of(r) for r in recs)
    assert KernelBatchReader().records(block, len(recs)) == recs
    shared = KernelBatchReader(shared_streams=True).records(HEADER + block, len(recs), len(HEADER))
    assert shared == recs
    for cut in sorted(rnd.sample(range(len(block)), 200)):
        kb, pos, want = KernelBatchReader(), 0, None
        try:
            for _ in range(len(recs)):
                pos = kb.decode(block[:cut], pos)[1]
        except (EOFError, ValueError) as exc:
            want = type(exc)
        with pytest.raises(want or EOFError) as got:
            KernelBatchReader().records(block[:cut], len(recs))
        assert got.type is want


def test_many_dictionaries_alike() -> None:
    """More dictionaries than the reader keeps, all with the same first bytes (one cache key),
    twice round: every record still fastavro's."""
    rnd = random.Random(9)
    recs = []
    for i in range(40):
        rec = random_record(rnd, 2)
        rec["names"] = ["x" * 1000, f"k{i}", *NAMES[: i % 5]]
        rec["streams"] = [{"id": i % 7, "kind": "comm", "label": "x" * 100}]
        rec["coords"] = {f: (i + j) % 70 for j, f in enumerate(COORD_FIELDS)}  # some 2-byte
        recs.append(rec)
    codec = Codec()
    for rec in recs + recs + recs[::-1]:
        assert codec.decode_as("kernel_batch", HEADER + body_of(rec)) == rec
