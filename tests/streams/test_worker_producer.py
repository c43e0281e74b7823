"""The workers' producer is idempotent, like the collectors' (issue 19: acks=all and
idempotent producers on a replicated cluster)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from argus.config import Settings
from argus.streams.app import build_app


def test_worker_producer_is_idempotent(tmp_path: Path) -> None:
    settings = Settings(bootstrap="127.0.0.1:1", state_dir=tmp_path)

    async def make() -> Any:  # aiokafka binds its producer to the running loop
        app, _ctx = build_app(settings, ["l1"], instance_id="off")
        producer: Any = app.producer  # the aiokafka driver's
        return producer._new_producer()

    prod = asyncio.run(make())
    # aiokafka keeps a transaction manager (producer id and sequence numbers) only when
    # idempotent, and refuses idempotence with acks other than all
    assert prod._txn_manager is not None, "enable_idempotence is off"
