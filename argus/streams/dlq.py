"""The DLQ record of an input that failed: its original bytes and the reason (both runtimes).

The faust workers (:meth:`argus.streams.app.Ctx.dlq`) and the compressor's own loop
(:mod:`argus.streams.compressor_loop`) build ``dlq_record`` values here, so an operator
reads the same fields whichever runtime sent it (docs/reliability.md).
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["dlq_record"]


def dlq_record(
    *,
    topic: str,
    partition: int,
    offset: int,
    key: Any,
    value: bytes,
    exc: BaseException,
    worker: str,
    max_value_bytes: int,
    reason: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """``(why, record)``: the reason's code (``exc.reason`` when it has one, as
    ``DecodeError``, ``BatchError`` and ``validate.InputError`` do, else its type name, or
    ``reason`` when given) and the ``dlq_record`` to encode. ``value`` longer than
    ``max_value_bytes`` is cut to them and the reason says so (the source offset has it all)."""
    code = getattr(exc, "reason", None)
    why = reason or (code if isinstance(code, str) else type(exc).__name__)
    text = str(exc)
    said = (text if text.startswith(f"{why}:") else f"{why}: {text}")[:3800]
    if len(value) > max_value_bytes:  # the producer's request limit
        said += f" [value cut to its first {max_value_bytes} of {len(value)} bytes]"
        value = value[:max_value_bytes]
    rec: dict[str, Any] = {
        "source_topic": topic,
        "partition": int(partition),
        "offset": int(offset),
        "key": key if isinstance(key, bytes) else None,
        "value": value,
        "error_type": type(exc).__name__,
        "reason": said,
        "worker": worker,
        "failed_ns": time.time_ns(),
    }
    return why, rec
