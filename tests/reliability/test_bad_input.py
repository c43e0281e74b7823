"""Bad input on the real broker: every bad record lands in the DLQ with its reason and original
bytes, the worker stays up, and the good records after them are still processed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Producer

from argus.config import Settings
from argus.schemas import Codec
from argus.schemas.arrays import pack
from argus.streams.local_run import Watcher
from argus.summaries.summary_record import summarize_batch
from argus.topics import topic_name
from tests.pipeline.harness import backlog, groups_of, metric, worker

pytestmark = [pytest.mark.kafka]

SEC = 10**9
CAP = 1_000_000  # the worker's max_batch_events: 1 M events pass, one more is too large
CODEC = Codec()


def step(job: str, s: int, t0: int, **kw: Any) -> dict[str, Any]:
    t = t0 + min(s, 100) * SEC
    rec = {
        "job": job,
        "rank": 0,
        "step": s,
        "start_ns": t,
        "end_ns": t + SEC // 2,
        "host": "h",
        "coords": {},  # world of 1: a step closes as soon as it arrives
        "phases": [
            {
                "name": "forward",
                "stream_kind": "compute",
                "start_ns": t,
                "duration_ns": 10**8,
            }
        ],
        "collector": {},
    }
    return {**rec, **kw}


def batch(job: str, w: int, t0: int, n: int, **kw: Any) -> dict[str, Any]:
    """A kernel batch of ``n`` events whose columns compress well (it must pass the broker's
    1 MiB message limit compressed)."""
    dur = np.tile(np.arange(20_000, 21_000, 10, dtype=np.int64), n // 100 + 1)[:n]
    rec = {
        "job": job,
        "rank": 0,
        "window_id": w,
        "window_start_ns": t0 + w * SEC,
        "window_end_ns": t0 + w * SEC + SEC // 2,
        "host": "h",
        "coords": {},
        "source": "simulator",
        "names": ["gemm", "softmax"],
        "name_idx": pack(np.arange(n) % 2, "uint32"),
        "stream": pack(np.zeros(n), "uint32"),
        "start_ns": pack(np.full(n, t0), "int64"),
        "duration_ns": pack(dur, "int64"),
        "streams": [],
        "dropped": 0,
    }
    return {**rec, **kw}


@pytest.mark.parametrize("steps_router", ["faust", "kafka"])
def test_bad_records_go_to_the_dlq_and_the_worker_goes_on(
    kafka: Settings, topic_prefix: str, tmp_path: Path, steps_router: str
) -> None:
    now = time.time_ns()
    t0 = now - 3600 * SEC
    w = worker(
        topic_prefix,
        tmp_path,
        ("all",),
        ARGUS_STREAMS__MAX_BATCH_EVENTS=str(CAP),
        ARGUS_STREAMS__STEPS_ROUTER_RUNTIME=steps_router,  # the router's own loop, or faust's
    ).start()
    watch = Watcher(kafka, ["dlq", "summary.kernels"], prefix=topic_prefix)
    prod = Producer(
        kafka.kafka_config(**{"compression.type": "lz4", "message.max.bytes": 100_000_000})
    )

    def send(suffix: str, value: bytes, key: bytes = b"j/0") -> None:
        prod.produce(topic_name(suffix, topic_prefix), value=value, key=key)

    summary = summarize_batch(batch("good", 0, t0, 200))
    q = np.frombuffer(summary["cluster_quantiles_ns"], "<f4").copy()
    q[:] = np.nan
    stack = {
        "job": "j",
        "rank": 0,
        "pid": 1,
        "window_start_ns": now - 10 * SEC,
        "window_end_ns": now,
        "sample_rate_hz": 10.0,
        "samples": -3,
        "stacks": [],
    }
    bad: dict[str, tuple[str, bytes]] = {  # reason -> (topic suffix, value)
        "bad-magic": ("raw.steps", b"\x7fELF not avro at all"),
        "wrong-record": ("raw.steps", CODEC.encode("stack_batch", {**stack, "samples": 1})),
        "unknown-fingerprint": ("raw.kernels", b"\xc3\x01" + bytes(8) + b"\x02\x00"),
        "rank-out-of-range": ("raw.steps", CODEC.encode("step_record", step("j", 1, t0, rank=4))),
        "bad-duration": (
            "summary.kernels",
            CODEC.encode(
                "kernel_summary",
                {**summary, "job": "nan", "cluster_quantiles_ns": pack(q, "float32")},
            ),
        ),
        "time-skew": (
            "raw.steps",
            CODEC.encode("step_record", step("j", 2, now + 2 * 86400 * SEC)),
        ),
        # issue 19: +900,000 steps passed the old bound (1,000,000); L1 then emitted a window
        # that ended before it started
        "step-skew": ("raw.steps", CODEC.encode("step_record", step("good", 900_002, t0))),
        "empty": ("raw.kernels", CODEC.encode("kernel_batch", batch("j", 1, t0, 0))),
        "too-large": ("raw.kernels", CODEC.encode("kernel_batch", batch("j", 2, t0, CAP + 1))),
        "bad-field": ("raw.stacks", CODEC.encode("stack_batch", stack)),
    }
    million = CODEC.encode("kernel_batch", batch("big", 3, t0, CAP))
    try:
        for s in range(3):  # good records first: the rank's reference for the skew checks
            send("raw.steps", CODEC.encode("step_record", step("good", s, t0)), b"good/0")
        for suffix, value in bad.values():
            send(suffix, value)
        send("raw.kernels", million, b"big/0")
        for s in range(3, 6):  # good records after the bad ones
            send("raw.steps", CODEC.encode("step_record", step("good", s, t0)), b"good/0")
        send("raw.kernels", CODEC.encode("kernel_batch", batch("good", 5, t0, 300)), b"good/0")
        assert prod.flush(30) == 0

        def done(wt: Watcher) -> bool:
            jobs = {r["job"] for r in wt.get("summary.kernels")}
            return len(wt.get("dlq")) >= len(bad) and {"big", "good"} <= jobs

        assert watch.wait_for(done, timeout_s=45), (watch.get("dlq"), w.log_tail())
        assert watch.wait_for(
            lambda _: metric(w, "argus_windows_closed_total", role="steps") >= 6, timeout_s=10
        ), w.log_tail()
        assert w.alive, w.log_tail()
        dlq = watch.get("dlq")
        assert len(dlq) == len(bad), [d["reason"] for d in dlq]
        for reason, (suffix, value) in bad.items():
            (rec,) = [d for d in dlq if d["reason"].startswith(f"{reason}:")]
            assert rec["source_topic"] == topic_name(suffix, topic_prefix)
            if reason == "too-large":  # cut to what a DLQ record can carry, and said so
                assert value.startswith(rec["value"]) and len(rec["value"]) == 900_000
                assert f"of {len(value)} bytes" in rec["reason"]
            else:
                assert rec["value"] == value, reason
            assert metric(w, "argus_dlq_records_total", reason=reason) == 1, reason
        (big,) = [r for r in watch.get("summary.kernels") if r["job"] == "big"]
        assert big["n_events"] == CAP  # 1 M events are compressed, not rejected
        # the runtime asked for read the step records (and committed them)
        steps, deadline = topic_name("raw.steps", topic_prefix), time.monotonic() + 20
        want = [f"{topic_prefix}-{'steps-router' if steps_router == 'kafka' else 'all'}"]
        while (
            readers := [
                g
                for g in groups_of(topic_prefix, ("all",), steps_router)
                if backlog(kafka, g).get(steps) == 0
            ]
        ) != want and time.monotonic() < deadline:
            time.sleep(0.5)
        assert readers == want
    finally:
        w.stop()
        watch.close()
