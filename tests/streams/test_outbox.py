"""The outbox on the real broker: a restored outbox whose records (some or all) already left
sends none of them again and the rest once; a process's own entries go out without a look at
the topic; a failed send makes the retry look. And the tail reader itself."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from argus.config import Settings
from argus.detectors.alert_id import alert_id, alert_identity
from argus.schemas import Codec
from argus.streams import outbox as ob
from argus.streams.topic_tail import TailError, identities_since
from argus.topics import topic_name

pytestmark = pytest.mark.kafka


class _Ctx:
    """What the outbox uses of a worker's Ctx, over a plain confluent-kafka producer."""

    def __init__(self, settings: Settings, prefix: str, fail_after: int | None = None) -> None:
        from confluent_kafka import Producer

        self.settings = settings
        self.prefix = prefix
        self.codec = Codec()
        self.prod = Producer(settings.kafka_config())
        self.durable = self
        self.fail_after = fail_after  # emit raises after this many records (a broken send)
        self.emitted = 0

    def topic(self, suffix: str) -> str:
        return topic_name(suffix, self.prefix)

    async def emit(
        self, suffix: str, key: str, record: str, value: dict[str, Any], role: str
    ) -> None:
        if self.fail_after is not None and self.emitted >= self.fail_after:
            raise RuntimeError("broker gone")
        self.prod.produce(
            self.topic(suffix), key=key.encode(), value=self.codec.encode(record, value)
        )
        self.emitted += 1

    async def flush(self) -> None:
        assert self.prod.flush(15) == 0


class _Tail:
    """The real tail reader, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any) -> set[str]:
        self.calls += 1
        return identities_since(*args)


def _alert(i: int, action: str = "trigger") -> dict[str, Any]:
    key = f"job/dp/pp0/{i}/mlp"
    return {
        "dedup_key": key,
        "action": action,
        "severity": "error",
        "summary": f"rank {i}",
        "job": "job",
        "group_kind": "dp",
        "group_id": "pp0",
        "ranks": [i],
        "phase": "mlp",
        "levels": ["L2"],
        "first_seen_ns": 1,
        "last_seen_ns": 2,
        "persistence": 2,
        "id": alert_id(key, action, 10, 19),
    }


def _on_topic(settings: Settings, prefix: str, suffix: str) -> Counter[str]:
    from argus.streams.local_run import Watcher

    w = Watcher(settings, [suffix], prefix=prefix)
    try:
        w.wait_for(lambda _: False, timeout_s=3)
        return Counter(alert_identity(a) for a in w.get(suffix))
    finally:
        w.close()


def _deliver(box: ob.Outbox, entries: list[Any]) -> int:
    return asyncio.run(box.deliver(entries))


def test_a_restored_outbox_sends_each_record_once(kafka: Settings, topic_prefix: str) -> None:
    tail = _Tail()
    crashed = ob.Outbox(_Ctx(kafka, topic_prefix), tail=tail)
    state = [crashed.entry("alerts", a["dedup_key"], "alert", a) for a in map(_alert, range(6))]
    # the crashed process sent the first four, then died before emptying its outbox
    assert _deliver(crashed, state[:4]) == 4
    assert tail.calls == 0  # its own entries: no look at the topic
    restarted = ob.Outbox(_Ctx(kafka, topic_prefix), tail=tail)
    restored = [dict(e) for e in state]  # as read back from the changelog
    assert _deliver(restarted, restored) == 2
    assert tail.calls == 1
    # and once more (crash again before the empty outbox was durable): nothing new
    assert _deliver(ob.Outbox(_Ctx(kafka, topic_prefix), tail=tail), [dict(e) for e in state]) == 0
    sent = _on_topic(kafka, topic_prefix, "alerts")
    assert sent == Counter({e["id"]: 1 for e in state})


def test_a_failed_send_makes_the_retry_look(kafka: Settings, topic_prefix: str) -> None:
    tail = _Tail()
    ctx = _Ctx(kafka, topic_prefix, fail_after=2)
    box = ob.Outbox(ctx, tail=tail)
    entries = [box.entry("alerts", a["dedup_key"], "alert", a) for a in map(_alert, range(4))]
    with pytest.raises(RuntimeError):
        _deliver(box, entries)
    asyncio.run(ctx.flush())  # the two records that did leave
    assert all(e["by"] == "" for e in entries)
    ctx.fail_after = None
    assert _deliver(box, entries) == 2
    assert tail.calls == 1
    assert _on_topic(kafka, topic_prefix, "alerts") == Counter({e["id"]: 1 for e in entries})


def test_an_outbox_of_the_older_version_is_checked_too(kafka: Settings, topic_prefix: str) -> None:
    """Bare alert records without ``id`` (the outbox before this change), one already sent."""
    legacy = [{k: v for k, v in _alert(i).items() if k != "id"} for i in range(3)]
    ctx = _Ctx(kafka, topic_prefix)
    asyncio.run(ctx.emit("alerts", legacy[0]["dedup_key"], "alert", legacy[0], "old"))
    asyncio.run(ctx.flush())
    assert _deliver(ob.Outbox(_Ctx(kafka, topic_prefix)), [dict(a) for a in legacy]) == 2
    assert _on_topic(kafka, topic_prefix, "alerts") == Counter(
        {alert_identity(a): 1 for a in legacy}
    )


def test_tail_reads_only_its_keys_and_time(kafka: Settings, topic_prefix: str) -> None:
    ctx = _Ctx(kafka, topic_prefix)
    codec = Codec()
    for i in range(4):
        a = _alert(i)
        asyncio.run(ctx.emit("alerts", a["dedup_key"], "alert", a, "t"))
    asyncio.run(ctx.flush())
    topic = topic_name("alerts", topic_prefix)
    keys = {_alert(0)["dedup_key"], _alert(2)["dedup_key"], "job/none"}
    now_ms = int(time.time() * 1000)
    got = identities_since(kafka, codec, topic, keys, now_ms - 60_000, alert_identity)
    assert got == {_alert(0)["id"], _alert(2)["id"]}
    assert identities_since(kafka, codec, topic, keys, now_ms + 60_000, alert_identity) == set()
    with pytest.raises(TailError, match="does not exist"):
        identities_since(kafka, codec, topic + ".nope", keys, 0, alert_identity)
