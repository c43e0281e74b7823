"""The three-broker deployments say what ``argus kafka up --brokers 3`` says: three KRaft
nodes in one quorum, replication factor 3, ``min.insync.replicas`` 2 (internal topics too),
every client bootstrapping from all brokers. ``docker-compose.cluster.yml`` (merged over the
base file) and every Kubernetes build (Strimzi: base, small, large)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_manifests import BUILDS, _compose_cli, by_kind, kustomize
from tests.deploy.test_security_manifests import _merge

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "docker-compose.cluster.yml"
NODES = ("kafka", "kafka-2", "kafka-3")


@pytest.fixture(scope="module")
def merged() -> dict[str, Any]:
    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    over = yaml.safe_load(CLUSTER.read_text())
    out: dict[str, Any] = _merge(base, {k: v for k, v in over.items() if k[:2] != "x-"})
    return out


def test_three_kafka_nodes_form_one_quorum(merged: dict[str, Any]) -> None:
    svc = merged["services"]
    envs = [svc[n]["environment"] for n in NODES]
    assert [e["KAFKA_NODE_ID"] for e in envs] == ["1", "2", "3"]
    voters = {e["KAFKA_CONTROLLER_QUORUM_VOTERS"] for e in envs}
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    assert len({e["CLUSTER_ID"] for e in envs}) == 1, "one cluster id"
    for n, e in zip(NODES, envs, strict=True):
        assert e["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert e["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3", n
        assert e["KAFKA_MIN_INSYNC_REPLICAS"] == "2", n
        assert e["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3", n
        assert e["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3", n
        assert e["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2", n
        assert f"INTERNAL://{n}:9092" in e["KAFKA_ADVERTISED_LISTENERS"]
        assert svc[n]["image"] == svc["kafka"]["image"]
    data = [v for n in NODES for v in svc[n]["volumes"] if v.endswith(":/var/lib/kafka/data")]
    assert len({v.split(":")[0] for v in data}) == 3, "each node its own volume"
    published = [p.split(":")[0] for n in NODES for p in svc[n]["ports"]]
    assert published == ["19092", "19094", "19096"]


def test_every_client_bootstraps_from_all_brokers_and_replicates_3(
    merged: dict[str, Any],
) -> None:
    svc = merged["services"]
    assert svc["topics"]["command"] == ["topics", "create", "--replication", "3"]
    clients = [n for n, s in svc.items() if n not in NODES]
    assert set(clients) >= {"topics", "compressor", "steps", "l3", "funnel", "stacks"}
    for name in clients:
        env = svc[name]["environment"]
        assert env["ARGUS_KAFKA_BOOTSTRAP"] == "kafka:9092,kafka-2:9092,kafka-3:9092", name
        if name != "topics":
            assert env["ARGUS_STREAMS__REPLICATION"] == "3", name
            assert svc[name]["command"][0] == "worker", "the base service is kept"
        for n in ("kafka-2", "kafka-3"):
            assert svc[name]["depends_on"][n]["condition"] == "service_healthy", name


@pytest.mark.skipif(_compose_cli() is None, reason="docker compose not installed")
def test_docker_compose_config_accepts_the_cluster_override() -> None:
    cli = _compose_cli()
    assert cli is not None
    out = subprocess.run(
        [*cli, "-f", "docker-compose.yml", "-f", CLUSTER.name, "--profile", "pagerduty",
         "config", "-q"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()),
             "ARGUS_PAGERDUTY_ROUTING_KEY": "x" * 32},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_kubernetes_build_runs_three_brokers_rf3_min_isr2(name: str) -> None:
    docs = kustomize(BUILDS[name])
    (kafka,) = by_kind(docs, "Kafka").values()
    cfg = kafka["spec"]["kafka"]["config"]
    pools = by_kind(docs, "KafkaNodePool").values()
    brokers = sum(p["spec"]["replicas"] for p in pools if "broker" in p["spec"]["roles"])
    controllers = sum(p["spec"]["replicas"] for p in pools if "controller" in p["spec"]["roles"])
    assert brokers >= 3 and controllers == 3
    assert cfg["default.replication.factor"] == 3 and cfg["min.insync.replicas"] == 2
    assert cfg["offsets.topic.replication.factor"] == 3
    assert cfg["transaction.state.log.replication.factor"] == 3
    assert cfg["transaction.state.log.min.isr"] == 2
    for t in by_kind(docs, "KafkaTopic").values():
        assert t["spec"]["replicas"] == 3, t["metadata"]["name"]
        assert t["spec"]["config"]["min.insync.replicas"] == 2, t["metadata"]["name"]
    env = by_kind(docs, "ConfigMap")["argus-env"]["data"]
    assert env.get("ARGUS_STREAMS__REPLICATION") == "3", "workers' changelogs replicated 3x"
