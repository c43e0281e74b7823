"""The secure Compose broker for real: ``compose/kafka-secure-start.sh`` with the Kafka jars the
local broker uses (the apache/kafka image's release, ``KAFKA_VERSION``) on free ports and the
secrets ``compose/make-secrets.sh`` makes; then the clients of ``docker-compose.secure.yml``
(``argus topics create`` and ``argus kafka acls`` as admin, every role with its own password
file) against it. Only the ``bin/`` launchers of the image are replaced, by two lines that start
the same Kafka classes from the cached jars. About 30 s; marked slow.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from argus.config import Settings, load_settings
from argus.kafka.acls import USERS
from argus.kafka.local import LocalBroker, _cluster_id
from argus.kafka.security import KafkaAuthError, check_connection
from argus.topics import topic_name
from tests.security.probe import CALLS, props_file, run_admin_probe, scram_props

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ComposeBroker:
    secrets: Path  # /run/secrets of the compose services: kafka_ca, kafka_<user>_password
    base_env: dict[str, str]
    internal_port: int
    external_port: int
    controller_port: int
    libs: Path  # the Kafka jars (the AdminProbe's classpath)

    def env(self, user: str, *, port: int | None = None, password_file: str = "") -> dict[str, str]:
        """Client environment as docker-compose.secure.yml gives it to a service of ``user``."""
        return self.base_env | {
            "ARGUS_KAFKA_BOOTSTRAP": f"localhost:{port or self.internal_port}",
            "ARGUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "ARGUS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "ARGUS_KAFKA_CA_FILE": str(self.secrets / "kafka_ca"),
            "ARGUS_KAFKA_USERNAME": user,
            "ARGUS_KAFKA_PASSWORD_FILE": password_file
            or str(self.secrets / f"kafka_{user}_password"),
        }

    def settings(self, user: str, *, port: int | None = None, password_file: str = "") -> Settings:
        return load_settings(env=self.env(user, port=port, password_file=password_file))

    def argus(self, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "argus.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def run_secrets(made: Path, secrets: Path) -> Path:
    """``secrets``: what Compose mounts at /run/secrets, from ``make-secrets.sh``'s ``made``."""
    secrets.mkdir()
    shutil.copy(made / "broker-keystore.pem", secrets / "kafka_keystore")
    shutil.copy(made / "ca.pem", secrets / "kafka_ca")
    for u in USERS:
        shutil.copy(made / f"{u}.password", secrets / f"kafka_{u}_password")
    return secrets


def kafka_home(root: Path, libs: Path, java: str) -> Path:
    """The image's launchers (``bin/kafka-storage.sh``, ``bin/kafka-server-start.sh``), as
    two lines over the same Kafka classes from the cached jars."""
    home = root / "kafka"
    (home / "bin").mkdir(parents=True)
    log4j = resources.files("argus.kafka").joinpath("log4j2.properties")
    jvm = f'"{java}" -Dlog4j2.configurationFile={log4j} -Dkafka.logs.dir={root / "logs"}'
    for name, main in (("kafka-storage.sh", "kafka.tools.StorageTool"),
                       ("kafka-server-start.sh", "-Xmx384m -Xms384m kafka.Kafka")):  # fmt: skip
        cls = main.split()[-1]
        opts = " ".join(main.split()[:-1])
        launcher = home / "bin" / name
        launcher.write_text(f'#!/bin/sh\nexec {jvm} {opts} -cp "{libs}/*" {cls} "$@"\n')
        launcher.chmod(0o755)
    return home


