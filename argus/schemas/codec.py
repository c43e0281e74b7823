"""Avro codec for every argus record.

Two framings, chosen per codec instance:

* **Avro single-object encoding** (default): ``C3 01`` + the schema's 8-byte CRC-64-AVRO
  fingerprint (little-endian, as the Avro spec writes it) + the Avro binary body. Readers in
  any language find the schema by fingerprint among the ``.avsc`` files shipped here.
* **Confluent framing** when a schema-registry URL is configured: ``00`` + 4-byte big-endian
  schema id + body. Schemas are registered under their full record name
  (RecordNameStrategy, e.g. ``argus.StepRecord``).

Schema evolution: earlier versions of a record's schema ship in ``history/`` as
``<name>.<n>.avsc``. A record written with one of them (an older producer) is read with Avro
schema resolution into the current schema (new fields take their defaults); so is a record
whose registry schema differs from the shipped one.

The decoder accepts both framings whatever it encodes with, so a consumer never needs to
know how a producer was configured. Anything else raises :class:`DecodeError`.

A ``kernel_batch`` written with the current schema is read by
:class:`~argus.schemas.kernel_batch_body.KernelBatchReader` (the same dict, columns as
``bytes``; 18 instead of 53 us CPU on a 3,000-event record), a ``step_record`` by
:class:`~argus.schemas.step_body_reader.StepRecordReader` (the same dict; 36 instead of 42-45
us on a 450-byte record); every other record and schema version by fastavro.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from argus.errors import DecodeError, EncodeError, SchemaNotFound
from argus.schemas.kernel_batch_body import KernelBatchReader
from argus.schemas.step_body_reader import StepRecordReader

__all__ = ["SINGLE_OBJECT_MAGIC", "Codec", "RecordSchema", "load_schemas", "schema_fingerprint"]

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
CONFLUENT_MAGIC = 0


@dataclass(frozen=True)
class RecordSchema:
    """One shipped schema: short name (file stem), full Avro name, parsed form, fingerprint."""

    name: str
    full_name: str
    raw: dict[str, Any]
    parsed: Any
    fingerprint: bytes  # 8 bytes, wire order
    writer: Any = None  # parsed writer schema when records were written with an older version


@cache
def load_schemas() -> dict[str, RecordSchema]:
    """All ``.avsc`` files of this package, by short name (``"step_record"``, ...)."""
    out: dict[str, RecordSchema] = {}
    for entry in sorted(resources.files("argus.schemas").iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".avsc"):
            continue
        raw = json.loads(entry.read_text())
        parsed = fastavro.parse_schema(raw, _write_hint=False)
        fp = schema_fingerprint(parsed)
        full = f"{raw['namespace']}.{raw['name']}" if "namespace" in raw else raw["name"]
        name = entry.name.removesuffix(".avsc")
        out[name] = RecordSchema(name, full, raw, parsed, fp)
    return out


def schema_fingerprint(parsed: Any) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint of a parsed schema's canonical form, in the byte
    order single-object encoding writes after its marker."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))


@cache
def load_history() -> dict[bytes, RecordSchema]:
    """Earlier schema versions (``history/<name>.<n>.avsc``) by fingerprint, each resolving
    into the current schema of ``<name>``."""
    current = load_schemas()
    out: dict[bytes, RecordSchema] = {}
    folder = resources.files("argus.schemas").joinpath("history")
    if not folder.is_dir():
        return out
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".avsc"):
            continue
        cur = current[entry.name.split(".")[0]]
        writer = fastavro.parse_schema(json.loads(entry.read_text()), _write_hint=False)
        fp = schema_fingerprint(writer)
        if fp != cur.fingerprint:
            out[fp] = RecordSchema(cur.name, cur.full_name, cur.raw, cur.parsed, fp, writer)
    return out


class Codec:
    """Encode and decode argus records.

    Parameters
    ----------
    registry_url : str, optional
        Schema-registry URL; when set, records are written with Confluent framing.
        ``mock://name`` uses confluent-kafka's in-process mock registry (tests).
    registry_config : mapping, optional
        Extra ``SchemaRegistryClient`` settings (auth, TLS).
    kernel_batch_reader : bool
        Read current-schema ``kernel_batch`` bodies with :class:`KernelBatchReader` (default);
        False: with fastavro like every other record (benches, A/B).
    step_record_reader : bool
        Read current-schema ``step_record`` bodies with
        :class:`~argus.schemas.step_body_reader.StepRecordReader` (default: the same dict as
        fastavro's, ~15 % less CPU: ``bench/bench_codec_decode.py``); False: with fastavro.

    Examples
    --------
    >>> c = Codec()
    >>> data = c.encode("dlq_record", {"source_topic": "t", "value": b"x",
    ...     "error_type": "E", "reason": "r", "failed_ns": 1})
    >>> data[:2] == SINGLE_OBJECT_MAGIC
    True
    >>> c.decode(data)[0]
    'dlq_record'
    """

    def __init__(
        self,
        *,
        registry_url: str | None = None,
        registry_config: Mapping[str, Any] | None = None,
        kernel_batch_reader: bool = True,
        step_record_reader: bool = True,
    ) -> None:
        self._schemas = load_schemas()
        self._kernel_batch = KernelBatchReader() if kernel_batch_reader else None
        self._step_record = StepRecordReader() if step_record_reader else None
        self._by_fp = {**load_history(), **{s.fingerprint: s for s in self._schemas.values()}}
        self._by_full = {s.full_name: s for s in self._schemas.values()}
        self._registry: Any = None
        self._id_of: dict[str, int] = {}
        self._schema_of_id: dict[int, RecordSchema] = {}
        # write-hinted parses for encoding: fastavro re-parses a schema parsed without the hint
        # on every schemaless_writer call (~25 us of a ~45 us step-record encode)
        self._writers: dict[str, Any] = {}
        self._readers: dict[bytes, tuple[Any, Any]] = {}  # the same for decoding, by fingerprint
        self._headers: dict[str, bytes] = {}
        if registry_url:
            from confluent_kafka.schema_registry import SchemaRegistryClient

            conf = {"url": registry_url, **(registry_config or {})}
            self._registry = SchemaRegistryClient.new_client(conf)

    @property
    def schemas(self) -> dict[str, RecordSchema]:
        return self._schemas

    def schema(self, name: str) -> RecordSchema:
        try:
            return self._schemas[name]
        except KeyError:
            raise SchemaNotFound(
                f"no schema {name!r}; known: {', '.join(sorted(self._schemas))}"
            ) from None

    # -- encoding -------------------------------------------------------------------------
    def encode(self, name: str, value: Mapping[str, Any]) -> bytes:
        """Frame and serialise ``value`` as record ``name``.

        Raises
        ------
        EncodeError
            When ``value`` does not match the schema (the message names the record).
        """
        s = self.schema(name)
        writer = self._writers.get(name)
        if writer is None:
            writer = self._writers[name] = fastavro.parse_schema(s.raw)
        buf = io.BytesIO()
        buf.write(self._header(s))
        try:
            fastavro.schemaless_writer(buf, writer, value)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise EncodeError(f"{name}: value does not match {s.full_name}: {exc!r}") from exc
        return buf.getvalue()

    def header(self, name: str) -> bytes:
        """The framing :meth:`encode` puts in front of record ``name``'s Avro body (the
        single-object magic and fingerprint, or the Confluent magic and schema id)."""
        h = self._headers.get(name)
        if h is None:
            h = self._headers[name] = self._header(self.schema(name))
        return h

    def _header(self, s: RecordSchema) -> bytes:
        if self._registry is None:
            return SINGLE_OBJECT_MAGIC + s.fingerprint
        sid = self._id_of.get(s.name)
        if sid is None:
            from confluent_kafka.schema_registry import Schema

            sid = self._registry.register_schema(s.full_name, Schema(json.dumps(s.raw), "AVRO"))
            self._id_of[s.name] = sid
            self._schema_of_id[sid] = s
        return bytes([CONFLUENT_MAGIC]) + sid.to_bytes(4, "big")

    # -- decoding -------------------------------------------------------------------------
    def decode(self, data: bytes | None, expect: str | None = None) -> tuple[str, dict[str, Any]]:
        """Return ``(schema short name, record)`` for a framed value.

        Parameters
        ----------
        data : bytes
            A value written by :meth:`encode` (either framing).
        expect : str, optional
            Short name the record must have; another record raises ``wrong-record``.

        Raises
        ------
        DecodeError
            Empty input, unknown magic, a truncated frame, an unknown fingerprint or schema
            id, a body that does not parse or has trailing bytes, or an unexpected record.
        """
        if not data:
            raise DecodeError("empty", "no bytes to decode")
        view = memoryview(data)
        if view[:2] == SINGLE_OBJECT_MAGIC:
            if len(view) < 10:
                raise DecodeError(
                    "truncated", f"single-object header needs 10 bytes, got {len(view)}"
                )
            fp = bytes(view[2:10])
            s = self._by_fp.get(fp)
            if s is None:
                raise DecodeError(
                    "unknown-fingerprint",
                    f"CRC-64-AVRO fingerprint {fp.hex()} matches no shipped schema "
                    "(a newer producer? upgrade argus-trace)",
                )
            body = view[10:]
        elif view[0] == CONFLUENT_MAGIC:
            if len(view) < 5:
                raise DecodeError("truncated", f"Confluent header needs 5 bytes, got {len(view)}")
            s = self._schema_for_id(int.from_bytes(view[1:5], "big"))
            body = view[5:]
        else:
            raise DecodeError(
                "bad-magic",
                f"first bytes {bytes(view[:2]).hex()} are neither Avro single-object (c301) "
                "nor Confluent framing (00)",
            )
        if expect is not None and s.name != expect:
            raise DecodeError("wrong-record", f"expected {expect}, got {s.name}")
        off = len(view) - len(body)
        rec: Any
        try:
            if s.name == "kernel_batch" and s.writer is None and self._kernel_batch is not None:
                rec, end = self._kernel_batch.decode(data, off)  # the current schema
                end -= off
            elif s.name == "step_record" and s.writer is None and self._step_record is not None:
                rec, end = self._step_record.decode(data, off)  # the current schema
                end -= off
            else:
                bio = io.BytesIO(body)
                rec = fastavro.schemaless_reader(bio, *self._reader(s))
                end = bio.tell()
        except Exception as exc:  # fastavro raises many types on corrupt bodies
            raise DecodeError(
                "truncated" if isinstance(exc, EOFError) else "bad-body",
                f"{s.name}: body does not parse ({type(exc).__name__}: {exc})",
            ) from exc
        if end != len(body):
            raise DecodeError(
                "bad-body", f"{s.name}: {len(body) - end} trailing bytes after the record"
            )
        if not isinstance(rec, dict):
            raise DecodeError("bad-body", f"{s.name}: body is not a record")
        return s.name, rec

    def _reader(self, s: RecordSchema) -> tuple[Any, Any]:
        """(writer, reader) schemas for ``schemaless_reader``, parsed once with the hint."""
        pair = self._readers.get(s.fingerprint)
        if pair is None:
            if s.writer is None:
                pair = (fastavro.parse_schema(s.raw), None)
            else:  # an older version of the schema: resolve into the current one
                pair = (fastavro.parse_schema(s.writer), fastavro.parse_schema(s.raw))
            self._readers[s.fingerprint] = pair
        return pair

    def decode_as(self, name: str, data: bytes | None) -> dict[str, Any]:
        """Decode and require record ``name``; see :meth:`decode`."""
        return self.decode(data, expect=name)[1]

    def _schema_for_id(self, sid: int) -> RecordSchema:
        s = self._schema_of_id.get(sid)
        if s is not None:
            return s
        if self._registry is None:
            raise DecodeError(
                "unknown-schema-id",
                f"Confluent-framed value (schema id {sid}) but no schema registry is configured",
            )
        try:
            got = self._registry.get_schema(sid)
            raw = json.loads(got.schema_str)
        except Exception as exc:
            raise DecodeError("unknown-schema-id", f"registry has no schema {sid}: {exc}") from exc
        full = f"{raw.get('namespace')}.{raw.get('name')}"
        s2 = self._by_full.get(full)
        if s2 is None:
            raise DecodeError(
                "unknown-schema-id", f"schema id {sid} is {full}, not an argus record"
            )
        writer = fastavro.parse_schema(raw, _write_hint=False)
        if schema_fingerprint(writer) != s2.fingerprint:  # another version: resolve into ours
            s2 = RecordSchema(s2.name, s2.full_name, s2.raw, s2.parsed, s2.fingerprint, writer)
        self._schema_of_id[sid] = s2
        return s2
