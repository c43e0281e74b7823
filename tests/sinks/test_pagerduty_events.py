"""Pure parts of the PagerDuty sink: event bodies, severity, rate limiting, retry policy."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.schemas.codec import Codec
from argus.sinks.pagerduty.events import (
    MAX_PAYLOAD_BYTES,
    Disposition,
    PagerDutyEventError,
    RateLimiter,
    RetryPolicy,
    SlidingWindowLimiter,
    build_event,
    encode_event,
    map_severity,
    pagerduty_dedup_key,
    parse_retry_after,
    redact,
)

KEY = "R0UTINGKEY0123456789abcdefABCDEF"  # 32 chars, like a real integration key


def alert(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "dedup_key": "job1/dp/stage0-tp0/7/fwd",
        "action": "trigger",
        "severity": "error",
        "summary": "rank 7 forward 38% slower than its DP peers for 12 steps",
        "job": "job1",
        "group_kind": "dp",
        "group_id": "stage0-tp0",
        "ranks": [7],
        "phase": "forward",
        "kernels": ["sm90_xmma_gemm_bf16"],
        "levels": ["L1", "L2"],
        "first_seen_ns": 1_764_432_628_123_456_789,
        "last_seen_ns": 1_764_432_640_987_000_000,
        "persistence": 12,
        "confidence": 0.93,
        "anomaly_ids": ["a1", "a2"],
        "details": {"l2_z": "5.1", "peers": "63"},
    }
    base.update(over)
    return base


def test_trigger_has_the_v2_shape() -> None:
    ev = build_event(alert(), routing_key=KEY, client_url="https://grafana.example/argus")
    assert set(ev) == {
        "routing_key",
        "event_action",
        "dedup_key",
        "payload",
        "client",
        "client_url",
    }
    assert ev["routing_key"] == KEY and ev["event_action"] == "trigger"
    assert ev["dedup_key"] == "job1/dp/stage0-tp0/7/fwd"
    p = ev["payload"]
    assert {"summary", "source", "severity"} <= set(p)
    assert p["severity"] == "error"
    assert p["source"] == "argus/job1"
    assert p["timestamp"] == "2025-11-29T16:10:40.987Z"
    assert p["component"] == "forward" and p["group"] == "dp/stage0-tp0" and p["class"] == "L1+L2"
    cd = p["custom_details"]
    assert cd["culprit"]["ranks"] == [7] and cd["culprit"]["job"] == "job1"
    assert cd["evidence"]["persistence"] == 12 and cd["evidence"]["confidence"] == 0.93
    assert cd["funnel"] == {"l2_z": "5.1", "peers": "63"}  # details argus does not structure
    assert cd["evidence"]["first_seen"] == "2025-11-29T16:10:28.123Z"
    assert cd["culprit"]["since"] == "2025-11-29T16:10:28.123Z"  # no details.since: first seen
    assert json.loads(encode_event(ev)) == ev


def test_trigger_from_a_wire_record() -> None:
    codec = Codec()
    rec = codec.decode_as("alert", codec.encode("alert", alert(phase=None, kernels=[])))
    ev = build_event(rec, routing_key=KEY)
    assert ev["payload"]["component"] == "dp"  # no phase, no kernel: the group kind
    assert "client_url" not in ev


def test_resolve_carries_only_what_pagerduty_needs() -> None:
    ev = build_event(alert(action="resolve", summary=""), routing_key=KEY)
    assert ev == {"routing_key": KEY, "event_action": "resolve", "dedup_key": alert()["dedup_key"]}


def test_summary_is_cut_to_1024_chars() -> None:
    ev = build_event(alert(summary="x" * 5000), routing_key=KEY)
    assert len(ev["payload"]["summary"]) == 1024


def test_long_dedup_keys_shrink_stably_for_trigger_and_resolve() -> None:
    long_key = "job/" + "r" * 400
    trig = build_event(alert(dedup_key=long_key), routing_key=KEY)
    res = build_event(alert(dedup_key=long_key, action="resolve"), routing_key=KEY)
    assert len(trig["dedup_key"]) == 255
    assert trig["dedup_key"] == res["dedup_key"]
    assert trig["payload"]["custom_details"]["argus_dedup_key"] == long_key
    other = pagerduty_dedup_key("job/" + "r" * 399 + "s")
    assert other != trig["dedup_key"]


@pytest.mark.parametrize(
    ("over", "reason"),
    [
        ({"dedup_key": "  "}, "empty-dedup-key"),
        ({"summary": " "}, "empty-summary"),
        ({"severity": "fatal"}, "bad-severity"),
        ({"action": "acknowledge"}, "bad-action"),
    ],
)
def test_bad_alerts_raise_typed_errors(over: dict[str, Any], reason: str) -> None:
    with pytest.raises(PagerDutyEventError) as info:
        build_event(alert(**over), routing_key=KEY)
    assert info.value.reason == reason


def test_culprit_reads_members_and_hosts_as_the_summary_does() -> None:
    """One reader of details.members/hosts (argus.detectors.funnel.render): the event's culprit
    and the summary agree; members that do not parse fall back to the alert's ranks."""
    from argus.detectors.funnel.render import alert_summary

    d = {"members": "[3, 9]", "hosts": json.dumps({"3": "node3", "9": "node9", "4": "node4"})}
    a = alert(ranks=[], group_kind="ep", group_id="pp0.ep1", details=d)
    c = build_event(a, routing_key=KEY)["payload"]["custom_details"]["culprit"]
    assert c["ranks"] == [3, 9] and c["rank_hosts"] == {"3": "node3", "9": "node9"}
    assert c["hosts"] == ["node3", "node9"] and "hosts node3,node9" in alert_summary(a)
    bad = alert(details={"members": '["x"]', "hosts": "{not json"})  # raised ValueError before
    c = build_event(bad, routing_key=KEY)["payload"]["custom_details"]["culprit"]
    assert c["ranks"] == [7] and c["hosts"] == [] and c["rank_hosts"] == {}


