"""Framework integrations (issue 22) in real 2-rank CPU runs over gloo: a tiny randomly
initialised model, one rank slowed in a known phase; the recorded job (the records the
collectors published to the real broker, written to Avro as ``argus simulate --out`` does),
diagnosed with ``argus diagnose``, names that rank and that phase."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
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


def _megatron_untouched(tmp_path: Path) -> None:
    """Megatron's own accounting is untouched by the wrapping (rank 1's backward slowed)."""
    mine = json.loads((tmp_path / "s.json.rank1").read_text())["megatron_elapsed_s"]
    assert mine["backward-compute"] > mine["forward-compute"] > 0


@dataclass(frozen=True)
class Case:
    """One framework example: what it needs, the phases every step record must carry
    (name -> stream kind, ``None``: any kind; ``exact``: no other phase) and the phase its
    slowed rank 1 must be named in."""

    module: str
    needs: str
    steps: int
    phases: dict[str, str | None]
    slowed: str
    exact: bool = False
    extra: Callable[[Path], None] | None = None
    slowdown: str = "4"


_DDP: dict[str, str | None] = {
    "forward": None,
    "backward": None,
    "optimizer": None,
    "dp_allreduce": None,
}
CASES = [
    # transformers Trainer: GPT-2's first block MLP slowed, 10x: it is a small part of the
    # forward (at 4x the forward came out ~1.5x the other rank's, at the pair's `pair_ratio`:
    # L2 named it in 3 windows of 30 steps, and in none in a quiet clean-clone CI run)
    Case("examples.hf_trainer", "transformers", 30, _DDP, "forward", slowdown="10"),
    # Lightning: training_step slowed
    Case("examples.lightning_ddp", "pytorch_lightning", 40, _DDP, "forward"),
    # megatron-core's real Timers (its schedules need CUDA: the step is plain torch, timed by
    # Megatron's timers); backward-compute slowed
    Case(
        "examples.megatron_timers",
        "megatron.core.timers",
        40,
        {
            "forward": "compute",
            "backward": "compute",
            "dp_allreduce": "comm",
            "optimizer": "compute",
        },
        "backward",
        exact=True,
        extra=_megatron_untouched,
    ),
    # FSDP2 (fully_shard) on gloo: all-gathers and reduce-scatters timed as comm phases on
    # every step; the root's forward slowed
    Case(
        "examples.fsdp2_mlp",
        "torch.distributed.fsdp",
        40,
        {
            "fsdp_allgather": "comm",
            "fsdp_reducescatter": "comm",
            "forward": None,
            "optimizer": None,
        },
        "forward",
    ),
]


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.module.split(".")[1])
def test_integration_names_the_slow_rank_and_phase(
    case: Case, prefixed: Settings, tmp_path: Path
) -> None:
    pytest.importorskip(case.needs)
    world, job = 2, f"{case.module.split('.')[1]}-test"
    _run(
        case.module,
        prefixed,
        tmp_path,
        *("--steps", str(case.steps), "--world-size", str(world), "--job", job),
        *("--straggler-rank", "1", "--slowdown", case.slowdown, "--out", str(tmp_path / "s.json")),
    )
    recs, findings = record_and_diagnose(prefixed, tmp_path, case.steps * world)
    assert {(r["rank"], r["step"]) for r in recs} == {
        (r, s) for r in range(world) for s in range(case.steps)
    }
    for r in recs:
        kinds = {p["name"]: p["stream_kind"] for p in r["phases"]}
        assert set(case.phases) <= set(kinds), (r["step"], kinds)
        assert not case.exact or set(kinds) == set(case.phases), (r["step"], kinds)
        for name, kind in case.phases.items():
            assert kind is None or kinds[name] == kind, (r["step"], name, kinds)
        assert r["job"] == job
    if case.extra is not None:
        case.extra(tmp_path)
    _assert_named(findings, 1, case.slowed)


@pytest.mark.slow
@pytest.mark.kafka
def test_bench_schedule_switches_the_integrations_channels(
    prefixed: Settings, tmp_path: Path
) -> None:
    """The overhead bench's hook (``--schedule``, ``examples/_common.py``): with
    ``instrument_timers`` installed throughout, channels off then on per block of steps on
    both ranks; only the on blocks' steps are published, and each block is timed."""
    pytest.importorskip("megatron.core.timers")
    _run(
        "examples.megatron_timers",
        prefixed,
        tmp_path,
        *("--schedule", "off:6,all:5,off:5,all:5,off:4", "--job", "sched-test"),
        *("--out", str(tmp_path / "s.json")),
    )
    on = [*range(6, 11), *range(16, 21)]
    # ask for more than expected: any step published from an off block would come back too
    topic = topic_name("raw.steps", prefixed.topic_prefix)
    steps = consume(prefixed, topic, 2 * len(on) + 10, timeout_s=15)
    assert sorted((r["rank"], r["step"]) for _, r in steps) == [(k, s) for k in (0, 1) for s in on]
    for k in (0, 1):
        summary = json.loads((tmp_path / f"s.json.rank{k}").read_text())
        assert summary["steps"] == 25
        assert summary["collector"]["steps_emitted"] == len(on)
        blocks = summary["blocks"]
        assert [(b["mode"], b["steps"]) for b in blocks] == [
            ("off", 6),
            ("all", 5),
            ("off", 5),
            ("all", 5),
            ("off", 4),
        ]
        assert all(len(b["step_s"]) == b["steps"] and b["seconds"] > 0 for b in blocks)
