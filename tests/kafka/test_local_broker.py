"""`argus kafka up|down|status` on a second, private broker (its own ports and state dir)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from argus.config import load_settings
from argus.kafka.local import BrokerError, LocalBroker

pytestmark = pytest.mark.kafka


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _argus(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "argus.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_up_is_idempotent_listens_on_loopback_and_down_stops_only_its_broker(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "ARGUS_STATE_DIR": str(tmp_path),
        "ARGUS_KAFKA_PORT": str(_free_port()),
        "ARGUS_KAFKA_CONTROLLER_PORT": str(_free_port()),
        "ARGUS_KAFKA_HEAP": "384m",
    }
    env.pop("ARGUS_KAFKA_BOOTSTRAP", None)
    s = load_settings(env=env)
    broker = LocalBroker(s)
    try:
        r1 = _argus("kafka", "up", env=env)
        assert r1.returncode == 0, r1.stdout + r1.stderr
        pid = broker.status().pid
        assert pid is not None
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert b"kafka.Kafka" in cmdline
        listening = subprocess.run(
            ["ss", "-ltnH", f"sport = :{s.kafka_port}"], capture_output=True, text=True, check=False
        ).stdout
        assert (
            "127.0.0.1" in listening
            and "0.0.0.0" not in listening
            and "*:" not in listening.split()[3]
        )
        r2 = _argus("kafka", "up", env=env)
        assert r2.returncode == 0 and broker.status().pid == pid  # idempotent: same JVM
        assert _argus("kafka", "status", env=env).returncode == 0
        assert (tmp_path / "kafka" / "logs" / "server.log").stat().st_size > 0
        # a pid file naming some other process is not "ours": down must not kill it
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        (tmp_path / "kafka" / "broker.pid").write_text(f"{other.pid}\n")
        assert broker.status().running is False
        assert _argus("kafka", "down", env=env).stdout.startswith("no argus-managed broker")
        assert other.poll() is None
        other.kill()
        (tmp_path / "kafka" / "broker.pid").write_text(f"{pid}\n")
    finally:
        r3 = _argus("kafka", "down", env=env)
    assert "kafka stopped" in r3.stdout
    assert (
        not Path(f"/proc/{pid}").exists()
        or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    )
    assert _argus("kafka", "status", env=env).returncode == 1


def test_existing_cluster_means_nothing_is_started(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "ARGUS_STATE_DIR": str(tmp_path),
        "ARGUS_KAFKA_BOOTSTRAP": "127.0.0.1:19092",
    }
    r = _argus("kafka", "up", env=env)
    assert r.returncode == 0 and "using existing cluster" in r.stdout
    assert not (tmp_path / "kafka").exists()


def test_port_taken_by_someone_else_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        env = {
            "ARGUS_STATE_DIR": str(tmp_path),
            "ARGUS_KAFKA_PORT": str(port),
            "ARGUS_KAFKA_CONTROLLER_PORT": str(_free_port()),
        }
        with pytest.raises(BrokerError, match="taken by another process"):
            LocalBroker(load_settings(env=env)).up()
