"""A private SASL_SSL broker for the security tests (own ports and state dir; the shared
broker on 19092 is never touched)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from argus.config import Settings, load_settings
from argus.kafka.local import LocalBroker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SecureBroker:
    broker: LocalBroker
    base_env: dict[str, str]  # ports + state dir, no credentials

    def env(self, user: str | None = "admin", **extra: str) -> dict[str, str]:
        """Process environment of a client ``user`` (None: no credentials)."""
        creds = self.broker.client_env(user) if user else {}
        return {**self.base_env, **creds, **extra}

    def settings(self, user: str = "admin") -> Settings:
        """Settings loaded the way every argus process loads them: from the environment."""
        return load_settings(env=self.env(user))

    def argus(self, *args: str, env: dict[str, str], timeout: float = 60) -> Any:
        return subprocess.run(
            [sys.executable, "-m", "argus.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """``argus kafka up --secure`` on free ports (ACLs applied for prefix ``argus``); stopped
    and deleted after the session."""
    state = tmp_path_factory.mktemp("secure-kafka")
    base = {
        k: v
        for k, v in os.environ.items()
        if not (k.startswith("ARGUS_") and k not in ("ARGUS_CACHE_DIR",))
    }
    base |= {
        "ARGUS_STATE_DIR": str(state),
        "ARGUS_KAFKA_PORT": str(_free_port()),
        "ARGUS_KAFKA_CONTROLLER_PORT": str(_free_port()),
        "ARGUS_KAFKA_HEAP": "384m",
        "ARGUS_TOPIC_PREFIX": "argus",
        "ARGUS_CONFIG": str(Path(state) / "none.toml"),
    }
    (Path(state) / "none.toml").write_text("")
    broker = LocalBroker(load_settings(env=base))
    sb = SecureBroker(broker, base)
    try:
        up = sb.argus("kafka", "up", "--secure", env=base, timeout=150)
        assert up.returncode == 0, up.stdout + up.stderr
        yield sb
    finally:
        broker.down()
        shutil.rmtree(state / "kafka", ignore_errors=True)  # data, certificates, passwords


@pytest.fixture
def prefix_topics(secure_broker: SecureBroker) -> str:
    """Topics of prefix ``argus`` exist (created once by the admin identity)."""
    from argus.kafka.admin import create_topics

    create_topics(secure_broker.settings("admin"), partitions=1)
    return "argus"


def group(user: str) -> str:
    """A consumer group id the ACL layout lets ``user`` use."""
    pfx = {"ops": "argus.ops", "pagerduty": "argus.pagerduty", "collector": "argus-collector-"}
    return f"{pfx[user]}-{uuid.uuid4().hex[:8]}" if user != "pagerduty" else pfx[user]
