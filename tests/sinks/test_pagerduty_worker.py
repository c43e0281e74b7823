"""The PagerDuty sink against the real broker and a local Events API v2 server.

The server (``http.server`` on 127.0.0.1) checks every body against the v2 format the way
PagerDuty documents it and answers 202, or whatever a test scripted for a dedup key
(429, 500, 503, 400).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import CollectorRegistry

from argus.config import ConfigError, Settings, load_settings
from argus.kafka.security import Secret
from argus.schemas.codec import Codec
from argus.sinks.pagerduty.worker import (
    PagerDutyConfig,
    PagerDutyStats,
    RoutingKey,
    post_json,
    run_pagerduty_sink,
)
from argus.topics import topic_name

KEY = "R0UTINGKEY0123456789abcdefABCDEF"
SEVERITIES = {"critical", "error", "warning", "info"}
PAYLOAD_FIELDS = {
    "summary",
    "source",
    "severity",
    "timestamp",
    "component",
    "group",
    "class",
    "custom_details",
}


def v2_errors(body: dict[str, Any]) -> list[str]:
    """What PagerDuty's Events API v2 would reject in ``body`` (empty: valid)."""
    errs = []
    if not isinstance(body.get("routing_key"), str) or len(body["routing_key"]) != 32:
        errs.append("routing_key must be a 32-character string")
    action = body.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        errs.append("event_action must be trigger, acknowledge or resolve")
    dedup = body.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or not 0 < len(dedup) <= 255):
        errs.append("dedup_key must be 1..255 characters")
    if action in ("acknowledge", "resolve") and dedup is None:
        errs.append("dedup_key is required for acknowledge/resolve")
    if action == "trigger":
        p = body.get("payload")
        if not isinstance(p, dict):
            return [*errs, "payload is required for trigger"]
        for f in ("summary", "source", "severity"):
            if not isinstance(p.get(f), str) or not p.get(f):
                errs.append(f"payload.{f} is required")
        if len(p.get("summary", "")) > 1024:
            errs.append("payload.summary is over 1024 characters")
        if p.get("severity") not in SEVERITIES:
            errs.append("payload.severity is invalid")
        if set(p) - PAYLOAD_FIELDS:
            errs.append(f"unknown payload fields {sorted(set(p) - PAYLOAD_FIELDS)}")
        if "custom_details" in p and not isinstance(p["custom_details"], dict):
            errs.append("payload.custom_details must be an object")
        if "timestamp" in p:
            try:
                time.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
            except ValueError:
                errs.append("payload.timestamp is not ISO 8601")
    allowed = {
        "routing_key",
        "event_action",
        "dedup_key",
        "payload",
        "client",
        "client_url",
        "images",
        "links",
    }
    if set(body) - allowed:
        errs.append(f"unknown fields {sorted(set(body) - allowed)}")
    return errs


@dataclasses.dataclass
class Received:
    body: dict[str, Any]
    status: int
    at_s: float  # time.monotonic()


class FakePagerDuty:
    """Events API v2 on 127.0.0.1; ``script[dedup_key]`` lists statuses to answer first."""

    def __init__(self) -> None:
        self.script: dict[str, list[int]] = {}
        self.always: dict[str, int] = {}
        # dedup key -> Retry-After sent with a 429/503 (a callable: made when answering)
        self.retry_after: dict[str, Any] = {}
        self.received: list[Received] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {}
                errs = ["body is not JSON"] if not body else v2_errors(body)
                if (
                    self.path != "/v2/enqueue"
                    or self.headers.get("Content-Type") != "application/json"
                ):
                    errs.append(f"bad path or content type: {self.path}")
                dedup = str(body.get("dedup_key"))
                with fake.lock:
                    queued = fake.script.get(dedup)
                    status = queued.pop(0) if queued else fake.always.get(dedup, 202)
                    if errs:
                        status = 400
                    fake.received.append(Received(body, status, time.monotonic()))
                reply: dict[str, Any]
                if status == 202:
                    reply = {"status": "success", "message": "Event processed", "dedup_key": dedup}
                elif status == 400:
                    reply = {
                        "status": "invalid event",
                        "message": "Event object is invalid",
                        "errors": errs or ["Scripted rejection"],
                    }
                else:
                    reply = {"status": "throttled" if status == 429 else "error", "message": "x"}
                data = json.dumps(reply).encode()
                self.send_response(status)
                if status in (429, 503) and dedup in fake.retry_after:
                    ra = fake.retry_after[dedup]
                    self.send_header("Retry-After", ra() if callable(ra) else ra)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v2/enqueue"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def seen(self) -> list[tuple[str, str, int]]:
        with self.lock:
            return [
                (r.body.get("event_action", ""), r.body.get("dedup_key", ""), r.status)
                for r in self.received
            ]


