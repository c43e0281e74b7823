"""Re-key messages: a poll's routed items for one key, as few internal-topic messages as fit.

A router (faust agent or the compressor's loop, :mod:`argus.streams.compressor_loop`) sends
each key's items of a poll together (:func:`rekey_messages`); a window agent reads them back
(:func:`read_message`). Pure: no faust, no Kafka.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["BLOB", "REKEY_MESSAGE_BYTES", "item_bytes", "read_message", "rekey_messages"]

REKEY_MESSAGE_BYTES = 256 * 1024
"""A re-key message carries items of several events up to about this many bytes of JSON
(under the producer's 1 MB request limit); one event's items for a key always travel
together, however large."""


BLOB = "blob"
"""An item's field of raw bytes: it travels after the message's JSON, not inside it (no
base64, no JSON escaping; :func:`item_bytes`), and comes back as ``bytes``
(:func:`read_message`)."""


def item_bytes(item: Any) -> tuple[bytes, bytes | None]:
    """``(JSON, blob)`` of one routed item: its :data:`BLOB` field (``bytes``) out of the
    JSON, which names its size instead (``blob_size``); None when it has none."""
    blob = item.get(BLOB) if isinstance(item, dict) else None
    if isinstance(blob, bytes | bytearray | memoryview):
        rest = {k: v for k, v in item.items() if k != BLOB}
        rest["blob_size"] = len(blob)
        return json.dumps(rest, separators=(",", ":")).encode(), bytes(blob)
    return json.dumps(item, separators=(",", ":")).encode(), None


def rekey_messages(
    items: list[tuple[Any, tuple[bytes, bytes | None]]], sent: float
) -> list[tuple[list[Any], bytes]]:
    """The messages of one key's items in a poll: ``[(owners, value)]``.

    ``items`` are ``(owner, (item JSON, blob))`` in order (owner: the event the item came
    from; :func:`item_bytes`); a value is the JSON ``{"items": [...], "t": sent}`` holding
    items in order, then, when some item has a blob, a NUL byte and the blobs in item order
    (JSON text never holds a raw NUL), cut between owners once it reaches
    :data:`REKEY_MESSAGE_BYTES`. ``owners`` lists each message's owners once, in order."""
    t = b'],"t":' + json.dumps(sent).encode() + b"}"
    out: list[tuple[list[Any], bytes]] = []
    owners: list[Any] = []
    parts: list[bytes] = []
    blobs: list[bytes] = []  # of the items that have one (empty ones too)
    size = 0

    def value() -> bytes:
        head = b'{"items":[' + b",".join(parts) + t
        return head + b"\0" + b"".join(blobs) if blobs else head

    for owner, (data, blob) in items:
        if not owners or owners[-1] is not owner:
            if size >= REKEY_MESSAGE_BYTES:
                out.append((owners, value()))
                owners, parts, blobs, size = [], [], [], 0
            owners.append(owner)
        parts.append(data)
        if blob is not None:
            blobs.append(blob)
        size += len(data) + 1 + len(blob or b"")
    if parts:
        out.append((owners, value()))
    return out


def read_message(value: bytes) -> dict[str, Any]:
    """A re-key message (:func:`rekey_messages`) or a tick: its JSON, each item's blob back
    in its :data:`BLOB` field.

    Raises
    ------
    ValueError
        Not JSON, or blobs that do not add up to the bytes after the NUL.
    """
    head, nul, tail = value.partition(b"\0")
    msg: dict[str, Any] = json.loads(head)
    if not nul:
        return msg
    pos = 0
    for item in msg.get("items") or ():
        n = item.pop("blob_size", None) if isinstance(item, dict) else None
        if n is not None:
            item[BLOB] = tail[pos : pos + int(n)]
            pos += int(n)
    if pos != len(tail):
        raise ValueError(f"re-key message: blobs of {pos} bytes, {len(tail)} after the JSON")
    return msg
