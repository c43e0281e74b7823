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
    diff,
    hottest,
    hottest_leaves,
    is_argus_stack,
    select,
    threads,
    to_diff_folded,
    to_diff_text,
    to_folded,
    to_speedscope,
    to_speedscope_multi,
)

JOB = "job-stacks"
T0 = 1_780_000_000_000_000_000
SEC = 10**9
HOT = "MainThread;train (t.py:9);step (t.py:20);allreduce (d.py:5)"
COLD = "MainThread;train (t.py:9);load (t.py:30)"


def _summary(rank: int, w: int, hot: int, cold: int, idle: int = 0) -> dict[str, Any]:
    extra = [{"stack": IDLE, "count": idle}] if idle else []
    return {
        "job": JOB, "rank": rank, "window_start_ns": T0 + w * SEC,
        "window_end_ns": T0 + (w + 1) * SEC, "samples": hot + cold + idle,
        "stacks": [{"stack": HOT, "count": hot}, {"stack": COLD, "count": cold}, *extra],
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
    assert prof["name"] == "r1: MainThread"  # one profile per thread, named after it
    assert {"name": "allreduce", "file": "d.py", "line": 5} in frames
    hot_sample = prof["samples"][prof["weights"].index(12)]
    assert [frames[i]["name"] for i in hot_sample] == ["train", "step", "allreduce"]


IDLE = "argus-producer;_bootstrap (threading.py:1);_run (/s/argus/collectors/producer.py:160);wait (threading.py:320)"
CTRL = "Thread-3;_bootstrap (threading.py:1);run (/s/site-packages/argus/collectors/control.py:210)"
HOOK = "MainThread;train (t.py:9);on_step (/s/argus/collectors/hooks.py:40)"


def test_argus_threads_hidden_and_thread_filter() -> None:
    """argus's own threads (named argus-*, or entered in argus's collector code) are hidden;
    a training thread inside an argus hook is the training's own time and stays."""
    c = {HOT: 3, IDLE: 60, CTRL: 7, HOOK: 2, "loader-0;get (l.py:1)": 5}
    assert [is_argus_stack(x) for x in (HOT, IDLE, CTRL, HOOK)] == [False, True, True, False]
    kept = select(c)
    assert set(kept) == {HOT, HOOK, "loader-0;get (l.py:1)"}
    assert set(select(c, thread="main")) == {HOT, HOOK}
    assert set(select(c, own=True)) == set(c)
    assert threads(c)[0] == ("argus-producer", 60, True)
    assert ("MainThread", 5, False) in threads(c)


def test_diff_culprit_vs_peer() -> None:
    culprit = {HOT: 90, COLD: 10}
    peer = {HOT: 20, COLD: 80}
    rows = diff(culprit, peer)
    assert rows[0].frame in ("allreduce (d.py:5)", "load (t.py:30)")
    by = {r.frame: r for r in rows}
    assert by["allreduce (d.py:5)"].delta == pytest.approx(0.7)
    assert by["load (t.py:30)"].delta == pytest.approx(-0.7)
    text = to_diff_text(culprit, peer, names=("rank 7", "rank 6"))
    assert "rank 7: 100 samples; rank 6: 100 samples" in text and "+70.0  allreduce" in text
    assert to_diff_folded(culprit, peer).splitlines() == [f"{COLD} 80 10", f"{HOT} 20 90"]
    sp = to_speedscope_multi({"r7": culprit, "r6": peer})
    assert [p["name"] for p in sp["profiles"]] == ["r7: MainThread", "r6: MainThread"]


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
        ("summary.stacks", f"{JOB}/{r}", _summary(r, w, 7 + r, 3, 40))
        for r in (1, 2)
        for w in range(4)
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
    # argus's idle producer thread (80 of 104 samples) is hidden, and said so
    assert "80 samples (77%) of argus's own threads hidden" in text
    assert "_run (" not in text.split("hottest stacks:")[1]
    assert main([*base, "--rank", "2", *rng, "--all-threads"]) == 0
    assert "104 samples" in capsys.readouterr().out
    assert main([*base, "--rank", "2", *rng, "--thread", "nosuch"]) == 2
    assert "threads: argus-producer (80), MainThread (24)" in capsys.readouterr().err
    # diff rank 2 against its peer rank 1: allreduce 9/12 vs 8/11 of the samples
    assert main([*base, "--rank", "2", "--vs", "1", *rng]) == 0
    text = capsys.readouterr().out
    assert "rank 2: 24 samples; rank 1: 22 samples" in text and "allreduce (d.py:5)" in text
    out = tmp_path / "r2.speedscope.json"
    assert main([*base, "--rank", "2", *rng, "--format", "speedscope", "-o", str(out)]) == 0
    sp = json.loads(out.read_text())
    assert sorted(sp["profiles"][0]["weights"]) == [6, 18]
    assert [p["name"] for p in sp["profiles"]] == [f"{JOB} rank 2: MainThread"]
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


CHILD = """
import sys
from argus.collectors.producer import RecordProducer
prod = RecordProducer({"bootstrap.servers": "127.0.0.1:1"})  # its delivery thread idles
def training_step():
    x = 0
    while True:
        x += sum(range(200))
print("ready", flush=True)
training_step()
"""


def test_real_collector_thread_hidden_from_a_py_spy_dump(tmp_path: Path) -> None:
    """A real py-spy dump of a process running argus's producer: its delivery thread is
    argus's own and hidden; the training loop stays."""
    import subprocess
    import sys

    from argus.collectors.stacks import collapse_dump, dump_stacks, find_py_spy

    if find_py_spy() is None:
        pytest.skip("py-spy not installed")
    script = tmp_path / "train_child.py"
    script.write_text(CHILD)
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        stacks = collapse_dump(dump_stacks(p.pid))
    finally:
        p.kill()
        p.wait()
    counts = {s: 1 for s in stacks}
    own = [s for s in stacks if is_argus_stack(s)]
    assert any(s.startswith("argus-producer;") for s in own), stacks
    kept = select(counts)
    assert kept and all("training_step (train_child.py:" in s for s in kept), kept
