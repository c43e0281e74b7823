"""The fault-scenario simulator: layouts, timing model invariants, records, files, Kafka."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import fastavro
import numpy as np
import pytest

from argus.detectors.inputs import job_series
from argus.schemas.codec import Codec
from argus.sim import Layout, LayoutError, SimRun, scenario_names, simulate, write_avro


def test_layout_parse_and_coords() -> None:
    lay = Layout.parse("dp=4, tp=2,pp=2,ep=4")
    assert lay.world == 64 and str(lay) == "dp=4,tp=2,pp=2,ep=4,cp=1"
    c = lay.coords(37)
    assert (c["tp_rank"], c["ep_rank"], c["dp_rank"], c["pp_rank"]) == (1, 2, 0, 1)
    assert Layout.for_ranks(512).world == 512 and Layout.for_ranks(4096).world == 4096
    for bad in ("dp=x", "zz=2"):
        with pytest.raises(LayoutError):
            Layout.parse(bad)
    with pytest.raises(LayoutError):
        Layout.for_ranks(100)
    with pytest.raises(LayoutError):
        lay.coords(64)


def test_scenarios_that_need_dimensions_say_so() -> None:
    with pytest.raises(LayoutError, match="pp"):
        SimRun.make("pp-stage-straggler", layout="dp=8,tp=2")
    with pytest.raises(LayoutError, match="unknown scenario"):
        SimRun.make("nope")
    old = {"healthy", "compute-straggler", "link-degradation", "pp-stage-straggler", "jit-stalls"}
    assert old <= set(scenario_names()) and "mega-noise" in scenario_names()


def _records(name: str, **kw):
    return list(
        simulate(
            name, ranks=kw.pop("ranks", 16), steps=kw.pop("steps", 6), seed=kw.pop("seed", 1), **kw
        )
    )


def test_records_match_the_wire_schemas_and_keys() -> None:
    codec = Codec()
    recs = _records("healthy", layout=None)
    steps = [r for s, _, r in recs if s == "raw.steps"]
    kern = [r for s, _, r in recs if s == "raw.kernels"]
    assert len(steps) == len(kern) == 16 * 6
    for suffix, key, rec in recs[:40] + recs[-40:]:
        name = "step_record" if suffix == "raw.steps" else "kernel_batch"
        dec = codec.decode_as(name, codec.encode(name, rec))
        assert {k: dec[k] for k in rec} == rec  # fields added later decode to defaults
        assert key == f"{rec['job']}/{rec['rank']}"
    # event time moves forward step by step
    starts = sorted({r["start_ns"] for r in steps})
    assert len(starts) == 6 and all(b > a for a, b in itertools.pairwise(starts))


def test_runs_are_deterministic_per_seed() -> None:
    a = _records("noisy-neighbour", kernels=False)
    b = _records("noisy-neighbour", kernels=False)
    c = _records("noisy-neighbour", kernels=False, seed=2)
    assert a == b and a != c


def _phase(steps: list[dict], name: str) -> np.ndarray:
    ranks = max(r["rank"] for r in steps) + 1
    n = max(r["step"] for r in steps) + 1
    out = np.zeros((ranks, n))
    for r in steps:
        for p in r["phases"]:
            if p["name"] == name:
                out[r["rank"], r["step"]] = p["duration_ns"]
    return out


def test_a_late_rank_looks_shorter_in_the_collective() -> None:
    run = SimRun.make("masked-compute-straggler", ranks=64, steps=20, kernels=False)
    steps = [r for _, _, r in simulate(run)]
    (x,) = run.truth.ranks
    a2a = _phase(steps, "ep_alltoall")[:, run.truth.onset_step :]
    peers = [
        r
        for r in range(64)
        if Layout.for_ranks(64).group_id_of(r, "ep") == Layout.for_ranks(64).group_id_of(x, "ep")
        and r != x
    ]
    assert np.median(a2a[x]) < 0.5 * np.median(a2a[peers])


def test_link_degradation_keeps_iteration_time_flat() -> None:
    run = SimRun.make("link-degradation", ranks=64, steps=40, kernels=False)
    steps = [r for _, _, r in simulate(run)]
    it = job_series(steps).iter_ns
    on = run.truth.onset_step
    assert abs(np.median(it[on:]) / np.median(it[:on]) - 1) < 0.05
    egs = _phase(steps, "expert_grad_sync")
    members = list(run.truth.ranks)
    assert np.median(egs[members, on:]) > 4 * np.median(egs[members, :on])


def test_pp_straggler_is_aligned_by_grad_sync_and_invisible_to_l1() -> None:
    from argus.detectors import l1

    run = SimRun.make("pp-stage-straggler", ranks=64, steps=60, kernels=False)
    steps = [r for _, _, r in simulate(run)]
    js = job_series(steps)
    assert l1.detect(js.steps, js.iter_ns, job=run.job) == []  # slow from step 0: no change
    lay = run.layout
    (x,) = run.truth.ranks
    # every rank of the straggler's DP group (same stage, same TP rank) ends together
    same = [r for r in range(64) if lay.group_id_of(r, "dp") == lay.group_id_of(x, "dp")]
    ends = js.per_rank[np.searchsorted(js.ranks, same)]
    assert np.all((ends.max(axis=0) - ends.min(axis=0)) / ends.max(axis=0) < 0.1)


def test_write_avro_files_and_truth(tmp_path: Path) -> None:
    run = SimRun.make("compute-straggler", ranks=16, layout="dp=4,tp=2,pp=2", steps=5)
    counts = write_avro(simulate(run), tmp_path, truth=run.truth_dict())
    assert counts == {"steps.avro": 80, "kernels.avro": 80}
    with open(tmp_path / "steps.avro", "rb") as fh:
        rd = fastavro.reader(fh)
        assert rd.writer_schema["name"] in ("argus.StepRecord", "StepRecord")
        assert sum(1 for _ in rd) == 80
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth["scenario"] == "compute-straggler" and len(truth["ranks"]) == 2
    assert truth["world"] == 16 and truth["expected_levels"] == ["L1", "L2"]


@pytest.mark.kafka
def test_publish_to_kafka(kafka, topic_prefix: str) -> None:
    from confluent_kafka import Consumer

    from argus.sim import publish
    from argus.topics import topic_name

    run = SimRun.make("healthy", ranks=16, layout="dp=4,tp=2,pp=2", steps=3)
    seen_steps: list[int] = []
    counts = publish(
        simulate(run), kafka, prefix=topic_prefix, step_rate=50.0, on_step=seen_steps.append
    )
    t_steps, t_kern = topic_name("raw.steps", topic_prefix), topic_name("raw.kernels", topic_prefix)
    assert counts == {t_steps: 48, t_kern: 48}
    assert seen_steps == [0, 1, 2]
    c = Consumer(
        kafka.kafka_config(**{"group.id": f"{topic_prefix}-t", "auto.offset.reset": "earliest"})
    )
    c.subscribe([t_steps, t_kern])
    codec = Codec()
    got: dict[str, int] = {}
    try:
        for _ in range(200):
            msg = c.poll(1.0)
            if msg is None or msg.error():
                if sum(got.values()) >= 96:
                    break
                continue
            name, rec = codec.decode(msg.value())
            assert msg.key().decode() == f"{rec['job']}/{rec['rank']}"
            got[name] = got.get(name, 0) + 1
    finally:
        c.close()
    assert got == {"step_record": 48, "kernel_batch": 48}


def test_write_avro_many_blocks_read_back_whole(tmp_path: Path) -> None:
    """More records than one flush (the old 4,096-record buffer) per file: all read back equal.

    512 ranks x 9 steps = 4,608 records per file. Writing the second flush used to raise "you
    must use the 'a+' mode" (every fastavro from 1.9 on) and leave truncated files.
    """
    run = SimRun.make("compute-straggler", ranks=512, steps=9)
    records = list(simulate(run))
    counts = write_avro(iter(records), tmp_path)
    assert counts == {"steps.avro": 4608, "kernels.avro": 4608}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernels.avro", "steps.avro"]
    for fname, suffix in (("steps.avro", "raw.steps"), ("kernels.avro", "raw.kernels")):
        with open(tmp_path / fname, "rb") as fh:
            assert sum(1 for _ in fastavro.block_reader(fh)) > 2, fname
        with open(tmp_path / fname, "rb") as fh:
            got = list(fastavro.reader(fh))
        want = [rec for s, _key, rec in records if s == suffix]
        assert [{k: g[k] for k in w} for g, w in zip(got, want, strict=True)] == want, fname


def test_write_avro_failure_leaves_no_truncated_file(tmp_path: Path) -> None:
    """An error mid-run removes the partial files instead of leaving a truncated ``*.avro``."""
    run = SimRun.make("compute-straggler", ranks=512, steps=9)

    def broken():
        yield from itertools.islice(simulate(run), 6000)
        raise RuntimeError("simulator broke")

    with pytest.raises(RuntimeError, match="simulator broke"):
        write_avro(broken(), tmp_path)
    assert list(tmp_path.iterdir()) == []