def test_missing_field_is_named() -> None:
    a = alert()
    del a["job"]
    with pytest.raises(PagerDutyEventError, match="job"):
        build_event(a, routing_key=KEY)


def test_oversized_evidence_is_trimmed_under_512_kb() -> None:
    big = {f"k{i}": "v" * 4000 for i in range(300)}  # ~1.2 MB of evidence
    ev = build_event(
        alert(details=big, anomaly_ids=[f"id{i}" for i in range(200)]), routing_key=KEY
    )
    assert len(encode_event(ev)) <= MAX_PAYLOAD_BYTES
    assert "trimmed" in ev["payload"]["custom_details"]["funnel"]
    assert len(ev["payload"]["custom_details"]["anomaly_ids"]) == 16


def test_severity_mapping() -> None:
    assert [map_severity(s) for s in ("critical", "error", "warning", "info")] == [
        "critical",
        "error",
        "warning",
        "info",
    ]
    assert map_severity("warning", {"warning": "error"}) == "error"
    with pytest.raises(PagerDutyEventError, match="severity_map"):
        map_severity("info", {"info": "page-me"})
    ev = build_event(
        alert(severity="warning"), routing_key=KEY, severity_map={"warning": "critical"}
    )
    assert ev["payload"]["severity"] == "critical"


def test_redact() -> None:
    assert redact(f"bad key {KEY}!", KEY) == "bad key ***!"
    assert redact("nothing", "") == "nothing"


# -- rate limiter -----------------------------------------------------------------------------


def test_limiter_allows_a_burst_then_waits_for_the_oldest_to_age_out() -> None:
    lim = SlidingWindowLimiter(max_events=3, window_s=60.0)
    for t in (0.0, 1.0, 2.0):
        assert lim.delay_s(t) == 0.0
        lim.record(t)
    assert lim.delay_s(2.5) == pytest.approx(57.5)
    assert lim.delay_s(60.0) == 0.0


def test_rate_limiter_is_per_routing_key() -> None:
    rl = RateLimiter(max_events=1, window_s=10.0)
    rl.record("a", 0.0)
    assert rl.delay_s("a", 1.0) == pytest.approx(9.0)
    assert rl.delay_s("b", 1.0) == 0.0


@settings(max_examples=200, deadline=None)
@given(
    max_events=st.integers(1, 10),
    window_s=st.floats(0.5, 100.0),
    gaps=st.lists(st.floats(0.0, 30.0), min_size=1, max_size=60),
)
def test_limiter_never_exceeds_its_budget_in_any_window(
    max_events: int, window_s: float, gaps: list[float]
) -> None:
    lim = SlidingWindowLimiter(max_events=max_events, window_s=window_s)
    now, sent = 0.0, []
    for gap in gaps:
        now += gap
        while (delay := lim.delay_s(now)) > 0:  # the sink sleeps, then asks again
            now += delay
        lim.record(now)
        sent.append(now)
    for i, t in enumerate(sent):
        in_window = [u for u in sent[: i + 1] if u + window_s > t]
        assert len(in_window) <= max_events


