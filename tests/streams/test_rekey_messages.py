"""A router's poll re-keys its items as few messages per key (issue 21: the per-record
framework share of the steps and L3 workers)."""

from __future__ import annotations

import json
import random

import pytest

from argus.streams.rekey import (
    BLOB,
    REKEY_MESSAGE_BYTES,
    item_bytes,
    read_message,
    rekey_messages,
)


def _items(
    owners: int, per: list[int], size: int
) -> list[tuple[object, tuple[bytes, bytes | None]]]:
    evs = [object() for _ in range(owners)]
    out = []
    n = 0
    for ev, k in zip(evs, per, strict=True):
        for _ in range(k):
            out.append((ev, item_bytes({"n": n, "pad": "x" * size})))
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


def test_blobs_travel_after_the_json_and_come_back_in_order() -> None:
    rng = random.Random(5)
    evs = [object() for _ in range(120)]
    sent = []
    for i in range(len(evs)):
        item: dict[str, object] = {"n": i, "names": {"1": "gemm\u0000x"}}
        if i % 3:  # some items without a blob; blobs holding NUL bytes and every value
            item[BLOB] = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 9000)))
        sent.append(item)
    msgs = rekey_messages([(ev, item_bytes(it)) for ev, it in zip(evs, sent, strict=True)], 3.0)
    assert len(msgs) > 1  # cut by size, blobs counted
    got = [it for _, v in msgs for it in read_message(v)["items"]]
    assert got == sent
    # a message without blobs is plain JSON, as before blobs (and as ticks are)
    ((_, plain),) = rekey_messages([(evs[0], item_bytes({"n": 0}))], 1.0)
    assert json.loads(plain) == read_message(plain) == {"items": [{"n": 0}], "t": 1.0}
    # empty blobs only: still blobs
    ((_, empty),) = rekey_messages([(evs[0], item_bytes({"n": 0, BLOB: b""}))], 1.0)
    assert read_message(empty)["items"] == [{"n": 0, BLOB: b""}]


def test_a_message_whose_blobs_do_not_add_up_is_refused() -> None:
    ((_, value),) = rekey_messages([(None, item_bytes({BLOB: b"abc"}))], 1.0)
    assert read_message(value)["items"] == [{BLOB: b"abc"}]
    with pytest.raises(ValueError, match="blobs of 3 bytes, 4 after"):
        read_message(value + b"!")
