"""`argus replay` against the real broker: equals `argus diagnose` on the same records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from argus.cli import main
from argus.config import Settings
from argus.detectors.config import DetectorsConfig
from argus.diagnose import batch_summaries, diagnose, diagnose_path
from argus.replay import (
    ReplayError,
    TimeRange,
    align_steps,
    event_overlaps,
    parse_time,
    read_range,
    replay,
)
from argus.sim.simulate import T0_NS, publish, simulate, write_avro
from argus.topics import TOPICS

SCENARIO = dict(ranks=32, steps=30, seed=3)


def _records(kernels: bool = True) -> list[tuple[str, str, dict[str, Any]]]:
    return list(simulate("link-degradation", kernels=kernels, **SCENARIO))  # type: ignore[arg-type]


def _ids(doc: dict[str, Any]) -> set[str]:
    return {f["id"] for f in doc["findings"]}


def test_parse_time_iso_and_ns() -> None:
    assert parse_time("1780000000000000000") == 1_780_000_000_000_000_000
    assert parse_time(5) == 5
    assert parse_time("2026-05-28T20:26:40Z") == 1_780_000_000 * 10**9
    assert parse_time("2026-05-28T22:26:40.5+02:00") == 1_780_000_000 * 10**9 + 500_000_000
    with pytest.raises(ReplayError, match="ISO 8601"):
        parse_time("yesterday")
    with pytest.raises(ReplayError, match="before"):
        TimeRange(10, 5)


def test_align_and_overlap() -> None:
    recs = [{"step": s, "start_ns": s * 10, "end_ns": s * 10 + 9} for s in range(7, 25)]
    assert min(r["step"] for r in align_steps(recs, 10)) == 10
    tr = TimeRange(100, 105)
    assert event_overlaps({"start_ns": 95, "end_ns": 100}, tr)
    assert not event_overlaps({"window_start_ns": 106, "window_end_ns": 200}, tr)


@pytest.mark.kafka
def test_replay_equals_diagnose(kafka: Settings, topic_prefix: str, tmp_path: Path) -> None:
    recs = _records()
    publish(iter(recs), kafka, prefix=topic_prefix)
    write_avro(iter(recs), tmp_path / "rec")
    offline = diagnose_path(tmp_path / "rec").to_json()
    assert offline["verdicts"], "the scenario must produce a culprit"
    end = max(r["end_ns"] for s, _k, r in recs if s == "raw.steps")
    out = tmp_path / "replay.json"
    pub = f"{topic_prefix}.replay"
    rc = main(
        [
            "replay", "--job", "sim-link-degradation", "--from", str(T0_NS), "--to", str(end),
            "--prefix", topic_prefix, "-o", str(out), "--publish-topic", pub,
        ]
    )  # fmt: skip
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["replay"]["kernel_source"] == "raw.kernels"
    assert doc["inputs"] == offline["inputs"]
    assert _ids(doc) == _ids(offline)
    assert [v["id"] for v in doc["verdicts"]] == [v["id"] for v in offline["verdicts"]]
    top = doc["verdicts"][0]
    assert top["kernel"] == offline["verdicts"][0]["kernel"]
    # other thresholds from --config: L3 made blind; equals diagnose with the same config
    toml = tmp_path / "strict.toml"
    toml.write_text("[detectors.l3]\nmin_rel_w1 = 1000.0\nmin_rel_w1_comm = 1000.0\n")
    out2 = tmp_path / "strict.json"
    rc = main(
        [
            "replay", "--job", "sim-link-degradation", "--from", str(T0_NS), "--to", str(end),
            "--prefix", topic_prefix, "-o", str(out2), "--config", str(toml),
        ]
    )  # fmt: skip
    assert rc == 0
    strict = json.loads(out2.read_text())
    cfg = DetectorsConfig.from_settings({"l3": {"min_rel_w1": 1000.0, "min_rel_w1_comm": 1000.0}})
    assert not [f for f in strict["findings"] if f["level"] == "L3"]
    assert _ids(strict) == _ids(diagnose_path(tmp_path / "rec", config=cfg).to_json())
    # the published anomalies are readable back with their ids
    from confluent_kafka import Consumer

    from argus.schemas.codec import Codec

    cons = Consumer(kafka.kafka_config(**{"group.id": "t-replay", "auto.offset.reset": "earliest"}))
    cons.subscribe([pub])
    got: list[dict[str, Any]] = []
    want = len(doc["findings"]) + len(doc["verdicts"])
    for _ in range(40):
        for m in cons.consume(500, timeout=0.5):
            if m.error() is None:
                got.append(Codec().decode(m.value(), "anomaly")[1])
        if len(got) >= want:
            break
    cons.close()
    assert len(got) == want
    assert {g["id"] for g in got} == _ids(doc) | {v["id"] for v in doc["verdicts"]}


@pytest.mark.kafka
def test_replay_subrange_and_summary_fallback(
    kafka: Settings, topic_prefix: str, tmp_path: Path
) -> None:
    """Raw kernels expired: replay uses the compressor's summaries; a range starting
    mid-window is aligned to whole windows and matches diagnose on those steps.

    64 ranks: at 32, the EDP groups hold 2 ranks of 8, too few for the L3 group test to
    tell a slow link from chance within one window (docs/detectors.md, "Between groups")."""
    recs = list(simulate("link-degradation", **{**SCENARIO, "ranks": 64}))  # type: ignore[arg-type]
    steps = [x for x in recs if x[0] == "raw.steps"]
    summ = [("summary.kernels", k, batch_summaries(r)) for s, k, r in recs if s == "raw.kernels"]
    publish(iter(steps + summ), kafka, prefix=topic_prefix)
    t1 = min(r["start_ns"] for s, _k, r in steps if r["step"] == 13)
    t2 = max(r["end_ns"] for s, _k, r in steps)
    res = replay(kafka, "sim-link-degradation", TimeRange(t1, t2), prefix=topic_prefix)
    assert res.kernel_source == "summary.kernels"
    assert res.result.steps[0] == 20  # steps 13-19 form a partial window: dropped
    # offline: diagnose on the same steps (20..) and the same summaries
    offline = diagnose(
        [r for _s, _k, r in steps if r["step"] >= 20],
        kernel_summaries=[r for _s, _k, r in summ if r["window_id"] >= 20],
    ).to_json()
    assert _ids(res.to_json()) == _ids(offline)
    assert offline["verdicts"] and any(f["level"] == "L3" for f in offline["findings"])


@pytest.mark.kafka
def test_replay_errors(kafka: Settings, topic_prefix: str) -> None:
    with pytest.raises(ReplayError, match="no step records"):
        replay(kafka, "nope", TimeRange(T0_NS, T0_NS + 10**9), prefix=topic_prefix)
    # a corrupt record of the job: skipped and reported by replay, an error for read_range
    from confluent_kafka import Producer

    prod = Producer(kafka.kafka_config())
    prod.produce(f"{topic_prefix}.raw.steps", b"\x00garbage", b"sim-link-degradation/3")
    assert prod.flush(10) == 0
    publish(simulate("link-degradation", kernels=False, **SCENARIO), kafka, prefix=topic_prefix)  # type: ignore[arg-type]
    tr = TimeRange(T0_NS, T0_NS + 10**12)
    res = replay(kafka, "sim-link-degradation", tr, prefix=topic_prefix)
    assert res.read["undecodable"] == 1 and "raw.steps[0]@0" in res.skipped[0]
    assert res.read["step_records"] == 32 * 30
    with pytest.raises(ReplayError, match="undecodable record"):
        read_range(kafka, f"{topic_prefix}.raw.steps", tr, job="sim-link-degradation")
    with pytest.raises(ReplayError, match="does not exist"):
        read_range(kafka, f"{topic_prefix}.missing", TimeRange(0, 1), job="x")


@pytest.mark.kafka
def test_replay_multi_partition_mid_stream(kafka: Settings, tmp_path: Path) -> None:
    """Three partitions, records of another job before and after, and a late second run of
    the job appended after the range: offsets_for_times + event-time filters select exactly
    the range's records."""
    import uuid

    from argus.kafka.admin import create_topics, delete_topics

    prefix = f"t{uuid.uuid4().hex[:10]}.argus"
    specs = [t for t in TOPICS if t.suffix in ("raw.steps", "raw.kernels", "summary.kernels")]
    created = create_topics(kafka, prefix=prefix, specs=specs, partitions=3)
    try:
        recs = _records()
        other = list(simulate("healthy", ranks=16, steps=10, seed=1, job="other", kernels=False))
        publish(iter(other + recs + other), kafka, prefix=prefix)
        # a later run of the same job, 1 h after in event time: outside the range
        later = [
            (s, k, {**r, **_shift(r, 3600 * 10**9)})
            for s, k, r in simulate(
                "healthy", ranks=32, steps=10, seed=2, job="sim-link-degradation"
            )
        ]
        publish(iter(later), kafka, prefix=prefix)
        end = max(r["end_ns"] for s, _k, r in recs if s == "raw.steps")
        res = replay(kafka, "sim-link-degradation", TimeRange(T0_NS, end), prefix=prefix)
        write_avro(iter(recs), tmp_path / "rec")
        offline = diagnose_path(tmp_path / "rec").to_json()
        assert res.read["step_records"] == 32 * 30
        assert res.read["kernel_batches"] == offline["inputs"]["kernel_batches"]
        assert _ids(res.to_json()) == _ids(offline)
        assert [v["id"] for v in res.to_json()["verdicts"]] == [
            v["id"] for v in offline["verdicts"]
        ]
    finally:
        delete_topics(kafka, created)


