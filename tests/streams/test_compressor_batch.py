"""Issue 21: the compressor compresses a poll's windows in one call; on the real broker its
summaries equal ``summarize_batch`` of each window with the names its rank announced before,
and a bad window in the middle of a poll goes to the DLQ alone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from argus.config import Settings
from argus.schemas import Codec
from argus.streams import synth
from argus.summaries.summary_record import summarize_batch
from argus.topics import topic_name

RANKS, WINDOWS = 6, 40  # 40 windows: the 32-window re-announcement happens once per rank


@pytest.mark.kafka
def test_compressor_batches_equal_one_by_one(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    from argus.streams.local_run import Watcher
    from tests.pipeline.harness import worker

    rng = np.random.default_rng(21)
    mix = synth.default_mix(21)
    t0 = time.time_ns() - 60 * 10**9
    recs = [
        synth.kernel_batch(
            rng,
            mix,
            job="batch",
            rank=r,
            window_id=w,
            n_events=int(rng.choice([40, 800, 3000])),
            window_start_ns=t0 + w * 10**9,
            coords={"dp_rank": r, "dp_size": RANKS},
        )
        for w in range(WINDOWS)
        for r in range(RANKS)
    ]
    bad = {**recs[7], "window_id": 999, "names": recs[7]["names"][:1]}  # name_idx out of range
    codec = Codec()
    prod = Producer(kafka.kafka_config(**{"enable.idempotence": True, "linger.ms": 20}))
    topic = topic_name("raw.kernels", topic_prefix)
    # all written before the worker starts: its polls hold many windows each
    for i, rec in enumerate(recs):
        key = f"batch/{rec['rank']}".encode()
        prod.produce(topic, codec.encode("kernel_batch", rec), key)
        if i == 100:
            prod.produce(topic, codec.encode("kernel_batch", bad), f"batch/{bad['rank']}".encode())
        prod.poll(0)
    assert prod.flush(60) == 0
    w = worker(topic_prefix, tmp_path, ("compressor",)).start()
    watch = Watcher(kafka, ["dlq", "summary.kernels"], prefix=topic_prefix)
    try:

        def done(wt: Watcher) -> bool:
            return len(wt.get("summary.kernels")) >= len(recs) and len(wt.get("dlq")) >= 1

        assert watch.wait_for(done, timeout_s=180), (
            len(watch.get("summary.kernels")),
            w.log_tail(),
        )
        got = {(r["rank"], r["window_id"]): r for r in watch.get("summary.kernels")}
        assert len(got) == len(recs)
        known: dict[int, set[int]] = {}
        since: dict[int, int] = {}
        for rec in recs:  # one rank's windows in order, as the agent announces names
            r = rec["rank"]
            since[r] = since.get(r, 0) + 1
            if since[r] >= 32:
                known.pop(r, None)
                since[r] = 0
            k = known.setdefault(r, set())
            wire = codec.decode_as("kernel_batch", codec.encode("kernel_batch", rec))
            want: dict[str, Any] = summarize_batch(wire, announced=k)
            k.update(n["id"] for n in want["kernel_names"])
            assert got[(r, rec["window_id"])] == want, (r, rec["window_id"])
        dlq = watch.get("dlq")
        assert len(dlq) == 1 and dlq[0]["reason"].startswith("bad-name-index"), dlq
        assert w.alive, w.log_tail()
    finally:
        w.stop()
        watch.close()