@pytest.fixture
def pd(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePagerDuty]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(var, raising=False)
    fake = FakePagerDuty()
    yield fake
    fake.close()


def make_alert(dedup: str, action: str = "trigger", severity: str = "error") -> dict[str, Any]:
    return {
        "dedup_key": dedup,
        "action": action,
        "severity": severity,
        "summary": f"{dedup}: rank 3 forward slower than DP peers",
        "job": "job1",
        "group_kind": "dp",
        "group_id": "s0-t0",
        "ranks": [3],
        "phase": "forward",
        "kernels": [],
        "levels": ["L2"],
        "first_seen_ns": 1_764_432_628_000_000_000,
        "last_seen_ns": 1_764_432_640_000_000_000,
        "persistence": 4,
        "confidence": 0.9,
        "anomaly_ids": ["x1"],
        "details": {"z": "4.2"},
    }


def produce(settings: Settings, topic: str, values: list[bytes]) -> None:
    p = Producer(settings.kafka_config())
    for v in values:
        p.produce(topic, value=v, key=b"k")
    assert p.flush(15) == 0


def committed(settings: Settings, group: str, topic: str) -> int:
    c = Consumer(settings.kafka_config(**{"group.id": group}))
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=15)[0].offset)
    finally:
        c.close()


def read_all(settings: Settings, topic: str, n: int, timeout_s: float = 20.0) -> list[bytes]:
    c = Consumer(
        settings.kafka_config(
            **{"group.id": f"reader-{time.time_ns()}", "auto.offset.reset": "earliest"}
        )
    )
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value() or b"")
    finally:
        c.close()
    return out


def sink_config(settings: Settings, url: str, **over: Any) -> PagerDutyConfig:
    s = dataclasses.replace(
        settings,
        sections={
            "pagerduty": {
                "events_url": url,
                "initial_backoff_s": 0.05,
                "rate_limited_backoff_s": 0.2,
                "jitter": 0,
                "poll_timeout_s": 0.2,
                **over,
            }
        },
    )
    return PagerDutyConfig.from_settings(s, env={"ARGUS_PAGERDUTY_ROUTING_KEY": KEY})


def run_in_thread(
    settings: Settings, cfg: PagerDutyConfig, **kw: Any
) -> tuple[threading.Thread, threading.Event, PagerDutyStats, list[BaseException]]:
    stop, stats, errors = threading.Event(), PagerDutyStats(), []

    def target() -> None:
        try:
            run_pagerduty_sink(settings, stop_event=stop, config=cfg, stats=stats, **kw)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, stop, stats, errors


