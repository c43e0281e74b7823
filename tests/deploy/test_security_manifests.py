"""Deployment wiring of TLS + SASL/SCRAM (issue 9): Strimzi listener, KafkaUsers, workers, the
collector example, and the opt-in secure Compose file.

Strimzi resources are checked structurally; the ACLs of every KafkaUser are read back into
``argus.kafka.acls.AclRule`` and compared with the table ``argus kafka acls`` applies, so the
two cannot drift. Passwords must reach every client as a file from a Secret, never as text.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from argus.kafka.acls import ROLES as ACL_ROLES
from argus.kafka.acls import USERS as SCRAM_USERS
from argus.kafka.acls import AclRule, acl_rules
from tests.deploy.test_manifests import (
    BUILDS,
    K8S,
    ROOT,
    _compose_cli,
    _containers,
    _pod_spec,
    all_manifests,
    by_kind,
    kustomize,
)

CA_SECRET = "argus-cluster-ca-cert"
SECURE_COMPOSE = ROOT / "docker-compose.secure.yml"
# env names that would carry a Kafka password as text (ARGUS_KAFKA_PASSWORD_FILE is the file)
PLAIN_PASSWORD = re.compile(
    r"ARGUS_KAFKA(?:_PASSWORD|__SECURITY__PASSWORD|__SECURITY__KEY_PASSWORD"
    r"|__CLIENT__SASL_PASSWORD|__CLIENT__SSL_KEY_PASSWORD)(?!_FILE)\b"
)


@pytest.fixture(scope="module", params=sorted(BUILDS))
def build(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return kustomize(BUILDS[request.param])


def _users(docs: list[dict[str, Any]]) -> dict[str, str]:
    """``{acl role: KafkaUser name}`` from the users' ``argus-trace.io/acl-role`` annotation."""
    out: dict[str, str] = {}
    for name, u in by_kind(docs, "KafkaUser").items():
        role = u["metadata"]["annotations"]["argus-trace.io/acl-role"]
        assert role not in out, f"two KafkaUsers for role {role}"
        out[role] = name
    return out


def _tls_port(docs: list[dict[str, Any]]) -> int:
    (kafka,) = by_kind(docs, "Kafka").values()
    (tls,) = [ls for ls in kafka["spec"]["kafka"]["listeners"] if ls["name"] == "tls"]
    return int(tls["port"])


