"""`argus stacks`: hottest stacks from summary.stacks (raw fallback), folded and speedscope."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from argus.cli import main
from argus.config import Settings
from argus.sim.simulate import publish
from argus.stacks_view import (
    StacksError,
    aggregate,
    hottest,
    hottest_leaves,
    to_folded,
    to_speedscope,
)

JOB = "job-stacks"
T0 = 1_780_000_000_000_000_000
SEC = 10**9
HOT = "MainThread;train (t.py:9);step (t.py:20);allreduce (d.py:5)"
COLD = "MainThread;train (t.py:9);load (t.py:30)"


def _summary(rank: int, w: int, hot: int, cold: int) -> dict[str, Any]:
    return {
        "job": JOB, "rank": rank, "window_start_ns": T0 + w * SEC,
        "window_end_ns": T0 + (w + 1) * SEC, "samples": hot + cold,
        "stacks": [{"stack": HOT, "count": hot}, {"stack": COLD, "count": cold}],
    }  # fmt: skip


def test_aggregate_hottest_and_formats() -> None:
    c = aggregate([_summary(1, 0, 7, 3), _summary(1, 1, 5, 1)])
    assert c == {HOT: 12, COLD: 4}
    h = hottest(c, 1)
    assert h[0].stack == HOT and h[0].count == 12 and h[0].share == pytest.approx(0.75)
    assert hottest_leaves(c)[0][:2] == ("allreduce (d.py:5)", 12)
    assert to_folded(c).splitlines() == [f"{COLD} 4", f"{HOT} 12"]
    sp = to_speedscope(c, name="r1")
    frames = sp["shared"]["frames"]
    prof = sp["profiles"][0]
    assert sorted(prof["weights"]) == [4, 12] and prof["endValue"] == 16
    assert frames[0] == {"name": "MainThread"}
    assert {"name": "allreduce", "file": "d.py", "line": 5} in frames
    hot_sample = prof["samples"][prof["weights"].index(12)]
    assert [frames[i]["name"] for i in hot_sample] == ["MainThread", "train", "step", "allreduce"]


def test_bad_counts_are_typed_errors() -> None:
    with pytest.raises(StacksError, match="negative count"):
        aggregate([{"rank": 2, "stacks": [{"stack": "a;b", "count": -1}]}])
    with pytest.raises(StacksError, match="empty stack"):
        aggregate([{"rank": 2, "stacks": [{"stack": " ", "count": 1}]}])


@pytest.mark.kafka
def test_stacks_command(
    kafka: Settings, topic_prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summ = [
        ("summary.stacks", f"{JOB}/{r}", _summary(r, w, 7 + r, 3)) for r in (1, 2) for w in range(4)
    ]
    raw = [
        ("raw.stacks", f"{JOB}/3", {
            "job": JOB, "rank": 3, "pid": 9, "host": "h", "window_start_ns": T0,
            "window_end_ns": T0 + SEC, "sample_rate_hz": 100.0, "samples": 5, "errors": 0,
            "stacks": [{"stack": COLD, "count": 5}],
        })
    ]  # fmt: skip
    publish(iter(summ + raw), kafka, prefix=topic_prefix)
    base = ["stacks", "--job", JOB, "--prefix", topic_prefix]
    # windows 1 and 2 only (window 0 ends at T0+1s, overlapping; so use a range inside 1..2)
    rng = ["--from", str(T0 + SEC + 1), "--to", str(T0 + 3 * SEC - 1)]
    assert main([*base, "--rank", "2", *rng]) == 0
    text = capsys.readouterr().out
    assert "from summary.stacks" in text and "24 samples" in text  # 2 windows x (9 + 3)
    assert text.index("allreduce") < text.index("load (t.py:30)")
    out = tmp_path / "r2.speedscope.json"
    assert main([*base, "--rank", "2", *rng, "--format", "speedscope", "-o", str(out)]) == 0
    sp = json.loads(out.read_text())
    assert sorted(sp["profiles"][0]["weights"]) == [6, 18]
    # raw fallback for a rank without summaries
    assert (
        main(
            [
                *base,
                "--rank",
                "3",
                *rng[:0],
                "--from",
                str(T0),
                "--to",
                str(T0 + SEC),
                "--format",
                "folded",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines()[-1] == f"{COLD} 5"
    # nothing there: a typed error, exit 1
    assert main([*base, "--rank", "7", "--from", str(T0), "--to", str(T0 + SEC)]) == 1
    assert "no stack records" in capsys.readouterr().err
