"""A worker freezes its start-up heap (issue 21): the cyclic collector no longer walks the
modules, faust and the recovered tables on every full collection."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from argus.streams.local_run import WorkerProcess
from tests.pipeline.harness import FAST


@pytest.mark.kafka
def test_worker_freezes_its_heap_once_started(topic_prefix: str, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    w = WorkerProcess(
        ["l1"],
        env={**FAST, "ARGUS_TOPIC_PREFIX": topic_prefix, "ARGUS_STATE_DIR": str(tmp_path)},
        log_path=log,
        loglevel="info",
    ).start()
    try:
        deadline = time.monotonic() + 90
        frozen = None
        while frozen is None and w.alive:
            assert time.monotonic() < deadline, f"no frozen heap after 90 s:\n{log.read_text()}"
            time.sleep(0.2)
            frozen = re.search(r"heap frozen after start-up: (\d+) objects", log.read_text())
        assert frozen is not None, f"the worker exited:\n{log.read_text()}"
        # faust, aiokafka, numpy and argus alone are ~100,000 objects
        assert int(frozen.group(1)) > 50_000, frozen.group(0)
    finally:
        w.stop()
