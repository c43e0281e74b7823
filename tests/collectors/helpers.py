"""Shared helpers of the collector tests (real broker, fresh topic prefix per test)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from argus.config import Settings
from argus.schemas import Codec


def consume(
    settings: Settings, topic: str, want: int, *, timeout_s: float = 20.0, record: str | None = None
) -> list[tuple[bytes, dict[str, Any]]]:
    """Read up to ``want`` records from ``topic`` (from the beginning) within ``timeout_s``."""
    from confluent_kafka import Consumer

    c = Consumer(
        settings.kafka_config(
            **{
                "group.id": f"test-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
    )
    c.subscribe([topic])
    codec = Codec()
    out: list[tuple[bytes, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < want and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            name, rec = codec.decode(msg.value())
            if record is None or name == record:
                out.append((msg.key(), rec))
    finally:
        c.close()
    return out


def closed_port() -> int:
    """A loopback TCP port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