def test_limiter_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        SlidingWindowLimiter(max_events=0, window_s=1.0)
    with pytest.raises(ValueError):
        SlidingWindowLimiter(max_events=1, window_s=0.0)


# -- retry policy -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "disposition"),
    [
        (202, Disposition.ACCEPTED),
        (200, Disposition.ACCEPTED),
        (400, Disposition.REJECT),
        (413, Disposition.REJECT),
        (422, Disposition.REJECT),
        (429, Disposition.RETRY),
        (500, Disposition.RETRY),
        (503, Disposition.RETRY),
        (408, Disposition.RETRY),
        (404, Disposition.RETRY),
        (None, Disposition.RETRY),
    ],
)
def test_classify(status: int | None, disposition: Disposition) -> None:
    assert RetryPolicy.classify(status) is disposition


def test_backoff_grows_caps_and_jitters() -> None:
    p = RetryPolicy(
        initial_backoff_s=1.0,
        rate_limited_backoff_s=30.0,
        max_backoff_s=100.0,
        multiplier=2.0,
        jitter=0.2,
    )
    assert [p.backoff_s(a, status=500) for a in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert p.backoff_s(20, status=503) == 100.0
    assert p.backoff_s(1, status=429) == 30.0
    assert p.backoff_s(2, status=429) == 60.0
    assert p.backoff_s(1, status=500, u=0.0) == pytest.approx(0.8)
    assert p.backoff_s(1000, status=None) == 100.0  # no overflow
    assert p.backoff_s(1, status=429, retry_after_s=45.0) == 45.0  # the server says when
    assert p.backoff_s(1, status=429, retry_after_s=10_000.0) == 100.0  # but capped


def test_retry_after_replaces_the_schedule() -> None:
    """Issue 20: `Retry-After: 3` after a 429 still waited 25 s (the 30 s 429 backoff with
    jitter; Retry-After was only a floor)."""
    p = RetryPolicy(rate_limited_backoff_s=30.0, jitter=0.2)
    assert p.backoff_s(1, status=429, retry_after_s=3.0, u=0.0) == 3.0
    assert p.backoff_s(3, status=503, retry_after_s=0.0) == 0.0


@pytest.mark.parametrize(
    ("header", "now", "want"),
    [
        ("3", 0.0, 3.0),
        (" 120 ", 0.0, 120.0),
        ("-5", 0.0, 0.0),
        ("Wed, 21 Oct 2026 07:28:03 GMT", 1792567680.0, 3.0),  # IMF-fixdate
        ("Wednesday, 21-Oct-26 07:28:03 GMT", 1792567680.0, 3.0),  # RFC 850
        ("Wed Oct 21 07:28:03 2026", 1792567680.0, 3.0),  # asctime
        ("Wed, 21 Oct 2026 07:27:00 GMT", 1792567680.0, 0.0),  # in the past
        ("soon", 0.0, None),
        ("nan", 0.0, None),
        ("", 0.0, None),
        (None, 0.0, None),
    ],
)
def test_parse_retry_after_seconds_and_http_dates(
    header: str | None, now: float, want: float | None
) -> None:
    assert parse_retry_after(header, now) == want


def test_gives_up_only_when_bounded() -> None:
    assert not RetryPolicy().gives_up(10_000)
    p = RetryPolicy(max_attempts=3)
    assert not p.gives_up(2) and p.gives_up(3)
    with pytest.raises(ValueError):
        RetryPolicy(jitter=2.0)
    with pytest.raises(ValueError):
        RetryPolicy().backoff_s(0)


def test_job_hosts_fold_topology_records_newest_wins_bounded() -> None:
    from argus.sinks.topology import JobHosts

    h = JobHosts(max_jobs=2)
    h.add({"job": "a", "ranks": [{"rank": 0, "host": "n0"}, {"rank": 1, "host": ""}]})
    h.add({"job": "a", "ranks": [{"rank": 1, "host": "n1"}, {"rank": 0, "host": "n9"}]})
    assert h.hosts("a") == {0: "n9", 1: "n1"} and h.hosts("zzz") == {}
    h.add({"job": "b", "ranks": [{"rank": 0, "host": "m0"}]})
    h.add({"job": "c", "ranks": [{"rank": 0, "host": "k0"}]})
    assert h.hosts("a") == {} and h.hosts("c") == {0: "k0"}  # the oldest job forgotten