def _shift(rec: dict[str, Any], dt: int) -> dict[str, Any]:
    """Event-time fields of a simulated record moved by ``dt`` ns."""
    from argus.schemas.arrays import pack, unpack

    out: dict[str, Any] = {}
    for k in ("start_ns", "end_ns", "window_start_ns", "window_end_ns"):
        if k in rec:
            v = rec[k]
            out[k] = pack(unpack(v, "int64") + dt, "int64") if isinstance(v, bytes) else v + dt
    if "phases" in rec:
        out["phases"] = [{**p, "start_ns": p["start_ns"] + dt} for p in rec["phases"]]
    return out


@pytest.mark.kafka
def test_read_range_seeks_by_kafka_timestamp(kafka: Settings, topic_prefix: str) -> None:
    """With create times close to event times, only the range's offsets are read."""
    import time

    from confluent_kafka import Producer

    from argus.schemas.codec import Codec

    codec = Codec()
    base = (time.time_ns() // 10**9 - 3 * 3600) * 10**9  # 3 h ago, whole seconds
    step = next(
        r for s, _k, r in simulate("healthy", ranks=16, steps=1, kernels=False) if s == "raw.steps"
    )
    prod = Producer(kafka.kafka_config())
    for hour in range(3):
        for i in range(5):
            t = base + hour * 3600 * 10**9 + i * 10**9
            rec = {**step, "job": "ts", "rank": i, "step": hour, "start_ns": t, "end_ns": t + 10**8}
            prod.produce(
                f"{topic_prefix}.raw.steps", codec.encode("step_record", rec), f"ts/{i}",
                timestamp=(t + 2 * 10**8) // 10**6,  # sent 0.1 s after the step ended
            )  # fmt: skip
    assert prod.flush(10) == 0
    totals: list[int] = []
    t1 = base + 3600 * 10**9
    got = read_range(
        kafka, f"{topic_prefix}.raw.steps", TimeRange(t1, t1 + 10 * 10**9), job="ts",
        skew_ns=0, lag_ns=60 * 10**9, on_progress=lambda _t, _d, n: totals.append(n),
    )  # fmt: skip
    assert sorted(r["rank"] for r in got) == list(range(5)) and {r["step"] for r in got} == {1}
    assert totals[0] == 5  # offsets 5..9 only, not the 15 on the partition
