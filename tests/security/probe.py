"""Run ``AdminProbe.java`` (the admin calls, through a broker or a KRaft controller listener)
for several clients in one JVM; shared by the local and the Compose secure-broker tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("AdminProbe.java")
#: the admin calls the probe makes, in its order
CALLS = ("describe_acls", "create_acls", "alter_configs", "create_topics")


def props_file(path: Path, **kv: str) -> str:
    """Write a Java client properties file; return its path."""
    path.write_text("".join(f"{k}={v}\n" for k, v in kv.items()))
    return str(path)


def scram_props(path: Path, user: str, password: str, ca_file: Path, **extra: str) -> str:
    """Properties of a SASL_SSL SCRAM-SHA-512 client ``user``."""
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )
    return props_file(
        path,
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca_file),
            **extra,
        },
    )


def run_admin_probe(libs: Path, clients: list[tuple[str, str, str, str]]) -> dict[str, str]:
    """``{"<client> <call>": "OK" | "DENIED <why>"}`` for each client ``(name, "server" |
    "controller", "host:port", properties file or "-")``."""
    java = shutil.which("java")
    if java is None:
        pytest.skip("needs a JDK (java) to run the AdminProbe")
    args = [a for c in clients for a in c]
    r = subprocess.run(
        [java, "-cp", f"{libs}/*", str(PROBE), *args],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    out: dict[str, str] = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^(\S+ \S+) (OK|DENIED.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    assert len(out) == len(clients) * len(CALLS), r.stdout + r.stderr[-3000:]
    return out
