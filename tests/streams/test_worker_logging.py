"""A worker keeps its ``--loglevel``: faust's terminal spinner set the root logger to DEBUG,
so every ``log.debug`` of faust and aiokafka built a ``LogRecord`` on the hot path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import logging, sys
from pathlib import Path
import faust
from argus.config import Settings
from argus.streams.app import Worker, build_app

app, _ctx = build_app(Settings(bootstrap="127.0.0.1:1", state_dir=Path(sys.argv[2])), ["l1"],
                      instance_id="off")
cls = Worker if sys.argv[1] == "argus" else faust.Worker
w = cls(app, loglevel="warn", quiet=True)
w._setup_logging()  # what the worker does on its first start
made = []
real = logging.Logger.makeRecord
logging.Logger.makeRecord = lambda self, *a, **k: made.append(a[0]) or real(self, *a, **k)
for name in ("faust.topics", "aiokafka.producer.producer", "aiokafka.consumer.fetcher"):
    logging.getLogger(name).debug("send: topic=%r", "t")
print(logging.root.level, len(made), file=sys.__stdout__)  # print() is redirected to logging
"""


def _levels(kind: str, tmp: Path) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, kind, str(tmp)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    (line,) = re.findall(r"(\d+) (\d+)$", out, re.M)  # the spinner adds terminal codes
    return int(line[0]), int(line[1])


def test_worker_root_logger_keeps_its_level(tmp_path: Path) -> None:
    assert _levels("argus", tmp_path) == (30, 0)  # WARNING; no record built for debug calls
    # faust's own worker: root at DEBUG, a record for each debug call (what this guards)
    assert _levels("faust", tmp_path) == (10, 3)
