"""The secure Compose cluster for real: three nodes of ``compose/kafka-secure-start.sh`` (as
``docker-compose.secure-cluster.yml`` configures them: one controller quorum of the three,
replication 3) with the Kafka jars of the image's release on free ports, the secrets of
``compose/make-secrets.sh``; then what the merged Compose file's clients do against it, and the
checks of the single secure broker: no admin call without credentials, through any node's
controller or client listener. About 60 s; marked slow."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from argus.config import load_settings
from argus.kafka.acls import USERS
from argus.kafka.local import _cluster_id
from argus.topics import topic_name
from tests.deploy.test_compose_secure_broker import _free_port, kafka_home, prepare
from tests.deploy.test_manifests import _compose_cli
from tests.security.probe import CALLS, props_file, run_admin_probe, scram_props

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NODES = 3


@dataclass
class Cluster:
    secrets: Path
    base_env: dict[str, str]
    internal: list[int]
    controller: list[int]
    libs: Path

    def env(self, user: str) -> dict[str, str]:
        """A client's environment as docker-compose.secure-cluster.yml gives it."""
        return self.base_env | {
            "ARGUS_KAFKA_BOOTSTRAP": ",".join(f"localhost:{p}" for p in self.internal),
            "ARGUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "ARGUS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "ARGUS_KAFKA_CA_FILE": str(self.secrets / "kafka_ca"),
            "ARGUS_KAFKA_USERNAME": user,
            "ARGUS_KAFKA_PASSWORD_FILE": str(self.secrets / f"kafka_{user}_password"),
        }

    def argus(self, *args: str, user: str = "admin") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "argus.cli", *args],
            env=self.env(user),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("compose-cluster")
    base, libs, java, secrets = prepare(root)
    internal = [_free_port() for _ in range(NODES)]
    external = [_free_port() for _ in range(NODES)]
    controller = [_free_port() for _ in range(NODES)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(controller))
    cluster_id = "-" + _cluster_id()[1:]  # a leading '-' must not read as an option
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for i in range(NODES):
            node = root / f"node-{i + 1}"
            node.mkdir()
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "SECRETS": str(secrets),
                "CONF": str(node / "conf"),
                "KAFKA_HOME": str(kafka_home(node, libs, java)),
                "KAFKA_DATA": str(node / "data"),
                "BROKER_HOST": "localhost",
                "INTERNAL_PORT": str(internal[i]),
                "EXTERNAL_PORT": str(external[i]),
                "CONTROLLER_PORT": str(controller[i]),
                "CLUSTER_ID": cluster_id,
                # as docker-compose.secure-cluster.yml sets them (bind: loopback here)
                "NODE_ID": str(i + 1),
                "QUORUM_VOTERS": voters,
                "CONTROLLER_BIND": "127.0.0.1",
                "REPLICATION": "3",
            }
            log = node / "broker.log"
            with log.open("wb") as fh:
                proc = subprocess.Popen(
                    ["bash", str(ROOT / "compose" / "kafka-secure-start.sh")],
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            procs.append((proc, log))
        deadline = time.monotonic() + 180
        for (proc, log), port in zip(procs, internal, strict=True):
            while True:
                assert proc.poll() is None, log.read_text()[-3000:]
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "a node did not listen within 180 s"
                    time.sleep(0.5)
        yield Cluster(secrets, base, internal, controller, libs)
    finally:
        for proc, _ in procs:
            os.killpg(proc.pid, signal.SIGTERM)  # the sessions this fixture started
        for proc, _ in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def test_three_secure_nodes_replicate_3_with_min_isr_2(cluster: Cluster) -> None:
    """The compose clients' one-shot jobs against the three nodes (topics --replication 3 and
    the ACLs, as admin): every node is a broker of one cluster, the topics have 3 replicas
    and ``min.insync.replicas`` 2, and the collector's idempotent acks=all producer writes."""
    admin = AdminClient(load_settings(env=cluster.env("admin")).kafka_config())
    deadline = time.monotonic() + 120
    while len(admin.list_topics(timeout=20).brokers) < NODES:
        assert time.monotonic() < deadline, "the three nodes did not form one cluster"
        time.sleep(1)
    out = cluster.argus("topics", "create", "--replication", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    out = cluster.argus("kafka", "acls")
    assert out.returncode == 0 and "ACL bindings applied" in out.stdout, out.stdout + out.stderr
    steps = topic_name("raw.steps", "argus")
    md = admin.list_topics(steps, timeout=20).topics[steps]
    assert md.partitions and all(len(p.replicas) == 3 for p in md.partitions.values())
    res = ConfigResource(ConfigResource.Type.TOPIC, steps)
    conf = admin.describe_configs([res])[res].result(timeout=20)
    assert conf["min.insync.replicas"].value == "2"
    prod = Producer(
        load_settings(env=cluster.env("collector")).kafka_config(
            **{"enable.idempotence": True, "acks": "all"}
        )
    )
    errors: list[object] = []
    prod.produce(steps, b"x", b"job/0", on_delivery=lambda err, _m: errors.append(err))
    assert prod.flush(60) == 0 and errors == [None], errors


def test_no_admin_call_without_credentials_on_any_node(cluster: Cluster, tmp_path: Path) -> None:
    """Every node's controller listener is mutual TLS and no anonymous principal is a super
    user: a client with no credentials (plain, or the CA only) and the collector's login are
    denied every admin call through node 2's controller and node 3's client listener; admin
    and the brokers' certificate get through."""
    ca = cluster.secrets / "kafka_ca"
    tls = {"security.protocol": "SSL", "ssl.truststore.type": "PEM"}
    tls["ssl.truststore.location"] = str(ca)
    mtls = tls | {"ssl.keystore.type": "PEM", "default.api.timeout.ms": "60000"}
    mtls["ssl.keystore.location"] = str(cluster.secrets / "kafka_keystore")
    ctl = f"127.0.0.1:{cluster.controller[1]}"
    srv = f"127.0.0.1:{cluster.internal[2]}"

    def scram(user: str) -> str:
        pw = (cluster.secrets / f"kafka_{user}_password").read_text().strip()
        return scram_props(
            tmp_path / f"{user}.p", user, pw, ca, **{"default.api.timeout.ms": "60000"}
        )

    refused = [
        ("ctl-plain", "controller", ctl, "-"),
        ("ctl-tls", "controller", ctl, props_file(tmp_path / "tls.p", **tls)),
        ("srv-plain", "server", srv, "-"),
        ("srv-collector", "server", srv, scram("collector")),
    ]
    allowed = [
        ("srv-admin", "server", srv, scram("admin")),
        ("ctl-broker-cert", "controller", ctl, props_file(tmp_path / "mtls.p", **mtls)),
    ]
    got = run_admin_probe(cluster.libs, refused + allowed)
    for name, *_ in refused:
        for call in CALLS:
            assert got[f"{name} {call}"].startswith("DENIED"), (name, call, got)
    assert all(got[f"srv-admin {c}"] == "OK" for c in CALLS), got
    assert got["ctl-broker-cert describe_acls"] == "OK", got["ctl-broker-cert describe_acls"]


@pytest.mark.skipif(_compose_cli() is None, reason="docker compose not installed")
def test_docker_compose_config_accepts_the_secure_cluster(tmp_path: Path) -> None:
    """The three files merge: three secure nodes in one quorum, replication 3, every client
    bootstrapping from all three with its own login."""
    cli = _compose_cli()
    assert cli is not None
    made = tmp_path / "made"
    subprocess.run(["sh", str(ROOT / "compose" / "make-secrets.sh"), str(made)], check=True)
    files = ["-f", "docker-compose.yml", "-f", "docker-compose.secure.yml"]
    files += ["-f", "docker-compose.secure-cluster.yml"]
    out = subprocess.run(
        [*cli, *files, "--profile", "pagerduty", "config", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(Path.home()),
            "ARGUS_PAGERDUTY_ROUTING_KEY": "x" * 32,
            "ARGUS_COMPOSE_SECRETS": str(made),
        },
    )
    assert out.returncode == 0, out.stderr
    svc = json.loads(out.stdout)["services"]
    nodes = ("kafka", "kafka-2", "kafka-3")
    for i, n in enumerate(nodes):
        env = svc[n]["environment"]
        assert svc[n]["entrypoint"][-1] == "/opt/argus/kafka-secure-start.sh", n
        assert env["NODE_ID"] == str(i + 1) and env["REPLICATION"] == "3", n
        assert env["QUORUM_VOTERS"] == "1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093", n
        assert {s["source"] for s in svc[n]["secrets"]} >= {"kafka_keystore", "kafka_ca"}, n
    for name in ("topics", "acls", "compressor", "l3", "pagerduty"):
        env = svc[name]["environment"]
        assert env["ARGUS_KAFKA_BOOTSTRAP"] == "kafka:9092,kafka-2:9092,kafka-3:9092", name
        assert env["ARGUS_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL", name
        assert env["ARGUS_KAFKA_USERNAME"] in USERS, name
