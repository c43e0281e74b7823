"""``SummarizedBatches.encoded``: the compressor's summary bytes without the dict, byte for
byte ``Codec.encode("kernel_summary", record(i))`` (issue 21)."""

from __future__ import annotations

import numpy as np
import pytest

from argus.errors import EncodeError
from argus.schemas.arrays import kernel_id
from argus.schemas.codec import Codec
from argus.streams import synth
from argus.summaries import summary_record as sr
from argus.summaries.kde import COMPACT, DEFAULT, PAPER, KdeConfig


def _records(seed: int, n_rec: int = 16) -> list[dict]:
    rng = np.random.default_rng(seed)
    mix = synth.default_mix(seed)
    out = []
    for i in range(n_rec):
        n = int(rng.choice([1, 3, 100, 3000]))
        b = synth.kernel_batch(
            rng,
            mix,
            job=f"j{i % 2}é",
            rank=i % 5,
            window_id=int(rng.choice([0, 5, 2**40])),
            n_events=n,
            coords={"dp_rank": i % 5, "dp_size": 5 + i},
        )
        kind = i % 5
        if kind == 1:  # rejected durations
            d = np.frombuffer(b["duration_ns"], "<i8").copy()
            d[rng.random(d.size) < 0.05] = -5
            b["duration_ns"] = d.tobytes()
        elif kind == 2:  # no streams, coords with fields absent (the schema's defaults)
            b["streams"] = []
            b["coords"] = {"tp_size": 2, "tp_rank": 1}
        elif kind == 3:  # every duration invalid: a summary without groups
            b["duration_ns"] = np.zeros(n, "<i8").tobytes()
        elif kind == 4:  # non-ASCII names and stream labels, a long label
            b["names"] = [f"kérnel∑{j}<{x}>" for j, x in enumerate(b["names"])]
            b["streams"] = [{**s, "label": "流" * 100} for s in b["streams"]]
        out.append(b)
    return out


def _announced(recs: list[dict]) -> list[set[int] | None]:
    return [
        None if i % 3 == 0 else {kernel_id(n) for n in r["names"][: i % 4 * 20]}
        for i, r in enumerate(recs)
    ]


@pytest.mark.parametrize(
    "cfg", [DEFAULT, PAPER, COMPACT], ids=lambda c: f"{c.method}-{c.quantile_encoding}"
)
@pytest.mark.parametrize("chunk", [None, 5000], ids=["one-call", "chunks"])
@pytest.mark.parametrize("registry", [None, "mock://enc"], ids=["single-object", "confluent"])
def test_encoded_equals_codec_encode(
    cfg: KdeConfig, chunk: int | None, registry: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every record of polls with names announced, partly or not at all, both quantile
    encodings, chunked polls and both framings: the same bytes, and the ids named."""
    if registry is not None:
        pytest.importorskip("confluent_kafka.schema_registry")
    if chunk is not None:
        monkeypatch.setattr(sr, "CHUNK_EVENTS", chunk)
    codec = Codec(registry_url=registry)
    recs = _records(11)
    done = sr.SummarizedBatches(recs, config=cfg)
    for i, ann in enumerate(_announced(recs)):
        rec = done.record(i, announced=ann)
        data, named = done.encoded(i, codec, announced=ann)
        assert data == codec.encode("kernel_summary", rec)
        assert named == [n["id"] for n in rec["kernel_names"]]


def test_encoded_rank_cache_follows_changes() -> None:
    """The same (job, rank) with other coords or streams: their new bytes, not the cached."""
    codec = Codec()
    recs = _records(2, 3)
    first = sr.SummarizedBatches([recs[0]])
    first.encoded(0, codec)
    moved = {
        **recs[0],
        "coords": {**recs[0]["coords"], "dp_size": 99},
        "streams": [{**s, "kind": "p2p"} for s in recs[0]["streams"]],
    }
    done = sr.SummarizedBatches([moved])
    assert done.encoded(0, codec)[0] == codec.encode("kernel_summary", done.record(0))
    assert done.encoded(0, codec)[0] != first.encoded(0, codec)[0]


def test_encoded_other_types_go_through_fastavro() -> None:
    """A numpy int rank (record() converts it), a float window end: fastavro's bytes; a
    value fastavro refuses: its EncodeError."""
    codec = Codec()
    rec = _records(4, 1)[0]
    for odd in ({"rank": np.int32(3)}, {"coords": {"dp_size": np.int64(4)}}):
        done = sr.SummarizedBatches([{**rec, **odd}])
        assert done.encoded(0, codec)[0] == codec.encode("kernel_summary", done.record(0))
    bad = sr.SummarizedBatches([{**rec, "coords": {"dp_size": "four"}}])
    with pytest.raises(EncodeError):
        bad.encoded(0, codec)


@pytest.mark.parametrize(
    "n",
    [0, 1, 63, 64, 127, 128, 8191, 8192, -1, -64, -65, -8192, -8193, 2**62, -(2**63), 2**63 - 1],
)
def test_long_is_avro_zigzag(n: int) -> None:
    """The encoder's varints (argus.schemas.avro_binary, its 1- and 2-byte fast paths)."""
    import io

    import fastavro

    from argus.schemas.avro_binary import avro_long

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema("long"), n)
    assert avro_long(n) == buf.getvalue()


@pytest.mark.parametrize("mixed", [False, True], ids=["one-dictionary", "dictionaries"])
def test_named_ids_are_the_name_caches_ints(mixed: bool) -> None:
    """The ids a summary names are the name cache's own int objects (a set of announced ids
    then tests them by identity); announced sets holding equal ints that are other objects
    give the same bytes, and a set holding every id names none."""
    recs = _records(4, 8)
    if mixed:  # records with their own dictionaries: the ids of every one are the cache's
        recs[3] = {**recs[3], "names": [*recs[3]["names"], "extra"]}
    codec = Codec()
    done = sr.SummarizedBatches(recs)
    for i, r in enumerate(recs):
        data, named = done.encoded(i, codec, announced=set())
        cached = {k: k for k in sr._kids(list(r["names"]))}
        assert all(cached[k] is k for k in named)
        copies = {int(str(k)) for k in named}  # equal ints, other objects
        assert done.encoded(i, codec, announced=copies) == (
            sr.SummarizedBatches([r]).encoded(0, codec, announced=set(named))
        )
        assert done.encoded(i, codec, announced=copies)[1] == []
        assert data == codec.encode("kernel_summary", done.record(i, announced=set()))
