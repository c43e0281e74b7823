"""Framework integrations (issue 22) in real 2-rank CPU runs over gloo: a tiny randomly
initialised model, one rank slowed in a known phase; the recorded job (the records the
collectors published to the real broker, written to Avro as ``argus simulate --out`` does),
diagnosed with ``argus diagnose``, names that rank and that phase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from argus.config import Settings
from argus.topics import topic_name
from tests.collectors.helpers import consume

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, prefixed: Settings, tmp_path: Path, *args: str) -> None:
    env = {
        **os.environ,
        "ARGUS_TOPIC_PREFIX": prefixed.topic_prefix,
        "ARGUS_STATE_DIR": str(tmp_path),
    }
    r = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]


def record_and_diagnose(
    prefixed: Settings, tmp_path: Path, n_steps: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The job's step records and kernel batches from the broker -> Avro -> ``argus
    diagnose``; returns the step records and the findings."""
    from argus.cli import main
    from argus.sim.simulate import write_avro

    steps = consume(prefixed, topic_name("raw.steps", prefixed.topic_prefix), n_steps, timeout_s=30)
    assert len(steps) == n_steps
    kern = consume(prefixed, topic_name("raw.kernels", prefixed.topic_prefix), 10**6, timeout_s=5)
    out = tmp_path / "job"
    write_avro(
        iter(
            [("raw.steps", k.decode(), r) for k, r in steps]
            + [("raw.kernels", k.decode(), r) for k, r in kern]
        ),
        out,
    )
    assert main(["diagnose", str(out)]) == 0
    return [r for _, r in steps], json.loads((out / "findings.json").read_text())


def _assert_named(findings: dict[str, Any], rank: int, phase: str) -> None:
    """A verdict names ``rank`` and ``phase``, and it is the most confident one naming that
    rank. (On the shared 2-core machine the other rank's noise can also make verdicts.)"""
    verdicts = findings["verdicts"]  # highest confidence first
    mine = [(v["phase"], v["confidence"]) for v in verdicts if v["ranks"] == [rank]]
    assert mine, [(v["ranks"], v["phase"], v["confidence"]) for v in verdicts]
    assert mine[0][0] == phase, mine


@pytest.mark.slow
@pytest.mark.kafka
def test_hf_trainer_names_the_slow_rank_and_phase(prefixed: Settings, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    steps, world = 30, 2
    _run(
        "examples.hf_trainer",
        prefixed,
        tmp_path,
        *("--steps", str(steps), "--world-size", str(world), "--job", "hf-test"),
        *("--straggler-rank", "1", "--slowdown", "4", "--out", str(tmp_path / "s.json")),
    )
    recs, findings = record_and_diagnose(prefixed, tmp_path, steps * world)
    assert {(r["rank"], r["step"]) for r in recs} == {
        (r, s) for r in range(world) for s in range(steps)
    }
    for r in recs:
        names = {p["name"] for p in r["phases"]}
        assert {"forward", "backward", "optimizer", "dp_allreduce"} <= names, (r["step"], names)
        assert r["job"] == "hf-test"
    _assert_named(findings, 1, "forward")


@pytest.mark.slow
@pytest.mark.kafka
def test_lightning_names_the_slow_rank_and_phase(prefixed: Settings, tmp_path: Path) -> None:
    pytest.importorskip("pytorch_lightning")
    steps, world = 40, 2
    _run(
        "examples.lightning_ddp",
        prefixed,
        tmp_path,
        *("--steps", str(steps), "--world-size", str(world), "--job", "pl-test"),
        *("--straggler-rank", "1", "--slowdown", "4", "--out", str(tmp_path / "s.json")),
    )
    recs, findings = record_and_diagnose(prefixed, tmp_path, steps * world)
    assert {(r["rank"], r["step"]) for r in recs} == {
        (r, s) for r in range(world) for s in range(steps)
    }
    for r in recs:
        names = {p["name"] for p in r["phases"]}
        assert {"forward", "backward", "optimizer", "dp_allreduce"} <= names, (r["step"], names)
        assert r["coords"]["dp_size"] == world if "dp_size" in r["coords"] else True
    _assert_named(findings, 1, "forward")


@pytest.mark.slow
@pytest.mark.kafka
def test_megatron_timers_name_the_slow_rank_and_phase(prefixed: Settings, tmp_path: Path) -> None:
    """megatron-core's real ``Timers`` (its schedules need CUDA: the step is plain torch,
    timed by Megatron's timers); rank 1's ``backward-compute`` is slowed."""
    pytest.importorskip("megatron.core.timers")
    steps, world = 40, 2
    _run(
        "examples.megatron_timers",
        prefixed,
        tmp_path,
        *("--steps", str(steps), "--world-size", str(world), "--job", "mg-test"),
        *("--straggler-rank", "1", "--slowdown", "4", "--out", str(tmp_path / "s.json")),
    )
    recs, findings = record_and_diagnose(prefixed, tmp_path, steps * world)
    assert {(r["rank"], r["step"]) for r in recs} == {
        (r, s) for r in range(world) for s in range(steps)
    }
    for r in recs:
        kinds = {p["name"]: p["stream_kind"] for p in r["phases"]}
        assert kinds == {
            "forward": "compute",
            "backward": "compute",
            "dp_allreduce": "comm",
            "optimizer": "compute",
        }, (r["step"], kinds)
    # Megatron's own accounting is untouched by the wrapping
    mine = json.loads((tmp_path / "s.json.rank1").read_text())["megatron_elapsed_s"]
    assert mine["backward-compute"] > mine["forward-compute"] > 0
    _assert_named(findings, 1, "backward")


@pytest.mark.slow
@pytest.mark.kafka
def test_fsdp2_collectives_and_the_slow_rank(prefixed: Settings, tmp_path: Path) -> None:
    """FSDP2 (``fully_shard``) on gloo: all-gathers and reduce-scatters are timed as comm
    phases on every step; rank 1's slowed forward is named."""
    pytest.importorskip("torch.distributed.fsdp")
    steps, world = 40, 2
    _run(
        "examples.fsdp2_mlp",
        prefixed,
        tmp_path,
        *("--steps", str(steps), "--world-size", str(world), "--job", "fsdp-test"),
        *("--straggler-rank", "1", "--slowdown", "4", "--out", str(tmp_path / "s.json")),
    )
    recs, findings = record_and_diagnose(prefixed, tmp_path, steps * world)
    assert {(r["rank"], r["step"]) for r in recs} == {
        (r, s) for r in range(world) for s in range(steps)
    }
    for r in recs:
        kinds = {p["name"]: p["stream_kind"] for p in r["phases"]}
        assert kinds["fsdp_allgather"] == kinds["fsdp_reducescatter"] == "comm", kinds
        assert {"forward", "optimizer"} <= set(kinds), kinds
    _assert_named(findings, 1, "forward")