def _file_source(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """``(Secret name, key)`` behind the file ``path`` of ``container`` (secret or projected)."""
    (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    assert mount.get("readOnly") is True, f"{container['name']}: {mount['name']} is writable"
    rel = path[len(mount["mountPath"]) + 1 :]
    vols = {v["name"]: v for v in pod["volumes"]}
    vol = vols[mount["name"]]
    if "secret" in vol:
        sources = [{"name": vol["secret"]["secretName"], "items": vol["secret"].get("items", [])}]
    else:
        sources = [s["secret"] for s in vol["projected"]["sources"] if "secret" in s]
        assert len(sources) == len(vol["projected"]["sources"]), "only Secrets in this volume"
    hits = [(s["name"], i["key"]) for s in sources for i in s["items"] if i["path"] == rel]
    assert len(hits) == 1, f"{container['name']}: {path} is not one Secret key ({hits})"
    mode = vol.get("secret", vol.get("projected", {})).get("defaultMode", 0o644)
    assert mode & 0o007 == 0, f"{container['name']}: {path} is world-readable ({mode:o})"
    return hits[0]


def _check_client(
    pod: dict[str, Any], c: dict[str, Any], env: dict[str, Any], user: str, port: int
) -> None:
    """``c`` is a SCRAM-SHA-512/TLS client as ``user``, its password and CA files from Secrets."""
    name = c["name"]
    assert env["ARGUS_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL", name
    assert env["ARGUS_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512", name
    assert env["ARGUS_KAFKA_USERNAME"] == user, name
    assert env["ARGUS_KAFKA_BOOTSTRAP"].rsplit(":", 1)[1] == str(port), name
    for e in c.get("env", []):
        assert not PLAIN_PASSWORD.fullmatch(e["name"]), f"{name}: password in env {e['name']}"
        assert "secretKeyRef" not in e.get("valueFrom", {}), f"{name}: secret in env {e['name']}"
    for ref in c.get("envFrom", []):
        assert "secretRef" not in ref, f"{name}: a whole Secret as environment"
    assert _file_source(pod, c, env["ARGUS_KAFKA_PASSWORD_FILE"]) == (user, "password")
    assert _file_source(pod, c, env["ARGUS_KAFKA_CA_FILE"]) == (CA_SECRET, "ca.crt")


# -- Kubernetes ------------------------------------------------------------------------------


def test_every_kafka_listener_is_tls_with_scram_and_acls_are_enforced(
    build: list[dict[str, Any]],
) -> None:
    (kafka,) = by_kind(build, "Kafka").values()
    spec = kafka["spec"]
    listeners = spec["kafka"]["listeners"]
    assert listeners, "no listener"
    for ls in listeners:
        assert ls["tls"] is True, f"listener {ls['name']} is plaintext"
        assert ls.get("authentication", {}).get("type") == "scram-sha-512", ls["name"]
    assert spec["kafka"]["authorization"]["type"] == "simple"
    assert "superUsers" not in spec["kafka"]["authorization"], "no standing super users"
    # the controller listener stays Strimzi's mutual-TLS one: nothing overrides listeners,
    # their protocols or the super users through the broker configuration
    cfg = spec["kafka"].get("config", {})
    for key in cfg:
        assert not key.startswith(("listener", "controller.", "super.users", "ssl.client")), key
    assert "ANONYMOUS" not in json.dumps(build)
    assert "userOperator" in spec["entityOperator"], "nothing would reconcile the KafkaUsers"
    env = by_kind(build, "ConfigMap")["argus-env"]["data"]
    assert env["ARGUS_KAFKA_BOOTSTRAP"] == f"argus-kafka-bootstrap:{_tls_port(build)}"


def test_kafka_users_carry_exactly_the_acl_table(build: list[dict[str, Any]]) -> None:
    users = _users(build)
    assert set(users) == set(ACL_ROLES)
    prefix = by_kind(build, "ConfigMap")["argus-env"]["data"]["ARGUS_TOPIC_PREFIX"]
    want = acl_rules(prefix, users)
    got: list[AclRule] = []
    for name, u in by_kind(build, "KafkaUser").items():
        assert u["apiVersion"] == "kafka.strimzi.io/v1"
        assert u["metadata"]["labels"]["strimzi.io/cluster"] == "argus"
        assert u["spec"]["authentication"] == {"type": "scram-sha-512"}
        authz = u["spec"]["authorization"]
        assert authz["type"] == "simple"
        for acl in authz["acls"]:
            assert set(acl) == {"resource", "operations"}, "allow rules from any host only"
            res = acl["resource"]
            assert res["patternType"] in ("literal", "prefix")
            pattern = "prefixed" if res["patternType"] == "prefix" else "literal"
            for op in acl["operations"]:
                assert re.fullmatch(r"(?:[A-Z][a-z]+)+", op), op
                upper = re.sub(r"(?<=[a-z])(?=[A-Z])", "_", op).upper()
                got.append(AclRule(name, res["type"], res["name"], pattern, upper))
    assert len(got) == len(set(got)), "a rule is listed twice"
    assert sorted(got, key=repr) == sorted(want, key=repr)
    # the table itself: collectors may touch no summary, anomaly or alert topic
    collector = {r.name for r in got if r.user == users["collector"]}
    assert not any(".summary." in n or n.endswith((".alerts", ".anomalies")) for n in collector)


def test_workers_authenticate_with_scram_over_tls_from_mounted_secrets(
    build: list[dict[str, Any]],
) -> None:
    users = _users(build)
    port = _tls_port(build)
    cm = by_kind(build, "ConfigMap")["argus-env"]["data"]
    deps = by_kind(build, "Deployment")
    assert deps
    for name, d in deps.items():
        pod = d["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        env = dict(cm) | {e["name"]: e.get("value") for e in c["env"]}
        role = "pagerduty" if name == "argus-pagerduty" else "worker"
        _check_client(pod, c, env, users[role], port)
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
        # a worker sees only its own user's Secret (and the public CA)
        for other in set(users.values()) - {users[role]}:
            assert other not in yaml.safe_dump(pod), f"{name} mounts {other}"


def test_collector_example_uses_the_collector_user_in_trainer_and_sidecar() -> None:
    (job,) = [d for _, d in all_manifests() if d["kind"] == "Job"]
    pod = _pod_spec(job)
    assert pod is not None
    base = kustomize(K8S / "base")
    user = _users(base)["collector"]
    containers = {c["name"]: c for c in _containers(job)}
    assert set(containers) == {"trainer", "argus-stacks"}
    for c in containers.values():
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["ARGUS_KAFKA_BOOTSTRAP"].startswith("argus-kafka-bootstrap.argus.svc:")
        _check_client(pod, c, env, user, _tls_port(base))
    # the trainer (uid 1000, not root) reads the 0440 files through the pod's fsGroup
    assert (
        pod["securityContext"]["fsGroup"] == containers["trainer"]["securityContext"]["runAsUser"]
    )


def test_no_kafka_password_or_secret_text_in_deployment_files() -> None:
    files = [*sorted(K8S.rglob("*.yaml")), ROOT / "docker-compose.yml", SECURE_COMPOSE]
    for p in files:
        text = p.read_text()
        assert not PLAIN_PASSWORD.search(text), f"{p}: a Kafka password as an env variable"
        assert "sasl.jaas.config" not in text.lower(), p
        assert not re.search(r"(?i)password\s*[:=]\s*[\"']?[A-Za-z0-9+/]{8,}", text), p
    for path, d in all_manifests():
        if d["kind"] == "Secret":  # hand-written Secrets are placeholders, never Kafka's
            keys = set(d.get("stringData", {})) | set(d.get("data", {}))
            assert not any("password" in k or k.endswith((".crt", ".key")) for k in keys), path


# -- Docker Compose --------------------------------------------------------------------------

_OVERRIDDEN = {"command", "entrypoint"}
_UNIQUE = {"volumes": lambda v: v.split(":")[1], "secrets": lambda s: s, "ports": lambda p: p}


def _merge(base: Any, over: Any, key: str = "") -> Any:
    """The Compose merge rules k8s/compose files use (compose-spec "Merge")."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            if k == "test" and key == "healthcheck":
                out[k] = v
            else:
                out[k] = _merge(base[k], v, k) if k in base else v
        return out
    if isinstance(base, list) and isinstance(over, list) and key not in _OVERRIDDEN:
        if key in _UNIQUE:
            ident = _UNIQUE[key]
            seen = {ident(x): x for x in base}
            seen.update({ident(x): x for x in over})
            return list(seen.values())
        return base + over
    return over


@pytest.fixture(scope="module")
def secure() -> dict[str, Any]:
    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    over = yaml.safe_load(SECURE_COMPOSE.read_text())
    merged: dict[str, Any] = _merge(base, {k: v for k, v in over.items() if k[:2] != "x-"})
    return merged


def test_compose_default_stays_plaintext_for_a_laptop() -> None:
    base = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    k = base["services"]["kafka"]["environment"]
    assert set(k["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].replace(",", ":").split(":")[1::2]) == {
        "PLAINTEXT"
    }
    for s in base["services"].values():
        assert "ARGUS_KAFKA_SECURITY_PROTOCOL" not in s.get("environment", {})


def test_secure_compose_clients_use_sasl_ssl_with_file_secrets(secure: dict[str, Any]) -> None:
    services = secure["services"]
    top = secure["secrets"]
    expected = {"topics": "admin", "acls": "admin", "pagerduty": "pagerduty"}
    clients = {n: s for n, s in services.items() if n != "kafka"}
    assert set(clients) >= {"topics", "acls", "compressor", "steps", "l3", "funnel", "stacks"}
    for name, s in clients.items():
        env = s["environment"]
        user = expected.get(name, "worker")
        assert env["ARGUS_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL", name
        assert env["ARGUS_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512", name
        assert env["ARGUS_KAFKA_USERNAME"] == user, name
        assert env["ARGUS_KAFKA_BOOTSTRAP"] == "kafka:9092", name
        assert env["ARGUS_KAFKA_PASSWORD_FILE"] == f"/run/secrets/kafka_{user}_password", name
        assert env["ARGUS_KAFKA_CA_FILE"] == "/run/secrets/kafka_ca", name
        assert not any(PLAIN_PASSWORD.fullmatch(k) for k in env), name
        kafka_secrets = {x for x in s["secrets"] if x.startswith("kafka_")}
        assert kafka_secrets == {"kafka_ca", f"kafka_{user}_password"}, (
            f"{name} sees {kafka_secrets}"
        )
        if name not in ("topics", "acls"):
            assert s["depends_on"]["acls"]["condition"] == "service_completed_successfully"
    assert services["acls"]["command"] == ["kafka", "acls"]
    for name, spec in top.items():
        if name.startswith("kafka_"):
            assert set(spec) == {"file"}, f"{name}: Kafka secrets come from generated files"
    assert top["pagerduty_routing_key"] == {"environment": "ARGUS_PAGERDUTY_ROUTING_KEY"}


def test_secure_compose_broker_runs_its_own_sasl_ssl_entrypoint(secure: dict[str, Any]) -> None:
    k = secure["services"]["kafka"]
    assert k["entrypoint"][-1] == "/opt/argus/kafka-secure-start.sh"
    mounts = {v.split(":")[1]: v.split(":")[0] for v in k["volumes"]}
    assert mounts["/var/lib/kafka/data"] == "kafka-secure-data", "never the PLAINTEXT volume"
    script = ROOT / mounts["/opt/argus/kafka-secure-start.sh"]
    assert script.is_file()
    assert {f"kafka_{u}_password" for u in SCRAM_USERS} | {"kafka_keystore", "kafka_ca"} == set(
        k["secrets"]
    )
    assert "--command-config" in k["healthcheck"]["test"][1]
    assert k["ports"] == ["19092:19092"], "the loopback controller listener stays unpublished"
    assert "kafka-secure-data" in secure["volumes"]


@pytest.fixture(scope="module")
def made_secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    d = tmp_path_factory.mktemp("compose") / "secrets"
    out = subprocess.run(
        ["sh", str(ROOT / "compose" / "make-secrets.sh"), str(d)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "ARGUS_KAFKA_EXTERNAL_HOST": "gw.example.org"},
    )
    assert out.returncode == 0, out.stderr
    return d


def test_make_secrets_writes_a_verifiable_broker_certificate(made_secrets: Path) -> None:
    d = made_secrets
    assert (d.stat().st_mode & 0o777) == 0o700
    names = {p.name for p in d.iterdir()}
    assert names == {"ca.pem", "broker-keystore.pem"} | {f"{u}.password" for u in SCRAM_USERS}
    pws = {(d / f"{u}.password").read_text().strip() for u in SCRAM_USERS}
    assert len(pws) == len(SCRAM_USERS) and all(re.fullmatch(r"[0-9a-f]{48}", p) for p in pws)
    keystore = (d / "broker-keystore.pem").read_text()
    assert keystore.startswith("-----BEGIN PRIVATE KEY-----") and "ENCRYPTED" not in keystore
    assert keystore.count("BEGIN CERTIFICATE") == 2
    cert = keystore[keystore.index("-----BEGIN CERTIFICATE") :]
    for host in ("kafka", "localhost", "gw.example.org"):
        out = subprocess.run(
            ["openssl", "verify", "-CAfile", str(d / "ca.pem"), "-verify_hostname", host],
            input=cert,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert out.returncode == 0, (host, out.stdout, out.stderr)
    bad = subprocess.run(
        ["openssl", "verify", "-CAfile", str(d / "ca.pem"), "-verify_hostname", "evil.org"],
        input=cert,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert bad.returncode != 0
    again = subprocess.run(
        ["sh", str(ROOT / "compose" / "make-secrets.sh"), str(d)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert again.returncode == 0 and (d / "admin.password").read_text().strip() in pws


def test_broker_start_script_configures_sasl_ssl_only(made_secrets: Path, tmp_path: Path) -> None:
    secrets = tmp_path / "run-secrets"
    secrets.mkdir()
    (secrets / "kafka_keystore").write_text((made_secrets / "broker-keystore.pem").read_text())
    (secrets / "kafka_ca").write_text((made_secrets / "ca.pem").read_text())
    for u in SCRAM_USERS:
        (secrets / f"kafka_{u}_password").write_text((made_secrets / f"{u}.password").read_text())
    conf = tmp_path / "conf"
    env = {"PATH": "/usr/bin:/bin", "SECRETS": str(secrets), "CONF": str(conf)}
    script = str(ROOT / "compose" / "kafka-secure-start.sh")
    out = subprocess.run(
        ["bash", script, "config"], env=env, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    props = dict(
        ln.split("=", 1)
        for ln in (conf / "server.properties").read_text().splitlines()
        if ln and not ln.startswith("#")
    )
    proto = dict(x.split(":") for x in props["listener.security.protocol.map"].split(","))
    listeners = dict(x.split("://") for x in props["listeners"].split(","))
    assert proto == {"INTERNAL": "SASL_SSL", "EXTERNAL": "SASL_SSL", "CONTROLLER": "SSL"}
    assert listeners["CONTROLLER"].startswith("127.0.0.1:"), "the controller only on loopback"
    assert props["listener.name.controller.ssl.client.auth"] == "required", "mutual TLS"
    assert props["ssl.client.auth"] == "none", "clients log in with SCRAM, not certificates"
    supers = props["super.users"].split(";")
    assert "User:ANONYMOUS" not in supers and set(supers) == {"User:admin", "User:CN=kafka"}
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    admin_pw = (made_secrets / "admin.password").read_text().strip()
    assert (
        f'password="{admin_pw}"' in props["listener.name.internal.scram-sha-512.sasl.jaas.config"]
    )
    for f in ("server.properties", "admin.properties"):
        assert ((conf / f).stat().st_mode & 0o077) == 0, f"{f} readable by others"
    assert admin_pw not in out.stdout + out.stderr
    # a missing or malformed password file stops the broker before it starts
    (secrets / "kafka_admin_password").write_text("short\n")
    bad = subprocess.run(
        ["bash", script, "config"], env=env, capture_output=True, text=True, timeout=30
    )
    assert bad.returncode != 0 and "kafka_admin_password" in bad.stderr


@pytest.mark.skipif(_compose_cli() is None, reason="docker compose not installed")
def test_docker_compose_config_accepts_the_secure_override(made_secrets: Path) -> None:
    cli = _compose_cli()
    assert cli is not None
    files = ["-f", "docker-compose.yml", "-f", SECURE_COMPOSE.name]
    out = subprocess.run(
        [*cli, *files, "--profile", "pagerduty", "config", "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(Path.home()),
            "ARGUS_PAGERDUTY_ROUTING_KEY": "x" * 32,
            "ARGUS_COMPOSE_SECRETS": str(made_secrets),
        },
    )
    assert out.returncode == 0, out.stderr
    services = json.loads(out.stdout)["services"]
    for name in ("compressor", "pagerduty", "topics", "acls"):
        env = services[name]["environment"]
        assert env["ARGUS_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL", name
        assert not any(PLAIN_PASSWORD.fullmatch(k) for k in env), name
    data = [
        v["source"] for v in services["kafka"]["volumes"] if v["target"] == "/var/lib/kafka/data"
    ]
    assert data == ["kafka-secure-data"]
