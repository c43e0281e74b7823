"""A faust app for the wire test: decodes every argus record type and echoes it re-encoded.

Run: ``faust -A tests.schemas.faust_echo_app worker`` with ARGUS_ECHO_PREFIX and
ARGUS_KAFKA_BOOTSTRAP set. Each input topic ``<prefix>.<suffix>`` is consumed as raw bytes,
decoded with the argus Codec, and sent to ``<prefix>.echo`` keyed by the schema name.
"""

from __future__ import annotations

import os

import faust

from argus.schemas import Codec, DecodeError
from argus.topics import TOPICS, topic_name

PREFIX = os.environ["ARGUS_ECHO_PREFIX"]
app = faust.App(
    f"echo-{PREFIX}",
    broker=f"kafka://{os.environ['ARGUS_KAFKA_BOOTSTRAP']}",
    store="memory://",
    web_enabled=False,
    topic_partitions=1,
    consumer_auto_offset_reset="earliest",
)
codec = Codec()
sources = app.topic(
    *[topic_name(t.suffix, PREFIX) for t in TOPICS], value_serializer="raw", key_serializer="raw"
)
echo = app.topic(f"{PREFIX}.echo", value_serializer="raw", key_serializer="raw")


@app.agent(sources)
async def decode_and_echo(stream: faust.StreamT) -> None:
    async for value in stream:
        try:
            name, rec = codec.decode(value)
        except DecodeError as exc:
            await echo.send(key=b"error", value=str(exc).encode())
            continue
        await echo.send(key=name.encode(), value=codec.encode(name, rec))
