"""argus_input_age_seconds: the age of each record a role takes (wall clock - Kafka timestamp)."""

from __future__ import annotations

import time

from argus.streams import metrics


def _value(name: str, topic: str) -> float:
    v = metrics.REGISTRY.get_sample_value(name, {"topic": topic})
    return 0.0 if v is None else v


def test_consumed_records_its_age_per_topic() -> None:
    topic = "test-age.raw.kernels"
    n0, s0 = (
        _value("argus_input_age_seconds_count", topic),
        _value("argus_input_age_seconds_sum", topic),
    )
    now = time.time()
    metrics.consumed(topic, 0, now - 30.0, 5)
    metrics.consumed(topic, 1, now - 2.0, 7)
    metrics.consumed(topic, 1, None, 8)  # no timestamp: no age, the offset still noted
    assert _value("argus_input_age_seconds_count", topic) - n0 == 2
    assert 32.0 <= _value("argus_input_age_seconds_sum", topic) - s0 < 33.0
    over_20 = metrics.REGISTRY.get_sample_value(
        "argus_input_age_seconds_bucket", {"topic": topic, "le": "20.0"}
    )
    assert over_20 == 1  # the 2 s record, not the 30 s one
    assert metrics.last_offset(topic, 1) == 8


def test_a_timestamp_from_the_future_reads_as_age_zero() -> None:
    topic = "test-age.skewed"
    metrics.consumed(topic, 0, time.time() + 60.0)  # a producer's clock ahead of ours
    assert _value("argus_input_age_seconds_sum", topic) == 0.0
    assert _value("argus_input_age_seconds_count", topic) == 1
