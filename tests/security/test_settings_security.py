"""One security configuration -> librdkafka and faust settings; secrets never in the file
nor in any printed form. No broker needed."""

from __future__ import annotations

import re
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from argus.config import ConfigError, load_settings
from argus.kafka.acls import acl_rules, kafka_acls_script
from argus.kafka.security import REDACTED, Secret
from argus.topics import TOPICS, topic_name

PW = "s3cr3t-Pa55word-xyz"


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
         str(tmp_path / "ca.key"), "-out", str(tmp_path / "ca.pem"), "-days", "1",
         "-subj", "/CN=test"],
        check=True, capture_output=True,
    )  # fmt: skip
    return tmp_path / "ca.pem"


def test_env_and_file_give_one_config_for_librdkafka_and_faust(tmp_path: Path, ca: Path) -> None:
    f = tmp_path / "argus.toml"
    pwf = tmp_path / "pw"
    pwf.write_text(PW + "\n")
    f.write_text(
        f'[kafka]\nbootstrap = "k1:9093"\n[kafka.security]\nprotocol = "SASL_SSL"\n'
        f'username = "worker"\npassword_file = "{pwf}"\n'
    )
    s = load_settings(f, env={"ARGUS_KAFKA_CA_FILE": str(ca)})
    conf = s.kafka_config()
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert (conf["sasl.username"], conf["sasl.password"]) == ("worker", PW)
    assert conf["ssl.ca.location"] == str(ca)
    assert conf["ssl.endpoint.identification.algorithm"] == "https"
    creds = s.security.faust_app_kwargs()["broker_credentials"]
    assert creds.protocol.value == "SASL_SSL" and creds.mechanism.value == "SCRAM-SHA-512"
    assert (creds.username, creds.password) == ("worker", PW)
    assert isinstance(creds.ssl_context, ssl.SSLContext)
    assert creds.ssl_context.verify_mode == ssl.CERT_REQUIRED and creds.ssl_context.check_hostname
    for shown in (repr(s), str(s.security), repr(creds), str(s.security.describe())):
        assert PW not in shown


def test_client_table_keys_are_read_into_the_same_config(ca: Path) -> None:
    env = {
        "ARGUS_KAFKA__CLIENT__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "ARGUS_KAFKA__CLIENT__SASL_USERNAME": "ops",
        "ARGUS_KAFKA__CLIENT__SASL_PASSWORD": PW,
        "ARGUS_KAFKA__CLIENT__SSL_KEYSTORE_PASSWORD": "other-secret-1",
    }
    s = load_settings(env=env)
    assert s.security.protocol == "SASL_PLAINTEXT" and s.security.username == "ops"
    assert s.security.faust_app_kwargs()["broker_credentials"].protocol.value == "SASL_PLAINTEXT"
    assert s.kafka_config()["sasl.password"] == PW
    assert s.kafka_config()["ssl.keystore.password"] == "other-secret-1"
    assert PW not in repr(s) and "other-secret-1" not in repr(s)


def test_tls_only_gives_faust_ssl_credentials(ca: Path) -> None:
    s = load_settings(env={"ARGUS_KAFKA_SECURITY_PROTOCOL": "SSL", "ARGUS_KAFKA_CA_FILE": str(ca)})
    creds = s.security.faust_app_kwargs()["broker_credentials"]
    assert creds.protocol.value == "SSL"
    assert "sasl.username" not in s.kafka_config()
    assert load_settings(env={}).security.faust_app_kwargs() == {}


