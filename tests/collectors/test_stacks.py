"""Stacks: py-spy dumps of a real child process, collapsing, windows, and the sidecar on Kafka."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from argus.collectors.stacks import (
    StackSampler,
    Target,
    classify_dump_error,
    collapse_dump,
    dump_stacks,
    find_py_spy,
    parse_raw,
)
from argus.config import Settings
from argus.topics import topic_name
from tests.collectors.helpers import consume

pytestmark = pytest.mark.skipif(find_py_spy() is None, reason="py-spy not installed")

CHILD = textwrap.dedent("""
    import time
    def argus_stack_probe_inner():
        x = 0
        while True:
            x += sum(range(200))
    def argus_stack_probe_outer():
        argus_stack_probe_inner()
    print("ready", flush=True)
    argus_stack_probe_outer()
""")


@pytest.fixture
def child(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    script = tmp_path / "probe_child.py"
    script.write_text(CHILD)
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    yield p
    p.kill()
    p.wait()


def test_dump_of_a_child_names_its_function(child: subprocess.Popen[str]) -> None:
    threads = dump_stacks(child.pid)
    stacks = collapse_dump(threads)
    assert stacks, threads
    main = stacks[0]
    # root first: the outer function comes before the inner one, with file and line
    assert "argus_stack_probe_outer (probe_child.py:" in main
    assert main.index("argus_stack_probe_outer") < main.index("argus_stack_probe_inner")
    assert main.split(";")[1].startswith("<module>")


def test_permission_and_gone_errors_are_classified() -> None:
    real_stderr = (
        "Error: Failed to get process executable name. Check that the process is "
        "running.\n\nCaused by:\n    0: Permission denied (os error 13)\n"
    )
    assert classify_dump_error(real_stderr, True) == "no-permission"
    assert (
        classify_dump_error("Error: Operation not permitted (os error 1)", True) == "no-permission"
    )
    assert classify_dump_error("Error: Failed to find python version", False) == "gone"
    assert classify_dump_error("Error: something odd", True) == "failed"


@pytest.mark.parametrize("method", ["record", "dump"])
def test_sampler_counts_stacks_per_window(child: subprocess.Popen[str], method: str) -> None:
    out: list[dict] = []
    t = Target(child.pid, "job", 3, "h")
    s = StackSampler(lambda: [t], out.append, rate_hz=10, window_s=1.0, method=method)
    s.run(duration_s=2.6)
    assert len(out) >= 2
    rec = out[0]
    assert rec["rank"] == 3 and rec["pid"] == child.pid and rec["samples"] >= 5
    total = sum(x["count"] for x in rec["stacks"])
    if method == "dump":
        assert total == rec["samples"] - rec["errors"]
    else:  # one sample per thread per tick; the child has one thread
        assert abs(total - rec["samples"]) <= 3
    probe = [x for x in rec["stacks"] if "argus_stack_probe_inner" in x["stack"]]
    # same collapsed form for both methods: thread (no name without threading) then root first
    assert probe and probe[0]["stack"].startswith(f"thread {child.pid};<module> (probe_child.py:")
    counts = [x["count"] for x in rec["stacks"]]
    assert counts == sorted(counts, reverse=True)


def test_parse_raw_normalises_threads() -> None:
    text = (
        "thread (1204): waiter;Thread.run (threading.py:982);idle_fn (<string>:3) 39\n"
        "thread (1187);busy_fn (<string>:6) 4\n\nnot a stack line\n"
        "thread (1204): waiter;Thread.run (threading.py:982);idle_fn (<string>:3) 1\n"
    )
    got = parse_raw(text)
    assert got == {
        "waiter;Thread.run (threading.py:982);idle_fn (<string>:3)": 40,
        "thread 1187;busy_fn (<string>:6)": 4,
    }


@pytest.mark.parametrize("method", ["record", "dump"])
def test_a_vanished_process_is_an_error_count_not_a_crash(method: str) -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    out: list[dict] = []
    s = StackSampler(
        lambda: [Target(p.pid, "job", 0)], out.append, rate_hz=5, window_s=1.0, method=method
    )
    s.run(duration_s=1.6)
    assert out and out[0]["errors"] == out[0]["samples"] and out[0]["stacks"] == []


@pytest.mark.kafka
def test_sidecar_publishes_stack_batches(
    child: subprocess.Popen[str], prefixed: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from argus.cli import cli

    monkeypatch.setenv("ARGUS_TOPIC_PREFIX", prefixed.topic_prefix)
    res = CliRunner().invoke(
        cli,
        [
            "collect",
            "stacks",
            "--pid",
            f"{child.pid}:5",
            "--job",
            "sj",
            "--rate-hz",
            "5",
            "--window-s",
            "1",
            "--duration-s",
            "2.5",
            "--no-control",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "stack batches published" in res.output
    got = consume(prefixed, topic_name("raw.stacks", prefixed.topic_prefix), 2)
    assert got, "no stack batch arrived"
    key, rec = got[0]
    assert key == b"sj/5" and rec["job"] == "sj" and rec["pid"] == child.pid
    assert rec["sample_rate_hz"] == 5.0
    assert any("argus_stack_probe_inner" in x["stack"] for x in rec["stacks"])
    assert time.time_ns() - rec["window_end_ns"] < 120 * 1_000_000_000