def prepare(root: Path) -> tuple[dict[str, str], Path, str, Path]:
    """A clients' base environment under ``root``, the Kafka jars, java, and the Compose
    secrets (as mounted at /run/secrets) made by ``make-secrets.sh``; skips without java or
    the jars."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
    base |= {
        "ARGUS_STATE_DIR": str(root / "state"),
        "ARGUS_TOPIC_PREFIX": "argus",
        "ARGUS_CONFIG": str(root / "none.toml"),
    }
    if "ARGUS_CACHE_DIR" in os.environ:
        base["ARGUS_CACHE_DIR"] = os.environ["ARGUS_CACHE_DIR"]
    (root / "none.toml").write_text("")
    libs = LocalBroker(load_settings(env=base)).libs
    java = shutil.which("java")
    if java is None or not (libs / ".complete").exists():
        pytest.skip("needs java and the Kafka jars (`argus kafka up` fetches them once)")
    made = root / "made"
    out = subprocess.run(
        ["sh", str(ROOT / "compose" / "make-secrets.sh"), str(made)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return base, libs, java, run_secrets(made, root / "run-secrets")


@pytest.fixture(scope="module")
def compose_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeBroker]:
    root = tmp_path_factory.mktemp("compose-broker")
    base, libs, java, secrets = prepare(root)
    home = kafka_home(root, libs, java)
    internal, external, controller = _free_port(), _free_port(), _free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SECRETS": str(secrets),
        "CONF": str(root / "conf"),
        "KAFKA_HOME": str(home),
        "KAFKA_DATA": str(root / "data"),
        "BROKER_HOST": "localhost",
        "INTERNAL_PORT": str(internal),
        "EXTERNAL_PORT": str(external),
        "CONTROLLER_PORT": str(controller),
        "CLUSTER_ID": "-" + _cluster_id()[1:],  # a leading '-' must not read as an option
    }
    log = (root / "broker.log").open("wb")
    proc = subprocess.Popen(
        ["bash", str(ROOT / "compose" / "kafka-secure-start.sh")],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (root / "broker.log").read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", internal), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the broker did not listen within 120 s"
                time.sleep(0.5)
        yield ComposeBroker(secrets, base, internal, external, controller, libs)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the session this fixture started
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


@pytest.fixture(scope="module")
def provisioned(compose_broker: ComposeBroker) -> ComposeBroker:
    """The compose one-shot jobs: topics and ACLs, as admin."""
    cb = compose_broker
    out = cb.argus("topics", "create", "--replication", "1", env=cb.env("admin"))
    assert out.returncode == 0, out.stdout + out.stderr
    out = cb.argus("kafka", "acls", env=cb.env("admin"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ACL bindings applied" in out.stdout
    return cb


def test_every_scram_user_of_the_compose_secrets_logs_in(provisioned: ComposeBroker) -> None:
    for user in USERS:
        assert check_connection(provisioned.settings(user), timeout_s=20) == 1, user
    # the external listener (training hosts) is SASL_SSL too
    ext = provisioned.settings("collector", port=provisioned.external_port)
    assert check_connection(ext, timeout_s=20) == 1


def test_a_wrong_password_file_is_refused(provisioned: ComposeBroker, tmp_path: Path) -> None:
    bad = tmp_path / "wrong.password"
    bad.write_text("0" * 48 + "\n")
    with pytest.raises(KafkaAuthError) as err:
        check_connection(provisioned.settings("worker", password_file=str(bad)), timeout_s=20)
    assert err.value.reason == "authentication"


def test_the_acl_layout_binds_each_identity(provisioned: ComposeBroker) -> None:
    def produce(user: str, suffix: str) -> KafkaError | None:
        results: list[KafkaError | None] = []
        cfg = provisioned.settings(user).kafka_config(**{"message.timeout.ms": 10_000})
        p = Producer(cfg)
        p.produce(topic_name(suffix, "argus"), b"x", on_delivery=lambda e, _m: results.append(e))
        p.flush(15)
        assert len(results) == 1
        return results[0]

    assert produce("collector", "raw.steps") is None
    denied = produce("collector", "alerts")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    denied = produce("worker", "control")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce("worker", "alerts") is None


def test_no_admin_call_without_credentials_through_listeners_or_controller(
    provisioned: ComposeBroker, tmp_path: Path
) -> None:
    """The compose broker's controller listener is mutual TLS and nobody anonymous is a super
    user: describe/create ACLs, alter configs and create topics are denied to a client with
    no credentials (plain or with the CA) on the controller and both client listeners, and to
    every role's SCRAM login; admin (client listener) and the broker's certificate
    (controller) get through."""
    cb = provisioned
    ca = cb.secrets / "kafka_ca"
    tls = {"security.protocol": "SSL", "ssl.truststore.type": "PEM"}
    tls["ssl.truststore.location"] = str(ca)
    # the allowed clients wait longer: on a loaded 2-core host a TLS login can take > 8 s
    mtls = tls | {"ssl.keystore.type": "PEM", "default.api.timeout.ms": "60000"}
    mtls["ssl.keystore.location"] = str(cb.secrets / "kafka_keystore")
    ctl, srv = f"127.0.0.1:{cb.controller_port}", f"127.0.0.1:{cb.internal_port}"
    ext = f"localhost:{cb.external_port}"

    def scram(user: str) -> str:
        pw = (cb.secrets / f"kafka_{user}_password").read_text().strip()
        return scram_props(
            tmp_path / f"{user}.p", user, pw, ca, **{"default.api.timeout.ms": "60000"}
        )

    refused = [
        ("ctl-plain", "controller", ctl, "-"),
        ("ctl-tls", "controller", ctl, props_file(tmp_path / "tls.p", **tls)),
        ("int-plain", "server", srv, "-"),
        ("ext-tls", "server", ext, props_file(tmp_path / "tls.p", **tls)),
        *((f"int-{u}", "server", srv, scram(u)) for u in USERS if u != "admin"),
    ]
    allowed = [
        ("int-admin", "server", srv, scram("admin")),
        ("ctl-broker-cert", "controller", ctl, props_file(tmp_path / "mtls.p", **mtls)),
    ]
    got = run_admin_probe(cb.libs, refused + allowed)
    for name, *_ in refused:
        for call in CALLS:
            assert got[f"{name} {call}"].startswith("DENIED"), (name, call, got)
    assert all(got[f"int-admin {c}"] == "OK" for c in CALLS), {
        k: v for k, v in got.items() if "admin" in k
    }
    assert got["ctl-broker-cert describe_acls"] == "OK", got["ctl-broker-cert describe_acls"]
