"""alert gained ``id`` (default ""): a record of the schema before it (history/alert.1.avsc,
an older funnel) still decodes, with an empty id, and one of the new schema carries it."""

from __future__ import annotations

import io
import json
from importlib import resources
from typing import Any

import fastavro

from argus.detectors.alert_id import alert_id, alert_identity
from argus.schemas import Codec, load_schemas
from argus.schemas.codec import SINGLE_OBJECT_MAGIC, schema_fingerprint

REC: dict[str, Any] = {
    "dedup_key": "j/dp/pp0/3/mlp",
    "action": "trigger",
    "severity": "error",
    "summary": "s",
    "job": "j",
    "group_kind": "dp",
    "group_id": "pp0",
    "ranks": [3],
    "levels": ["L2"],
    "first_seen_ns": 1,
    "last_seen_ns": 2,
}


def test_the_new_field_has_a_default() -> None:
    (field,) = [f for f in load_schemas()["alert"].raw["fields"] if f["name"] == "id"]
    assert field["type"] == "string" and field["default"] == ""


def test_a_record_of_the_previous_version_decodes_without_id() -> None:
    raw = json.loads(resources.files("argus.schemas").joinpath("history/alert.1.avsc").read_text())
    old = fastavro.parse_schema(raw)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, old, REC)
    got = Codec().decode_as("alert", SINGLE_OBJECT_MAGIC + schema_fingerprint(old) + buf.getvalue())
    assert got["id"] == "" and got["dedup_key"] == REC["dedup_key"]
    assert alert_identity(got).startswith("legacy:")


def test_the_id_travels() -> None:
    c = Codec()
    rec = {**REC, "id": alert_id(REC["dedup_key"], "trigger", 10, 19)}
    got = c.decode_as("alert", c.encode("alert", rec))
    assert got["id"] == rec["id"] == alert_identity(got)
