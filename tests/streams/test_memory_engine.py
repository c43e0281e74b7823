"""The in-memory engine's shortcuts keep its findings: summaries it compressed itself reach
the L3 role as columns, without the Avro encode a summary given from outside gets."""

from __future__ import annotations

from typing import Any

import pytest

from argus.schemas import Codec
from argus.sim import simulate
from argus.streams import memory
from argus.streams.memory import batches_summaries, run_engine


def _job() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    steps: list[dict[str, Any]] = []
    batches: list[dict[str, Any]] = []
    for topic, _key, rec in simulate("compute-straggler", ranks=32, steps=24, seed=3):
        (steps if topic == "raw.steps" else batches).append(rec)
    return steps, batches


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    encode = Codec.encode

    def counted(self: Codec, name: str, value: Any) -> bytes:
        names.append(name)
        return encode(self, name, value)

    monkeypatch.setattr(Codec, "encode", counted)
    return names


def _timeless(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records without their processing time (``detected_ns``: the wall clock)."""
    return [{k: v for k, v in r.items() if k != "detected_ns"} for r in recs]


def test_own_summaries_are_not_encoded_given_ones_are(monkeypatch: pytest.MonkeyPatch) -> None:
    steps, batches = _job()
    names = _counting(monkeypatch)
    own = run_engine(steps, kernel_batches=batches)
    assert names.count("kernel_summary") == 0
    given = run_engine(steps, kernel_summaries=batches_summaries(batches))
    assert names.count("kernel_summary") == len(batches)
    assert any(a["level"] == "L3" for a in own.findings)
    assert _timeless(own.anomalies) == _timeless(given.anomalies)
    assert len(own.alerts) == len(given.alerts)


def test_a_restarting_engine_reads_the_held_summaries_again_and_finds_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The L3 cells are process memory: a restart reads the open blocks' summaries again
    from the lowest held position, as a worker from its committed offset."""
    steps, batches = _job()
    plain = run_engine(steps, kernel_batches=batches)
    names = _counting(monkeypatch)
    restarted = run_engine(steps, kernel_batches=batches, restart_every=500)
    assert names.count("kernel_summary") == 0  # nothing persisted but the state
    assert any(a["level"] == "L3" for a in plain.findings)
    assert [a["id"] for a in restarted.findings] == [a["id"] for a in plain.findings]
    # the same restarts without the re-read lose the open blocks' summaries
    monkeypatch.setattr(memory._HeldPositions, "lowest", lambda self: None)
    lossy = run_engine(steps, kernel_batches=batches, restart_every=500)
    assert _timeless(lossy.findings) != _timeless(plain.findings)
