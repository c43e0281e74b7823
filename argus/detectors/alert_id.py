"""Deterministic ids of ``alert`` records (``alert.avsc`` field ``id``).

An alert is unique by its culprit (``dedup_key``), its ``action`` and the funnel window that
emitted it: one funnel step emits at most one alert per dedup key (a trigger for a culprit
seen in the window, or a resolve for one that was not), and each window is closed once. So
the id is the same wherever and however often the same decision is made (a live funnel
after a restart, ``argus diagnose``), and a consumer or the funnel's outbox can tell a
repeated record from a new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["alert_id", "alert_identity"]


def alert_id(dedup_key: str, action: str, window_start_step: int, window_end_step: int) -> str:
    """BLAKE2b-128 hex of ``(dedup_key, action, window_start_step, window_end_step)``.

    The window is the funnel window (inclusive steps) whose close emitted the alert.

    Examples
    --------
    >>> a = alert_id("j/dp/pp0/3/mlp", "trigger", 10, 19)
    >>> a == alert_id("j/dp/pp0/3/mlp", "trigger", 10, 19), len(a)
    (True, 32)
    >>> a == alert_id("j/dp/pp0/3/mlp", "resolve", 10, 19)
    False
    """
    key = [dedup_key, action, int(window_start_step), int(window_end_step)]
    blob = json.dumps(key, separators=(",", ":"), ensure_ascii=True).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def alert_identity(rec: Mapping[str, Any]) -> str:
    """What tells one alert record from another: its ``id``, or for a record written
    before alerts had one (``id`` empty) a hash of the fields that differ between two
    alerts of one culprit (action, persistence, last seen, levels, severity)."""
    if rec.get("id"):
        return str(rec["id"])
    key = [
        rec.get("dedup_key"),
        rec.get("action"),
        rec.get("persistence"),
        rec.get("last_seen_ns"),
        list(rec.get("levels") or ()),
        rec.get("severity"),
    ]
    blob = json.dumps(key, separators=(",", ":"), ensure_ascii=True, default=str).encode()
    return "legacy:" + hashlib.blake2b(blob, digest_size=16).hexdigest()
