"""kernel_summary gained ``cluster_log_offsets`` (log16 quantiles) with a default: records of the
schema before it and of the schema after it resolve against each other (Avro's rule)."""

from __future__ import annotations

import copy
import io

import fastavro
import numpy as np
import pytest

from argus.schemas import load_schemas
from argus.streams import synth
from argus.summaries import summary_record as sr
from argus.summaries.kde import COMPACT, PAPER

NEW = load_schemas()["kernel_summary"].raw


def _old_schema() -> dict:
    old = copy.deepcopy(NEW)
    old["fields"] = [f for f in old["fields"] if f["name"] != "cluster_log_offsets"]
    return old


def _resolve(record: dict, writer: dict, reader: dict) -> dict:
    buf = io.BytesIO()
    w, r = fastavro.parse_schema(writer), fastavro.parse_schema(reader)
    fastavro.schemaless_writer(buf, w, record)
    buf.seek(0)
    out = fastavro.schemaless_reader(buf, w, r)
    assert isinstance(out, dict)
    return out


@pytest.fixture(scope="module")
def batch() -> dict:
    mix = synth.default_mix(0)
    return synth.kernel_batch(
        np.random.default_rng(1), mix, job="j", rank=0, window_id=1, n_events=5000
    )


def test_new_field_has_a_default_and_is_bytes() -> None:
    (field,) = [f for f in NEW["fields"] if f["name"] == "cluster_log_offsets"]
    assert field["type"] == "bytes" and field["default"] == ""
    assert "int16" in field["doc"] and "2048" in field["doc"]


def test_old_writer_new_reader_gets_the_float32_columns(batch: dict) -> None:
    rec = sr.summarize_batch(batch, config=PAPER)
    old_rec = {k: v for k, v in rec.items() if k != "cluster_log_offsets"}
    got = _resolve(old_rec, _old_schema(), NEW)
    assert not got["cluster_log_offsets"]  # the default ("" : fastavro gives bytes defaults as str)
    want = sr.groups_from_summary(rec)
    have = sr.groups_from_summary(got)
    assert have.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(have[k].quantiles_ns, want[k].quantiles_ns)


def test_new_writer_old_reader(batch: dict) -> None:
    # a float32 record reads the same under the old schema
    rec = sr.summarize_batch(batch, config=PAPER)
    got = _resolve(rec, NEW, _old_schema())
    assert "cluster_log_offsets" not in got
    assert sr.groups_from_summary(got).keys() == sr.groups_from_summary(rec).keys()
    # a log16 record cannot be misread by a reader that ignores the offsets: its quantile
    # column holds one median per cluster, which fails the length check loudly
    compact = sr.summarize_batch(batch, config=COMPACT)
    got = _resolve(compact, NEW, _old_schema())
    with pytest.raises(sr.BatchError) as err:
        sr.groups_from_summary(got)
    assert err.value.reason == "bad-summary"


def test_codec_reads_records_of_the_previous_schema_version(batch: dict) -> None:
    """An older producer's single-object record (its own fingerprint) still decodes."""
    import json
    from importlib import resources

    from argus.schemas import Codec
    from argus.schemas.codec import SINGLE_OBJECT_MAGIC, schema_fingerprint

    old_raw = json.loads(
        resources.files("argus.schemas").joinpath("history/kernel_summary.1.avsc").read_text()
    )
    old = fastavro.parse_schema(old_raw)
    rec = sr.summarize_batch(batch, config=PAPER)
    rec = {k: v for k, v in rec.items() if k != "cluster_log_offsets"}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, rec)
    data = SINGLE_OBJECT_MAGIC + schema_fingerprint(old) + buf.getvalue()
    assert schema_fingerprint(old) != load_schemas()["kernel_summary"].fingerprint
    got = Codec().decode_as("kernel_summary", data)
    assert not got["cluster_log_offsets"] and got["group_kernel"] == rec["group_kernel"]
    assert sr.groups_from_summary(got).keys() == sr.groups_from_summary(rec).keys()
