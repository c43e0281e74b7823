"""A worker keeps its faust data directory under the state dir, never in the current directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pipeline.harness import FAST


@pytest.mark.kafka
def test_worker_leaves_nothing_in_cwd(topic_prefix: str, tmp_path: Path) -> None:
    """``argus worker`` started in an empty directory leaves it empty; faust's data directory
    (before: ``./<app id>-data``) is ``$ARGUS_STATE_DIR/workers/<app id>``, made with its
    parents (the state dir does not exist before the run)."""
    cwd, state = tmp_path / "cwd", tmp_path / "state"
    cwd.mkdir()
    env = {
        **os.environ,
        **FAST,
        "ARGUS_TOPIC_PREFIX": topic_prefix,
        "ARGUS_STATE_DIR": str(state),
        "PYTHONUNBUFFERED": "1",
    }
    datadir = state / "workers" / f"{topic_prefix}-l1"
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "argus.cli", "worker", "l1", "--metrics-port", "0"],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 90
        while not (datadir / "v1").is_dir() and proc.poll() is None:
            assert not any(cwd.iterdir()), f"written to the cwd: {sorted(cwd.iterdir())}"
            assert time.monotonic() < deadline, f"no {datadir} after 90 s:\n{log.read_text()}"
            time.sleep(0.2)
        time.sleep(2.0)  # the worker keeps running (assignment, recovery) with its data dir there
        assert proc.poll() is None, f"worker exited {proc.returncode}:\n{log.read_text()}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    assert sorted(p.name for p in cwd.iterdir()) == [], log.read_text()
    assert (datadir / "v1" / "tables").is_dir()
