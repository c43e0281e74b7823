"""Outbox entries: what the funnel role decided to send, kept in its state until sent.

Pure: the role puts entries in its state (:func:`entry`); the faust driver sends them
exactly once (:class:`argus.streams.outbox.Outbox`), the in-memory driver takes them at once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, TypedDict

from argus.detectors.alert_id import alert_identity

__all__ = ["OutboxEntry", "entry", "identity", "normalize"]


class OutboxEntry(TypedDict):
    """One record waiting in the outbox (a JSON-able part of the funnel state)."""

    topic: str  # topic suffix: "alerts" | "anomalies"
    key: str
    record: str  # schema short name: "alert" | "anomaly"
    value: dict[str, Any]
    id: str  # identity (:func:`identity`)
    by: str  # the process that put it here (Outbox.incarnation); "" unknown
    t: float | None  # wall time it was put here (s since epoch); None unknown


def identity(record: str, value: Mapping[str, Any]) -> str:
    """What tells a record from another on its topic: an anomaly's ``id``, an alert's
    (:func:`argus.detectors.alert_id.alert_identity`)."""
    return alert_identity(value) if record == "alert" else str(value["id"])


def entry(topic: str, key: str, record: str, value: dict[str, Any], *, by: str) -> OutboxEntry:
    """An outbox entry put there now by process ``by``."""
    return OutboxEntry(
        topic=topic,
        key=key,
        record=record,
        value=value,
        id=identity(record, value),
        by=by,
        t=time.time(),
    )


def normalize(raw: Mapping[str, Any]) -> OutboxEntry:
    """An entry as stored; a bare ``alert`` record (the outbox of an older version) becomes
    an alert entry of unknown origin and time."""
    if "record" in raw and "value" in raw:
        return OutboxEntry(**raw)  # type: ignore[typeddict-item]
    value = dict(raw)
    return OutboxEntry(
        topic="alerts",
        key=str(value["dedup_key"]),
        record="alert",
        value=value,
        id=identity("alert", value),
        by="",
        t=None,
    )
