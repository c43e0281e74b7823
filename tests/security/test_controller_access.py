"""Nobody without credentials administers the secure broker (issue 19, "secure means secure").

Through the client listener (bootstrap.servers) and through the KRaft controller listener
(``bootstrap.controllers``, spoken only by the Java AdminClient: ``AdminProbe.java`` runs the
calls), a client with no credentials, with only the CA, or with a role's SCRAM login, tries
describe ACLs, create ACLs, alter a topic's config and create a topic: every call is denied.
The admin identity (client listener) and the broker's own certificate (controller listener,
mutual TLS) can, so the denials are not a listener that is down. Before the fix the controller
listener was PLAINTEXT and ``User:ANONYMOUS`` a super user: every no-credential call there
succeeded.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from argus.kafka.acls import ROLES
from tests.security.conftest import SecureBroker
from tests.security.probe import CALLS, props_file, run_admin_probe, scram_props

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PROBE_TOPIC = "argus.probe-configs"


def _sasl(broker: SecureBroker, user: str, path: Path) -> str:
    pw = broker.broker.password_file(user).read_text().strip()
    extra = {"probe.topic": PROBE_TOPIC, "default.api.timeout.ms": "60000"}
    return scram_props(path, user, pw, broker.broker.ca_file, **extra)


def test_the_broker_configuration_has_no_plaintext_controller_nor_anonymous_super_user(
    secure_broker: SecureBroker,
) -> None:
    props = dict(
        line.split("=", 1)
        for line in secure_broker.broker.props.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    protocols = dict(p.split(":") for p in props["listener.security.protocol.map"].split(","))
    assert protocols["CONTROLLER"] == "SSL"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert "PLAINTEXT" not in protocols.values()
    supers = props["super.users"].split(";")
    assert "User:ANONYMOUS" not in supers and "User:admin" in supers


def test_no_admin_call_without_credentials_through_broker_or_controller(
    secure_broker: SecureBroker, tmp_path: Path
) -> None:
    b = secure_broker.broker
    server = f"127.0.0.1:{b.settings.kafka_port}"
    controller = f"127.0.0.1:{b.settings.controller_port}"
    admin = AdminClient(b.client_settings("admin").kafka_config())
    admin.create_topics([NewTopic(PROBE_TOPIC, 1, 1)])[PROBE_TOPIC].exception(30)
    ca_only = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(b.ca_file),
    }
    mtls = ca_only | {
        "ssl.keystore.type": "PEM",
        "default.api.timeout.ms": "60000",  # allowed: wait longer on a loaded host
        "ssl.keystore.location": str(b.tls_dir / "broker-keystore.pem"),
    }
    refused = [
        ("ctl-plain", "controller", controller, "-"),
        ("ctl-tls", "controller", controller, props_file(tmp_path / "tls.p", **ca_only)),
        ("srv-plain", "server", server, "-"),
        ("srv-tls", "server", server, props_file(tmp_path / "tls.p", **ca_only)),
        *(
            (f"srv-{role}", "server", server, _sasl(secure_broker, role, tmp_path / f"{role}.p"))
            for role in ROLES
        ),
    ]
    allowed = [
        ("srv-admin", "server", server, _sasl(secure_broker, "admin", tmp_path / "admin.p")),
        ("ctl-broker-cert", "controller", controller, props_file(tmp_path / "mtls.p", **mtls)),
    ]
    t0 = time.monotonic()
    got = run_admin_probe(secure_broker.broker.libs, refused + allowed)
    took = time.monotonic() - t0
    for name, *_ in refused:
        for call in CALLS:
            assert got[f"{name} {call}"].startswith("DENIED"), (name, call, got)
    for call in CALLS:  # the admin user may do all of it through the client listener
        assert got[f"srv-admin {call}"] == "OK", got
    # the controller listener is up: the broker's own certificate is let in
    assert got["ctl-broker-cert describe_acls"] == "OK", got
    # and nothing the refused clients tried took effect
    anything = AclBindingFilter(
        ResourceType.ANY,
        None,  # type: ignore[arg-type]  # None: any name (the stubs want str)
        ResourcePatternType.ANY,
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    bindings = admin.describe_acls(anything).result(30)

    def done(call: str) -> int:  # how many clients' ``call`` succeeded (admin, broker cert)
        return sum(1 for k, v in got.items() if k.endswith(f" {call}") and v == "OK")

    mallory = [x for x in bindings if x.principal.startswith("User:mallory")]
    assert len(mallory) == done("create_acls"), mallory
    topics = [t for t in admin.list_topics(timeout=20).topics if t.startswith("mallory-")]
    assert len(topics) == done("create_topics"), topics
    print(f"probe of {len(refused) + len(allowed)} clients took {took:.1f} s")
