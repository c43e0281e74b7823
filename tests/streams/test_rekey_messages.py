"""A router's poll re-keys its items as few messages per key (issue 21: the per-record
framework share of the steps and L3 workers)."""

from __future__ import annotations

import json
import random

from argus.streams.app import REKEY_MESSAGE_BYTES, rekey_messages


def _items(owners: int, per: list[int], size: int) -> list[tuple[object, bytes]]:
    evs = [object() for _ in range(owners)]
    out = []
    n = 0
    for ev, k in zip(evs, per, strict=True):
        for _ in range(k):
            out.append((ev, json.dumps({"n": n, "pad": "x" * size}).encode()))
            n += 1
    return out


def test_one_message_holds_every_item_in_order() -> None:
    items = _items(3, [2, 1, 3], 10)
    ((owners, value),) = rekey_messages(items, 12.5)
    msg = json.loads(value)
    assert msg["t"] == 12.5
    assert [i["n"] for i in msg["items"]] == list(range(6))
    assert owners == [items[0][0], items[2][0], items[3][0]]


def test_messages_are_cut_between_events_only() -> None:
    rng = random.Random(3)
    per = [rng.randint(1, 6) for _ in range(200)]
    items = _items(200, per, 3000)  # ~600 KB per key: several messages
    msgs = rekey_messages(items, 1.0)
    assert len(msgs) > 1
    got = [json.loads(v)["items"] for _, v in msgs]
    assert [i["n"] for m in got for i in m] == list(range(sum(per)))  # all, in order, once
    seen: list[object] = []
    for owners, value in msgs:
        assert not set(map(id, owners)) & set(map(id, seen)), "an event split over messages"
        seen += owners
        # a message closes once it reaches the bound: at most one event's items beyond it
        assert len(value) < REKEY_MESSAGE_BYTES + 7 * 3100
    first = list(dict.fromkeys(id(e) for e, _ in items))
    assert [id(o) for o in seen] == first  # each event once, in order


def test_one_large_event_travels_whole() -> None:
    items = _items(1, [120], 4000)  # ~480 KB from one event: one message, not cut
    ((owners, value),) = rekey_messages(items, 2.0)
    assert len(owners) == 1 and len(json.loads(value)["items"]) == 120
