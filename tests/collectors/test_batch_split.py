"""Kernel windows of any documented size arrive (issue 19): the collectors split a window
into parts that fit one Kafka message, readers merge them, and the summary is the one of the
unsplit window; one size limit, consistent across producer, topics and brokers."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import argus.collectors as ac
from argus.collectors.kernels import KernelColumns, columns_from_arrays
from argus.collectors.runtime import MESSAGE_SLACK_BYTES
from argus.config import Settings
from argus.schemas import Codec, unpack
from argus.schemas.kernel_parts import (
    Incomplete,
    PartAssembler,
    PartError,
    assemble,
    merge_parts,
    split_batch,
)
from argus.streams.memory import replay_stream
from argus.summaries.summary_record import summarize_batch
from argus.topics import MAX_MESSAGE_BYTES, TOPIC_MAX_MESSAGE_BYTES, topic_name
from tests.collectors.helpers import consume

ROOT = Path(__file__).resolve().parents[2]


def _columns(n: int, seed: int = 0, n_names: int = 300) -> KernelColumns:
    """``n`` synthetic kernel events: long templated names, 4 streams, log-normal durations."""
    rng = np.random.default_rng(seed)
    names = [
        f"void kernel_{i}<float, {i % 7}, cutlass::gemm::{'x' * (i % 90)}>" for i in range(n_names)
    ]
    pick = rng.zipf(1.3, n) % n_names
    return columns_from_arrays(
        [names[i] for i in pick],
        rng.integers(0, 4, n),
        1_700_000_000_000_000_000 + np.arange(n, dtype=np.int64) * 500,
        rng.lognormal(9, 1.2, n).astype(np.int64) + 1,
        max_events=n,
        dropped=3,
    )


class _BigWindows:
    """A kernel source whose every window holds the same ``n`` events (built off-thread)."""

    source = "cpu_ops"

    def __init__(self, cols: KernelColumns) -> None:
        self.cols = cols

    def start_window(self) -> None:
        pass

    def end_window(self) -> Callable[[], KernelColumns | None]:
        return lambda: self.cols

    def close(self) -> None:
        pass


def _record(cols: KernelColumns, **header: Any) -> dict[str, Any]:
    from argus.schemas import pack

    return {
        "job": "j",
        "rank": 0,
        "window_id": 0,
        "window_start_ns": 1,
        "window_end_ns": 2,
        "host": "h",
        "coords": {},
        "source": "cpu_ops",
        "names": cols.names,
        "name_idx": pack(cols.name_idx, "uint32"),
        "stream": pack(cols.stream, "uint32"),
        "start_ns": pack(cols.start_ns, "int64"),
        "duration_ns": pack(cols.duration_ns, "int64"),
        "streams": cols.streams,
        "dropped": int(cols.dropped),
        **header,
    }


def _wire(rec: dict[str, Any]) -> dict[str, Any]:
    c = Codec()
    return c.decode_as("kernel_batch", c.encode("kernel_batch", rec))


@pytest.mark.kafka
@pytest.mark.parametrize("n", [200_000, 1_000_000])
def test_big_windows_arrive_whole(prefixed: Settings, n: int) -> None:
    """A window of ``n`` events leaves the collector in parts under the size limit, none is
    dropped, and the parts read back from the broker merge into the unsplit window: same
    events, same summary (as the compressor and ``argus diagnose`` build them)."""
    cols = _columns(n)
    col = ac.start(
        job="split", settings=prefixed, kernels=False, control=False, publish_topology=False
    )
    col.kernel_source = _BigWindows(cols)
    col.kernels_on = True
    for i in range(3):  # one kernel window, at step 0 (one every 50 steps)
        with ac.step(i):
            pass
    ac.shutdown(timeout_s=60)
    p = col.producer
    assert (p.dropped_records, p.dropped_bytes, p.errors, col.errors) == (0, 0, 0, 0)
    want = len(split_batch(_record(cols), MAX_MESSAGE_BYTES - MESSAGE_SLACK_BYTES - 7))
    assert want >= 24 * n / MAX_MESSAGE_BYTES  # 200,000 events: 5 parts; 1,000,000: 25
    got = consume(prefixed, topic_name("raw.kernels", prefixed.topic_prefix), want, timeout_s=60)
    assert len(got) == want and p.delivered >= want
    parts = [r for _, r in got]
    assert [r["part"] for r in parts] == list(range(want))
    assert {r["parts"] for r in parts} == {want}
    codec = Codec()
    assert max(len(codec.encode("kernel_batch", r)) for r in parts) < MAX_MESSAGE_BYTES
    assert sum(len(r["duration_ns"]) // 8 for r in parts) == n
    # the compressor's path: parts in arrival order
    asm = PartAssembler()
    outs = [asm.add(r) for r in parts]
    assert all(o == (None, []) for o in outs[:-1])
    whole, gone = outs[-1]
    assert whole is not None and gone == [] and asm.open_windows == 0
    unsplit = _wire(
        _record(
            cols,
            job="split",
            rank=0,
            window_id=0,
            window_start_ns=parts[0]["window_start_ns"],
            window_end_ns=parts[0]["window_end_ns"],
            host=parts[0]["host"],
            coords=parts[0]["coords"],
        )
    )
    for c in ("name_idx", "stream", "start_ns", "duration_ns"):
        assert whole[c] == unsplit[c], c
    assert whole["names"] == unsplit["names"] and whole["dropped"] == cols.dropped == 3
    assert summarize_batch(whole) == summarize_batch(unsplit)
    # the offline path (argus diagnose, replay: the memory driver), parts in any order
    merged, missing = assemble(parts[::-1])
    assert missing == [] and len(merged) == 1
    assert summarize_batch(merged[0]) == summarize_batch(unsplit)


def test_split_merge_round_trip_and_bounds() -> None:
    cols = _columns(50_000, seed=2)
    rec = _record(cols)
    parts = split_batch(rec, 200_000)
    assert len(parts) >= 6
    codec = Codec()
    assert max(len(codec.encode("kernel_batch", p)) for p in parts) <= 200_000
    assert sum(p["dropped"] for p in parts) == 3 and parts[0]["dropped"] == 3
    for p in parts:  # every part is a complete batch: its own names, indexes in range
        idx = unpack(p["name_idx"], "uint32")
        assert int(idx.max()) < len(p["names"]) and len(set(p["names"])) == len(p["names"])
    assert split_batch(rec, 10_000_000) == [{**rec, "part": 0, "parts": 1}]
    merged = merge_parts(parts)
    for c in ("names", "name_idx", "stream", "start_ns", "duration_ns", "streams", "dropped"):
        assert merged[c] == rec[c], c
    assert summarize_batch(merged) == summarize_batch(rec)


def test_assembler_gives_up_windows_whose_parts_stop_coming() -> None:
    parts = split_batch(_record(_columns(20_000, seed=3)), 100_000)
    nxt = split_batch(_record(_columns(20_000, seed=4), window_id=50), 100_000)
    asm = PartAssembler()
    assert asm.add(parts[0], "e0") == (None, [])
    assert asm.add(parts[1], "e1") == (None, [])
    whole, gone = asm.add(nxt[0], "n0")  # the rank moved on: window 0 will not complete
    assert whole is None and len(gone) == 1
    g = gone[0]
    assert isinstance(g, Incomplete) and g.tokens == ["e0", "e1"] and g.have == [0, 1]
    err = g.error()
    assert err.reason == "incomplete-batch" and "window 0" in str(err) and "j/0" in str(err)
    with pytest.raises(PartError, match="bad-part"):
        asm.add({**nxt[1], "part": 9, "parts": 3})
    with pytest.raises(PartError, match="bad-part"):
        asm.add({**nxt[1], "parts": len(nxt) + 1})  # disagrees with the window's part 0
    for i, p in enumerate(nxt[1:], 1):
        whole, gone = asm.add(p, f"n{i}")
    assert whole is not None and gone == []
    assert summarize_batch(whole) == summarize_batch(
        _record(_columns(20_000, seed=4), window_id=50)
    )
    # memory bound: the oldest open window is given up past max_windows
    small = PartAssembler(max_windows=1)
    small.add({**parts[0], "rank": 1})
    _, gone = small.add({**parts[0], "rank": 2})
    assert [(g.rank, g.window_id) for g in gone] == [(1, 0)]


def test_offline_engine_merges_parts_identically() -> None:
    """The memory driver (argus diagnose, replay) over a simulated job whose kernel windows
    are split: the same findings as over the unsplit windows; a window missing a part
    is listed in ``rejected`` with its reason, not summarised."""
    from argus.sim.simulate import SimRun, simulate

    run = SimRun.make("compute-straggler", ranks=32, steps=30, seed=3)
    recs = list(simulate(run))
    steps = [r for t, _, r in recs if t == "raw.steps"]
    batches = [r for t, _, r in recs if t == "raw.kernels"]
    size = max(len(Codec().encode("kernel_batch", b)) for b in batches)
    split = [p for b in batches for p in split_batch(b, size // 3)]
    assert len(split) > 2 * len(batches)
    base = replay_stream(steps, kernel_batches=batches)
    got = replay_stream(steps, kernel_batches=split[::-1])
    assert any(a["level"] == "L3" for a in base.findings) and got.ids == base.ids
    assert got.rejected == []
    lossy = replay_stream([], kernel_batches=[p for p in split if p is not split[1]])
    assert len(lossy.rejected) == 1 and lossy.rejected[0].startswith("incomplete-batch:")


@pytest.mark.kafka
def test_size_limits_agree_across_producer_topics_and_brokers(
    kafka: Settings, topic_prefix: str
) -> None:
    """One limit: the collectors' producer takes records up to MAX_MESSAGE_BYTES, every topic
    created by argus takes the batch that carries one, and so do the brokers (local, compose,
    k8s)."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    from argus.collectors.producer import RecordProducer

    p = RecordProducer(kafka.kafka_config())
    try:
        assert p.max_message_bytes == MAX_MESSAGE_BYTES
    finally:
        p.close(0.1)
    admin = AdminClient(kafka.kafka_config())
    res = ConfigResource("topic", topic_name("raw.kernels", topic_prefix))
    cfg = admin.describe_configs([res])[res].result(timeout=30)
    assert int(cfg["max.message.bytes"].value) == TOPIC_MAX_MESSAGE_BYTES > MAX_MESSAGE_BYTES
    brokers = admin.list_topics(timeout=30).brokers
    for b in brokers:
        r = ConfigResource("broker", str(b))
        bcfg = admin.describe_configs([r])[r].result(timeout=30)
        assert int(bcfg["message.max.bytes"].value) >= TOPIC_MAX_MESSAGE_BYTES
    for path, pattern in (
        ("docker-compose.yml", r'KAFKA_MESSAGE_MAX_BYTES:\s*"(\d+)"'),
        ("k8s/base/kafka.yaml", r"message\.max\.bytes:\s*(\d+)"),
    ):
        values = [int(v) for v in re.findall(pattern, (ROOT / path).read_text())]
        assert values and min(values) >= TOPIC_MAX_MESSAGE_BYTES, path