def wait_for(cond: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.kafka
def test_trigger_resolve_dedup_retries_and_dlq(
    kafka: Settings, topic_prefix: str, pd: FakePagerDuty, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    s = dataclasses.replace(kafka, topic_prefix=topic_prefix)
    codec = Codec()
    alerts = topic_name("alerts", topic_prefix)
    pd.script = {"job1/B": [429, 500, 503], "job1/C": [400]}
    produce(
        s,
        alerts,
        [
            codec.encode("alert", make_alert("job1/A")),
            codec.encode("alert", make_alert("job1/B", severity="critical")),
            codec.encode("alert", make_alert("job1/A", action="resolve")),
            codec.encode("alert", make_alert("job1/C")),
            b"\x07not an alert",
            codec.encode("alert", make_alert("job1/D", severity="info")),  # below min_severity
            codec.encode("alert", make_alert("job1/A", severity="warning")),  # re-opens A
        ],
    )
    cfg = sink_config(s, pd.url, min_severity="warning")
    registry = CollectorRegistry()
    t, stop, stats, errors = run_in_thread(s, cfg, max_messages=7, metrics_registry=registry)
    t.join(90)
    stop.set()
    assert not t.is_alive(), f"sink did not finish; PagerDuty saw {pd.seen()}"
    assert not errors, errors

    assert pd.seen() == [
        ("trigger", "job1/A", 202),
        ("trigger", "job1/B", 429),
        ("trigger", "job1/B", 500),
        ("trigger", "job1/B", 503),
        ("trigger", "job1/B", 202),
        ("resolve", "job1/A", 202),
        ("trigger", "job1/C", 400),
        ("trigger", "job1/A", 202),
    ]
    for r in pd.received:
        assert v2_errors(r.body) == [], r.body
        assert r.body["routing_key"] == KEY
    first = pd.received[0].body
    assert first["payload"]["severity"] == "error"
    assert first["payload"]["custom_details"]["funnel"] == {"z": "4.2"}
    assert pd.received[1].body["payload"]["severity"] == "critical"
    # backoff: 429 waits rate_limited_backoff_s, then 5xx 0.05 * 2**(n-1)
    b = [r.at_s for r in pd.received[1:5]]
    assert b[1] - b[0] >= 0.2 * 0.95
    assert b[2] - b[1] >= 0.1 * 0.95 and b[3] - b[2] >= 0.2 * 0.95

    assert stats.accepted == 4 and stats.triggers == 3 and stats.resolves == 1
    assert stats.rate_limited_429 == 1 and stats.server_errors == 2 and stats.retries == 3
    assert stats.dead_lettered == 2 and stats.filtered == 1

    assert committed(s, cfg.group_id, alerts) == 7
    sample = registry.get_sample_value
    assert sample("argus_pagerduty_requests_total", {"action": "trigger", "status": "429"}) == 1
    assert sample("argus_pagerduty_requests_total", {"action": "trigger", "status": "202"}) == 3
    assert sample("argus_pagerduty_dead_lettered_total", {"error_type": "pagerduty-400"}) == 1
    dlq = [
        codec.decode_as("dlq_record", v) for v in read_all(s, topic_name("dlq", topic_prefix), 2)
    ]
    assert [(d["offset"], d["error_type"]) for d in dlq] == [
        (3, "pagerduty-400"),
        (4, "decode-bad-magic"),
    ]
    assert "Scripted rejection" in dlq[0]["reason"]
    assert dlq[1]["value"] == b"\x07not an alert" and dlq[0]["worker"] == "pagerduty"
    assert codec.decode_as("alert", dlq[0]["value"])["dedup_key"] == "job1/C"

    assert "job1/B" in caplog.text  # the log talks about alerts ...
    assert KEY not in caplog.text  # ... never about the routing key


@pytest.mark.kafka
def test_retry_after_is_honoured_in_seconds_and_as_a_date(
    kafka: Settings, topic_prefix: str, pd: FakePagerDuty
) -> None:
    """Issue 20: `Retry-After: 3` still waited 25 s (the 429 backoff); now the server's
    delay is the wait, given as seconds or as an HTTP-date."""
    from email.utils import formatdate

    s = dataclasses.replace(kafka, topic_prefix=topic_prefix)
    codec = Codec()
    alerts = topic_name("alerts", topic_prefix)
    pd.script = {"job1/S": [429], "job1/D": [503]}
    pd.retry_after = {"job1/S": "1", "job1/D": lambda: formatdate(time.time() + 3, usegmt=True)}
    produce(s, alerts, [codec.encode("alert", make_alert(k)) for k in ("job1/S", "job1/D")])
    # the schedule alone would wait 25-30 s after the 429 and 20-25 s after the 503
    cfg = sink_config(s, pd.url, rate_limited_backoff_s=30.0, initial_backoff_s=25.0, jitter=0.2)
    t, stop, _stats, errors = run_in_thread(s, cfg, max_messages=2)
    t.join(60)
    stop.set()
    assert not t.is_alive() and not errors, (pd.seen(), errors)
    assert pd.seen() == [
        ("trigger", "job1/S", 429),
        ("trigger", "job1/S", 202),
        ("trigger", "job1/D", 503),
        ("trigger", "job1/D", 202),
    ]
    at = [r.at_s for r in pd.received]
    assert 0.9 <= at[1] - at[0] < 5.0, at[1] - at[0]  # Retry-After: 1
    # the date has 1 s resolution: 2..3 s from the 503, well below the 20 s schedule
    assert 1.0 <= at[3] - at[2] < 6.0, at[3] - at[2]


@pytest.mark.kafka
def test_stop_during_retries_commits_nothing_and_a_restart_delivers(
    kafka: Settings, topic_prefix: str, pd: FakePagerDuty
) -> None:
    s = dataclasses.replace(kafka, topic_prefix=topic_prefix)
    codec = Codec()
    alerts = topic_name("alerts", topic_prefix)
    pd.always = {"job1/E": 500}
    produce(s, alerts, [codec.encode("alert", make_alert("job1/E"))])
    cfg = sink_config(s, pd.url, max_backoff_s=0.2)
    t, stop, stats, errors = run_in_thread(s, cfg)
    assert wait_for(lambda: len(pd.received) >= 3, 60), pd.seen()
    stop.set()
    t.join(30)
    assert not t.is_alive() and not errors, errors
    assert stats.abandoned == 1 and stats.accepted == 0
    assert committed(s, cfg.group_id, alerts) < 0  # nothing committed: no offset stored

    pd.always = {}
    t, stop, stats, errors = run_in_thread(s, cfg, max_messages=1)
    t.join(60)
    stop.set()
    assert not t.is_alive() and not errors, errors
    assert pd.seen()[-1] == ("trigger", "job1/E", 202)
    assert stats.accepted == 1
    assert committed(s, cfg.group_id, alerts) == 1


@pytest.mark.kafka
def test_rate_limit_per_routing_key(kafka: Settings, topic_prefix: str, pd: FakePagerDuty) -> None:
    s = dataclasses.replace(kafka, topic_prefix=topic_prefix)
    codec = Codec()
    produce(
        s,
        topic_name("alerts", topic_prefix),
        [codec.encode("alert", make_alert(f"job1/R{i}")) for i in range(5)],
    )
    cfg = sink_config(s, pd.url, rate_limit_events=2, rate_limit_window_s=1.0)
    t, stop, stats, errors = run_in_thread(s, cfg, max_messages=5)
    t.join(60)
    stop.set()
    assert not t.is_alive() and not errors, errors
    times = [r.at_s for r in pd.received]
    assert len(times) == 5
    for i, at in enumerate(times):  # at most 2 sends in any rolling second
        assert sum(1 for u in times[: i + 1] if u > at - 0.98) <= 2, times
    assert times[-1] - times[0] >= 2 * 0.98  # 5 sends at 2/s need two full windows
    assert stats.rate_limit_wait_s > 0.3  # the rest passed while records arrived


def test_network_error_is_a_result_not_an_exception() -> None:
    res = post_json("http://127.0.0.1:9/v2/enqueue", b"{}", 2.0)  # discard port: refused
    assert res.status is None and res.error


def test_routing_key_from_env_or_file(tmp_path: Path) -> None:
    s = load_settings(env={})
    assert PagerDutyConfig.from_settings(
        s, env={"ARGUS_PAGERDUTY_ROUTING_KEY": KEY}
    ).routing_key == RoutingKey(KEY)
    f = tmp_path / "key"
    f.write_text(KEY + "\n")
    cfg = PagerDutyConfig.from_settings(s, env={"ARGUS_PAGERDUTY_ROUTING_KEY_FILE": str(f)})
    assert cfg.routing_key.reveal() == KEY
    assert KEY not in repr(cfg) and KEY not in str(cfg.routing_key)
    assert repr(cfg.routing_key) == "RoutingKey('********')"  # Secret's mask, own name
    assert cfg.routing_key != Secret(KEY) and cfg.routing_key == RoutingKey(KEY)
    assert cfg.group_id == "argus.pagerduty" and cfg.section.events_url.startswith(
        "https://events.pagerduty"
    )
    with pytest.raises(ConfigError, match="ARGUS_PAGERDUTY_ROUTING_KEY"):
        PagerDutyConfig.from_settings(s, env={})
    with pytest.raises(ConfigError, match="cannot be read"):
        PagerDutyConfig.from_settings(
            s, env={"ARGUS_PAGERDUTY_ROUTING_KEY_FILE": str(tmp_path / "no")}
        )


def test_config_holds_the_checked_section() -> None:
    """One definition of the keys: the sink's config carries the [pagerduty] section itself,
    and an override is checked as the section is."""
    env = {"ARGUS_PAGERDUTY_ROUTING_KEY": KEY}
    s = load_settings(env={**env, "ARGUS_PAGERDUTY__RATE_LIMIT_EVENTS": "7"})
    cfg = PagerDutyConfig.from_settings(s, env=env, jitter=0.0)
    assert cfg.section.rate_limit_events == 7 and cfg.section.jitter == 0.0
    assert cfg.section.retry_policy().jitter == 0.0
    with pytest.raises(ConfigError, match="jitter"):
        PagerDutyConfig.from_settings(s, env=env, jitter=3.0)
    with pytest.raises(ConfigError, match="routing key is empty"):
        PagerDutyConfig.from_settings(s, env=env, routing_key=RoutingKey(""))


def test_bad_settings_name_the_key() -> None:
    env = {"ARGUS_PAGERDUTY_ROUTING_KEY": KEY}
    for over, match in [
        ({"ARGUS_PAGERDUTY__RATE_LIMIT_EVENTS": "lots"}, "rate_limit_events"),
        ({"ARGUS_PAGERDUTY__MIN_SEVERITY": "loud"}, "min_severity"),
        ({"ARGUS_PAGERDUTY__EVENTS_URL": "ftp://x"}, "events_url"),
        ({"ARGUS_PAGERDUTY__SEVERITY_MAP__INFO": "page"}, "severity_map"),
        ({"ARGUS_PAGERDUTY__JITTER": "3"}, "jitter"),
        ({"ARGUS_PAGERDUTY__EVENT_URL": "http://x"}, "ARGUS_PAGERDUTY__EVENT_URL"),
    ]:
        with pytest.raises(ConfigError, match=match):  # when the settings load, named
            PagerDutyConfig.from_settings(load_settings(env={**env, **over}), env=env)


def _json_in_strings(obj: Any, path: str = "") -> list[str]:
    """Paths of string values that hold a JSON list or object (issue 20: none allowed)."""
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _json_in_strings(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _json_in_strings(v, f"{path}[{i}]")]
    if isinstance(obj, str) and obj[:1] in "[{":
        try:
            json.loads(obj)
        except ValueError:
            return []
        return [path]
    return []


@pytest.mark.kafka
def test_oncall_reads_the_trigger_culprit_hosts_start_drilldown(
    kafka: Settings, topic_prefix: str, pd: FakePagerDuty
) -> None:
    """The trigger as an on-call engineer reads it: the summary names the faulty group, its
    ranks and hosts, what is slow, how much and since when (ISO); custom_details are
    objects (no JSON in strings), victims are not members of the culprit, the drill-down
    command is ready to paste, and the report link points at this alert."""
    from argus.collectors.topology import Layout, Topology, layout_coords, topology_records
    from tests.detectors.test_funnel_render import group_culprit

    s = dataclasses.replace(kafka, topic_prefix=topic_prefix)
    codec = Codec()
    alert = group_culprit().to_alert("trigger")  # the funnel's own record
    layout = Layout(dp=2, tp=2, pp=2, ep=8)
    jobs = Producer(s.kafka_config())
    for r in range(64):  # what each rank's collectors publish when they start
        host = f"node{r // 8:04d}"
        topo = Topology(r, 64, r % 8, host, 1000 + r, layout_coords(layout, r), layout)
        for key, rec in topology_records("llm", topo, 1, "test"):
            jobs.produce(topic_name("jobs", topic_prefix), codec.encode("job_topology", rec), key)
    assert jobs.flush(15) == 0
    produce(s, topic_name("alerts", topic_prefix), [codec.encode("alert", alert)])
    cfg = sink_config(s, pd.url, report_url="https://ops.example/argus/{job}?around={dedup_key}")
    t, stop, stats, errors = run_in_thread(s, cfg, max_messages=1)
    t.join(60)
    stop.set()
    assert not t.is_alive() and not errors, (pd.seen(), errors)
    assert [r.status for r in pd.received] == [202], pd.seen()
    body = pd.received[0].body
    assert v2_errors(body) == []
    p = body["payload"]
    # the first words name the culprit: group, member ranks, hosts
    assert p["summary"].startswith(
        "edp group pp1.tp0.ep3 (ranks 38,46,54,62, hosts node0004,node0005,node0006,node0007):"
        " collective/kernel ncclReduceScatter slow for the whole group, 5.33x the other edp"
        " groups, since 2026-05-28T20:20:06Z;"
    ), p["summary"]
    cd = p["custom_details"]
    assert _json_in_strings(cd) == []
    assert cd["culprit"]["ranks"] == [38, 46, 54, 62]
    assert cd["culprit"]["hosts"] == ["node0004", "node0005", "node0006", "node0007"]
    assert cd["culprit"]["rank_hosts"]["54"] == "node0006"
    assert cd["culprit"]["since"] == "2026-05-28T20:20:06Z"
    assert cd["culprit"]["ratio_to_peers"] == pytest.approx(5.329, abs=1e-3)
    assert cd["victims"] == [12] and not set(cd["victims"]) & set(cd["culprit"]["ranks"])
    assert cd["evidence"]["findings"][0]["kind"] == "group_divergence"  # an object, not text
    assert cd["evidence"]["steps"] == "50-59" and cd["evidence"]["levels"] == ["L3"]
    assert cd["drill_down"]["report"] == f"argus report --around {alert['dedup_key']}"
    assert cd["drill_down"]["stacks"] == f"argus stacks --around {alert['dedup_key']}"
    assert body["links"] == [
        {
            "href": "https://ops.example/argus/llm?around=llm%2Fedp%2Fpp1.tp0.ep3%2F-%2FncclReduceScatter",
            "text": "argus report: edp group pp1.tp0.ep3 (llm)",
        }
    ]
    assert stats.accepted == 1


def test_report_url_is_checked_when_the_settings_load() -> None:
    with pytest.raises(ConfigError, match=r"report_url .*unknown placeholders \['rank'\]"):
        sink_config(Settings(), "http://x/v2/enqueue", report_url="https://ops.example/{rank}")
    with pytest.raises(ConfigError, match="report_url must be an http"):
        sink_config(Settings(), "http://x/v2/enqueue", report_url="ops.example/r")


def test_the_pagerduty_identity_may_read_the_job_topology() -> None:
    """On a secure cluster the sink reads argus.jobs (the ranks' hosts) as its own user."""
    from argus.kafka.acls import acl_rules

    mine = {(r.name, r.operation) for r in acl_rules("argus") if r.user == "pagerduty"}
    assert {("argus.jobs", "READ"), ("argus.jobs", "DESCRIBE")} <= mine
    assert ("argus.jobs", "WRITE") not in mine