@pytest.mark.parametrize(
    ("toml", "env", "match"),
    [
        ('[kafka.security]\npassword = "x"\n', {}, "holds secret"),
        ('[kafka.client]\n"sasl.password" = "x"\n', {}, "holds secret"),
        (
            "",
            {"ARGUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "ARGUS_KAFKA_USERNAME": "u"},
            "password",
        ),
        ("", {"ARGUS_KAFKA_SECURITY_PROTOCOL": "TLS"}, "protocol must be one of"),
        ("", {"ARGUS_KAFKA_SASL_MECHANISM": "GSSAPI"}, "mechanism must be one of"),
        ("", {"ARGUS_KAFKA_PASSWORD_FILE": "/nonexistent/pw"}, "cannot read"),
        ("", {"ARGUS_KAFKA_CA_FILE": "/nonexistent/ca.pem"}, "does not exist"),
        ("[kafka.security]\nusername2 = 'x'\n", {}, "unknown key"),
        (
            "[kafka.security]\nprotocol = 'SSL'\n",
            {"ARGUS_KAFKA__CLIENT__SECURITY_PROTOCOL": "SASL_SSL"},
            "disagree",
        ),
    ],
)
def test_bad_security_settings_are_one_clear_error(
    tmp_path: Path, toml: str, env: dict[str, str], match: str
) -> None:
    f = tmp_path / "a.toml"
    f.write_text(toml)
    with pytest.raises(ConfigError, match=match) as err:
        load_settings(f, env=env)
    assert '"x"' not in str(err.value)


def test_secret_hides_itself() -> None:
    s = Secret(PW)
    assert s.reveal() == PW and PW not in repr(s) and PW not in str(s) and f"{s}" == str(s)
    assert REDACTED in repr(s)


def test_config_show_redacts(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "ARGUS_CONFIG": str(tmp_path / "none.toml"),
        "ARGUS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "ARGUS_KAFKA_USERNAME": "u",
        "ARGUS_KAFKA_PASSWORD": PW,
        "ARGUS_PAGERDUTY__ROUTING_KEY": "R0UTINGKEY-abcdef",
    }
    (tmp_path / "none.toml").write_text("")
    r = subprocess.run(
        [sys.executable, "-m", "argus.cli", "config", "show"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert PW not in r.stdout and "R0UTINGKEY" not in r.stdout
    assert r.stdout.count(REDACTED) == 2
    assert re.search(r'^kafka\.security\.username +"u" +env ARGUS_KAFKA_USERNAME$', r.stdout, re.M)
    assert re.search(
        r"^pagerduty\.routing_key +.+ +env ARGUS_PAGERDUTY__ROUTING_KEY$", r.stdout, re.M
    )


def test_acl_layout() -> None:
    rules = acl_rules("argus")
    grants = {(r.user, r.resource, r.name, r.operation) for r in rules}
    t = {x.suffix: topic_name(x.suffix, "argus") for x in TOPICS}
    # collectors write raw topics only, and read nothing but control
    col_writes = {n for u, res, n, op in grants if u == "collector" and op == "WRITE"}
    assert col_writes == {t["raw.steps"], t["raw.kernels"], t["raw.stacks"], t["jobs"]}
    col_reads = {
        n for u, res, n, op in grants if u == "collector" and op == "READ" and res == "topic"
    }
    assert col_reads == {t["control"]}
    # workers read raw and write summaries/anomalies/alerts/dlq, never control
    assert ("worker", "topic", t["raw.kernels"], "READ") in grants
    for s in ("summary.kernels", "summary.stacks", "anomalies", "alerts", "dlq"):
        assert ("worker", "topic", t[s], "WRITE") in grants
    assert not any(u == "worker" and n == t["control"] for u, _, n, _ in grants)
    # ops read findings; PagerDuty reads alerts, and jobs for the culprit ranks' hosts
    for s in ("anomalies", "alerts", "summary.kernels"):
        assert ("ops", "topic", t[s], "READ") in grants
    pd_reads = {
        n for u, res, n, op in grants if u == "pagerduty" and op == "READ" and res == "topic"
    }
    assert pd_reads == {t["alerts"], t["jobs"]}
    # nobody but admin may create the wire topics
    assert not any(op == "CREATE" and n in t.values() for _, _, n, op in grants)
    script = kafka_acls_script(rules, "b:9093")
    assert script.count("kafka-acls.sh") == len(rules)
    assert "--allow-principal User:collector --operation Write --topic 'argus.raw.steps'" in script
    assert "--operation DescribeConfigs" in script
    assert {r.name for r in acl_rules("p2")} >= {"p2.alerts", "p2.internal.", "p2-"}
