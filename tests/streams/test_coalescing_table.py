"""What a :class:`~argus.streams.durable.CoalescingTable` sends at a commit: each dirty key's
latest value once, a tombstone for a key the changelog holds, nothing for a key created and
deleted between two commits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import faust
import pytest

from argus.streams.durable import CoalescingTable


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # faust's messages are futures of the current event loop: one of this test's own (an
    # earlier test's asyncio.run leaves none)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        app = faust.App("t-coalescing", broker="kafka://127.0.0.1:1", store="memory://")
        t = CoalescingTable(app, name="cells", default=None, partitions=4, key_type=str)
        monkeypatch.setattr(t, "_event_partition", lambda key: 2)  # as inside an event
        yield t
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def _sent(t: Any) -> dict[str, Any]:
    """``{key: value}`` of the changelog messages a commit sends now (None: a tombstone)."""
    return {
        json.loads(m.message.key): None if m.message.value is None else json.loads(m.message.value)
        for m in t.take_dirty()
    }


def test_a_key_born_and_deleted_between_commits_sends_nothing(table: Any) -> None:
    table["a|1|0"] = {"x": 1}
    table["a|1|0"] = {"x": 2}
    del table["a|1|0"]
    table["a|1|1"] = {"x": 3}
    assert "a|1|0" not in table
    assert _sent(table) == {"a|1|1": {"x": 3}}
    assert table.dirty_count == 0 and _sent(table) == {}


def test_a_key_the_changelog_holds_is_deleted_with_a_tombstone(table: Any) -> None:
    table["k"] = {"v": 1}
    assert _sent(table) == {"k": {"v": 1}}  # committed: the changelog holds it now
    table["k"] = {"v": 2}
    del table["k"]
    assert _sent(table) == {"k": None}
    # deleted, then created and deleted again before a commit: still the tombstone
    table["j"] = {"v": 1}
    _sent(table)
    del table["j"]
    table["j"] = {"v": 2}
    del table["j"]
    assert _sent(table) == {"j": None}


def test_a_key_born_again_after_its_tombstone_is_sent_with_its_value(table: Any) -> None:
    table["k"] = {"v": 1}
    _sent(table)
    del table["k"]
    _sent(table)  # the tombstone: absent in the changelog again
    table["k"] = {"v": 2}
    del table["k"]
    table["k"] = {"v": 3}
    assert _sent(table) == {"k": {"v": 3}}
