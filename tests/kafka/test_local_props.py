"""What ``argus kafka up`` writes, without starting Kafka: the secure broker's controller
listener is mutual TLS and no anonymous principal is a super user; a cluster's nodes share one
quorum and replicate 3 times with ``min.insync.replicas`` 2 (issue 19)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from argus.config import load_settings
from argus.kafka.local import BROKER_CN, PORT_STRIDE, LocalBroker


def _broker(tmp_path: Path) -> LocalBroker:
    (tmp_path / "none.toml").write_text("")
    env = {
        "ARGUS_STATE_DIR": str(tmp_path / "state"),
        "ARGUS_CONFIG": str(tmp_path / "none.toml"),
        "ARGUS_KAFKA_PORT": "40000",
        "ARGUS_KAFKA_CONTROLLER_PORT": "40001",
    }
    return LocalBroker(load_settings(env=env))


def _props(text: str) -> dict[str, str]:
    return dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln and ln[0] != "#")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
@pytest.mark.parametrize("count", [1, 3])
def test_secure_props_have_a_mutual_tls_controller_and_no_anonymous_super_user(
    tmp_path: Path, count: int
) -> None:
    b = _broker(tmp_path)
    b._ensure_tls()
    b._ensure_passwords()
    nodes = b.nodes(count)
    for n in nodes:
        p = _props(b._props_text(n, nodes, secure=True))
        proto = dict(x.split(":") for x in p["listener.security.protocol.map"].split(","))
        assert proto == {"CONTROLLER": "SSL", "SASL_SSL": "SASL_SSL"}
        assert p["listener.name.controller.ssl.client.auth"] == "required"
        assert p["ssl.client.auth"] == "none"  # clients: SCRAM
        assert p["super.users"].split(";") == ["User:admin", f"User:CN={BROKER_CN}"]
        assert "ANONYMOUS" not in b._props_text(n, nodes, secure=True)
        assert p["allow.everyone.if.no.acl.found"] == "false"
        assert p["listeners"] == (
            f"SASL_SSL://127.0.0.1:{n.port},CONTROLLER://127.0.0.1:{n.controller_port}"
        )
    # the broker's certificate: its principal, and usable as a client certificate
    cert = subprocess.run(
        ["openssl", "x509", "-noout", "-subject", "-ext", "extendedKeyUsage", "-in",
         str(b.tls_dir / "broker.crt")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f"CN = {BROKER_CN}" in cert or f"CN={BROKER_CN}" in cert
    assert "TLS Web Client Authentication" in cert and "TLS Web Server Authentication" in cert


def test_a_cluster_is_one_quorum_replicating_3_times(tmp_path: Path) -> None:
    b = _broker(tmp_path)
    nodes = b.nodes(3)
    assert [(n.id, n.port, n.controller_port) for n in nodes] == [
        (i + 1, 40000 + PORT_STRIDE * i, 40001 + PORT_STRIDE * i) for i in range(3)
    ]
    assert nodes[0].data == b.data and len({n.data for n in nodes}) == 3
    for n in nodes:
        p = _props(b._props_text(n, nodes, secure=False))
        assert p["node.id"] == str(n.id)
        assert (
            p["controller.quorum.voters"] == "1@127.0.0.1:40001,2@127.0.0.1:40011,3@127.0.0.1:40021"
        )
        assert p["log.dirs"] == str(n.data)
        assert (p["default.replication.factor"], p["min.insync.replicas"]) == ("3", "2")
        assert p["offsets.topic.replication.factor"] == "3"
        assert p["transaction.state.log.min.isr"] == "2"
    single = _props(b._props_text(b.node(1), [b.node(1)], secure=False))
    assert (single["default.replication.factor"], single["min.insync.replicas"]) == ("1", "1")
    assert single["controller.quorum.voters"] == "1@127.0.0.1:40001"