def test_unsplit_batches_of_the_old_schema_still_read() -> None:
    """A ``kernel_batch`` written before ``part``/``parts`` existed reads as part 0 of 1."""
    import json

    import fastavro

    from argus.schemas import SINGLE_OBJECT_MAGIC
    from argus.schemas.codec import schema_fingerprint

    old = json.loads((ROOT / "argus/schemas/history/kernel_batch.1.avsc").read_text())
    parsed = fastavro.parse_schema(old)
    rec = _record(_columns(100))
    import io

    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, rec)
    raw = SINGLE_OBJECT_MAGIC + schema_fingerprint(parsed) + buf.getvalue()
    got = Codec().decode_as("kernel_batch", raw)
    assert (got["part"], got["parts"]) == (0, 1)
    whole, missing = assemble([got])
    assert missing == [] and whole == [got]


@pytest.mark.kafka
def test_compressor_merges_parts_live(kafka: Settings, topic_prefix: str, tmp_path: Path) -> None:
    """The compressor worker on the real broker: the parts of a 1,000,000-event and of a
    200,000-event window become one summary each, equal to the unsplit windows' summaries; a
    window whose rank moved on before its last part came sends its parts to the DLQ
    (``incomplete-batch``), with no summary."""
    import time

    from confluent_kafka import Producer

    from argus.streams.local_run import Watcher
    from tests.pipeline.harness import worker

    now = time.time_ns()
    codec = Codec()
    coords = {"dp_rank": 0, "dp_size": 4}

    def window(rank: int, w: int, n: int, seed: int) -> dict[str, Any]:
        return _record(
            _columns(n, seed=seed),
            job="live",
            rank=rank,
            window_id=w,
            window_start_ns=now - 10**9,
            window_end_ns=now,
            coords={**coords, "dp_rank": rank},
        )

    big, mid, cut, after = (
        window(0, 0, 1_000_000, 1),
        window(1, 0, 200_000, 2),
        window(2, 0, 120_000, 3),
        window(2, 50, 1_000, 4),
    )
    limit = MAX_MESSAGE_BYTES - MESSAGE_SLACK_BYTES - 16
    cut_parts = split_batch(cut, limit)
    sends = [
        *[(b"live/0", p) for p in split_batch(big, limit)],
        *[(b"live/1", p) for p in split_batch(mid, limit)],
        *[(b"live/2", p) for i, p in enumerate(cut_parts) if i != 1],  # part 1 lost
        (b"live/2", {**after, "part": 0, "parts": 1}),
    ]
    w = worker(topic_prefix, tmp_path, ("compressor",)).start()
    watch = Watcher(kafka, ["dlq", "summary.kernels"], prefix=topic_prefix)
    prod = Producer(kafka.kafka_config(**{"enable.idempotence": True, "linger.ms": 20}))
    try:
        for key, rec in sends:
            prod.produce(
                topic_name("raw.kernels", topic_prefix), codec.encode("kernel_batch", rec), key
            )
            prod.poll(0)
        assert prod.flush(60) == 0

        def done(wt: Watcher) -> bool:
            return len(wt.get("summary.kernels")) >= 3 and len(wt.get("dlq")) >= len(cut_parts) - 1

        assert watch.wait_for(done, timeout_s=120), (watch.get("dlq"), w.log_tail())
        time.sleep(1.0)  # nothing more comes
        sums = {(r["rank"], r["window_id"]): r for r in watch.get("summary.kernels")}
        assert set(sums) == {(0, 0), (1, 0), (2, 50)}
        for rk, rec in (((0, 0), big), ((1, 0), mid)):
            want = summarize_batch(_wire(rec))
            assert sums[rk] == want, rk
            assert sums[rk]["n_events"] == len(rec["duration_ns"]) // 8
        dlq = watch.get("dlq")
        assert len(dlq) == len(cut_parts) - 1
        assert all(
            d["reason"].startswith("incomplete-batch: kernel_batch live/2 window 0") for d in dlq
        )
        assert w.alive, w.log_tail()
    finally:
        w.stop()
        watch.close()
