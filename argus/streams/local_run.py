"""Run the pipeline locally: worker subprocesses and a topic watcher (demo, tests, benches)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from argus.config import Settings
from argus.schemas import Codec, DecodeError

__all__ = ["Watcher", "WorkerProcess"]


class WorkerProcess:
    """``argus worker ROLES...`` as a child process with its own environment overrides.

    Output goes to ``log_path``, at ``loglevel`` (default ``$ARGUS_WORKER_LOGLEVEL`` or
    warn). :meth:`stop` sends SIGTERM (a clean faust shutdown) and waits; :meth:`kill`
    sends SIGKILL (crash tests). SIGUSR1 makes the worker print every thread's and asyncio
    task's stack to the log (mode's ``cry``): the first thing to take from a stalled worker.
    """

    def __init__(
        self,
        roles: Iterable[str],
        *,
        env: Mapping[str, str] | None = None,
        log_path: Path,
        metrics_port: int = 0,
        loglevel: str | None = None,
    ) -> None:
        self.roles = list(roles)
        self.env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
        self.log_path = log_path
        self.metrics_port = metrics_port
        self.loglevel = loglevel or os.environ.get("ARGUS_WORKER_LOGLEVEL", "warn")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "argus.cli",
                "worker",
                *self.roles,
                "--loglevel",
                self.loglevel,
                "--metrics-port",
                str(self.metrics_port),
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class Watcher:
    """Consume topics in a background thread and keep every decoded record.

    ``records[suffix]`` lists ``(key, record)`` in arrival order. ``on_record`` (if given) is
    called from the thread for each.
    """

    def __init__(
        self,
        settings: Settings,
        suffixes: Iterable[str],
        *,
        prefix: str | None = None,
        on_record: Callable[[str, str, dict[str, Any]], None] | None = None,
    ) -> None:
        from confluent_kafka import Consumer

        from argus.topics import topic_name

        self.prefix = settings.topic_prefix if prefix is None else prefix
        self._topic_to_suffix = {topic_name(s, self.prefix): s for s in suffixes}
        self.records: dict[str, list[tuple[str, dict[str, Any]]]] = {s: [] for s in suffixes}
        self.undecodable = 0
        self._on_record = on_record
        self._codec = Codec(registry_url=settings.schema_registry_url or None)
        self._consumer = Consumer(
            settings.kafka_config(
                **{
                    "group.id": f"argus-watch-{uuid.uuid4().hex[:8]}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
        )
        self._consumer.subscribe(list(self._topic_to_suffix))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="argus-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            suffix = self._topic_to_suffix[msg.topic() or ""]
            try:
                _, rec = self._codec.decode(msg.value())
            except DecodeError:
                self.undecodable += 1
                continue
            key = (msg.key() or b"").decode(errors="replace")
            with self._lock:
                self.records[suffix].append((key, rec))
            if self._on_record is not None:
                self._on_record(suffix, key, rec)
        self._consumer.close()

    def get(self, suffix: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for _, r in self.records[suffix]]

    def wait_for(
        self, pred: Callable[[Watcher], bool], timeout_s: float, poll_s: float = 0.25
    ) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred(self):
                return True
            time.sleep(poll_s)
        return pred(self)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
