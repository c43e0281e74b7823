"""A real Apache Kafka broker on this machine, without Docker.

``argus kafka up`` resolves the broker jars from Maven Central once (into
``<cache_dir>/kafka-<version>/libs``), formats KRaft storage once, and starts one combined
broker+controller JVM (``kafka.Kafka``) bound to 127.0.0.1. It is idempotent: a running
broker is left alone. ``down`` stops only the process whose pid it recorded, after checking
that the pid is still that ``kafka.Kafka`` JVM. When an existing cluster is configured
(``ARGUS_KAFKA_BOOTSTRAP``), nothing is started or stopped.

``up(brokers=3)`` (``argus kafka up --brokers 3``) formats and starts a KRaft cluster of three
combined broker+controller JVMs instead (node i on ``kafka_port + 10 (i-1)``; node 1 keeps the
single broker's paths): replication factor 3 and ``min.insync.replicas`` 2 by default, for
internal topics too, so an ``acks=all`` write survives the loss of any one broker. ``up``
restarts only the nodes that are not running. The node count is fixed at format time.

``up(secure=True)`` (``argus kafka up --secure``) starts it locked down instead: one SASL_SSL
client listener (SCRAM-SHA-512) with a certificate from a CA generated here (openssl), SCRAM
users ``admin`` (super user) and one per role (see :mod:`argus.kafka.acls`) created at format
time with random passwords under ``<state_dir>/kafka/secrets/`` (mode 0600), and the
StandardAuthorizer on (no ACL: no access). The KRaft controller listener is TLS with client
certificates required (mutual TLS): only a holder of the broker's key (principal
``User:CN=argus-broker``, with ``admin`` the only super users) gets in; no anonymous principal
has any right. The mode is fixed when the storage is formatted; ``reset`` to change it.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from argus.config import Settings
from argus.errors import ArgusError

__all__ = [
    "BROKER_CN",
    "KAFKA_VERSION",
    "PORT_STRIDE",
    "SUPER_USERS",
    "BrokerError",
    "BrokerStatus",
    "LocalBroker",
    "Node",
]

#: The pinned Apache Kafka release (4.0 line: faust-streaming's CI and aiokafka >= 0.13 run on it).
KAFKA_VERSION = "4.0.2"


#: Subject CN of the local secure broker's certificate; ``User:CN=<it>`` is the principal of
#: its mutual-TLS connections to the controller listener.
BROKER_CN = "argus-broker"
#: The only super users of the secure broker: the admin SCRAM user and the broker's certificate
#: (never ``User:ANONYMOUS``).
SUPER_USERS = f"User:admin;User:CN={BROKER_CN}"


#: Port distance between the nodes of a local cluster: node i (1-based) listens on
#: ``kafka_port + 10 (i-1)`` and its controller on ``controller_port + 10 (i-1)``.
PORT_STRIDE = 10
#: How long a starting node must look not running (no JVM of ours at its pid) before ``up``
#: says it exited (s).
EXIT_GRACE_S = 2.0


class BrokerError(ArgusError, RuntimeError):
    """The local broker could not be fetched, started or stopped; the message says why."""


@dataclass(frozen=True)
class BrokerStatus:
    running: bool
    pid: int | None
    bootstrap: str
    managed: bool  # started by argus (False: an existing cluster is configured)
    detail: str = ""


@dataclass(frozen=True)
class Node:
    """One KRaft node (broker + controller in one JVM) of the local cluster; node 1 has the
    single broker's paths, so a one-broker state dir is a one-node cluster."""

    id: int
    port: int  # client listener on 127.0.0.1
    controller_port: int
    data: Path
    props: Path
    pid_file: Path
    logs: Path


def _port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class LocalBroker:
    """The broker ``argus kafka`` manages, under ``settings.state_dir / "kafka"``."""

    def __init__(self, settings: Settings, *, version: str = KAFKA_VERSION) -> None:
        self.settings = settings
        self.version = version
        self.home = settings.state_dir / "kafka"
        self.libs = settings.cache_dir / f"kafka-{version}" / "libs"
        self.data = self.home / "data"
        self.logs = self.home / "logs"
        self.pid_file = self.home / "broker.pid"
        self.props = self.home / "server.properties"
        self.tls_dir = self.home / "tls"
        self.secrets_dir = self.home / "secrets"
        self.mode_file = self.home / "security"
        self.brokers_file = self.home / "brokers"

    # -- security ---------------------------------------------------------------------------
    @property
    def secure(self) -> bool:
        """True when this broker's storage was formatted for SASL_SSL (``up(secure=True)``)."""
        try:
            return self.mode_file.read_text().strip() == "sasl_ssl"
        except OSError:
            return False

    @property
    def ca_file(self) -> Path:
        return self.tls_dir / "ca.pem"

    def password_file(self, user: str) -> Path:
        return self.secrets_dir / f"{user}.password"

    def client_env(self, user: str = "admin") -> dict[str, str]:
        """``ARGUS_KAFKA_*`` variables that make a client ``user`` of this secure broker."""
        if not self.secure:
            return {}
        if not self.password_file(user).exists():
            raise BrokerError(f"no SCRAM user {user!r} on this broker")
        return {
            "ARGUS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "ARGUS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "ARGUS_KAFKA_USERNAME": user,
            "ARGUS_KAFKA_PASSWORD_FILE": str(self.password_file(user)),
            "ARGUS_KAFKA_CA_FILE": str(self.ca_file),
        }

    def client_settings(self, user: str = "admin") -> Settings:
        """These settings, authenticated as ``user`` when the broker is secure."""
        if not self.secure:
            return self.settings
        from argus.kafka.security import KafkaSecurity, Secret

        pw = self.password_file(user).read_text().strip()
        sec = KafkaSecurity(
            protocol="SASL_SSL",
            mechanism="SCRAM-SHA-512",
            username=user,
            password=Secret(pw),
            ca_file=str(self.ca_file),
        )
        return dataclasses.replace(self.settings, security=sec)

    def _ensure_tls(self) -> None:
        """A CA and a broker certificate for 127.0.0.1/localhost (PEM), made once."""
        keystore = self.tls_dir / "broker-keystore.pem"
        ext = self.tls_dir / "broker.ext"
        if keystore.exists() and self.ca_file.exists() and "clientAuth" in _read(ext):
            return  # (certificates without clientAuth predate the mutual-TLS controller)
        openssl = shutil.which("openssl")
        if openssl is None:
            raise BrokerError("openssl is not on PATH; it makes the local broker's certificates")
        d = self.tls_dir
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)
        (d / "broker.ext").write_text(
            "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            # clientAuth: the broker presents it to the controller listener (mutual TLS)
            "extendedKeyUsage=serverAuth,clientAuth\n"
        )
        steps = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "3650", "-subj", "/CN=argus local CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out",
             "broker.csr", "-subj", f"/CN={BROKER_CN}"],
            ["x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "broker.crt", "-days", "825", "-sha256",
             "-extfile", "broker.ext"],
        ]  # fmt: skip
        for args in steps:
            r = subprocess.run([openssl, *args], cwd=d, capture_output=True, text=True, check=False)
            if r.returncode != 0:
                raise BrokerError(f"openssl {args[0]} failed: {r.stderr[-1000:]}")
        # Kafka's PEM keystore: unencrypted PKCS#8 key, then the certificate chain
        keystore.write_text(
            (d / "broker.key").read_text()
            + (d / "broker.crt").read_text()
            + self.ca_file.read_text()
        )
        for f in ("ca.key", "broker.key", "broker-keystore.pem"):
            os.chmod(d / f, 0o600)

    def _ensure_passwords(self) -> dict[str, str]:
        """``{user: password}`` of the SCRAM users, random, made once (files mode 0600)."""
        from argus.kafka.acls import USERS

        self.secrets_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.secrets_dir, 0o700)
        out: dict[str, str] = {}
        for user in USERS:
            f = self.password_file(user)
            if not f.exists():
                fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(secrets.token_urlsafe(24) + "\n")
            out[user] = f.read_text().strip()
        return out

    # -- jars -------------------------------------------------------------------------------
    def fetch(self, *, quiet: bool = True) -> Path:
        """Resolve the broker jars with Maven once; return the libs folder."""
        marker = self.libs / ".complete"
        if marker.exists():
            return self.libs
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError("Maven (mvn) is not on PATH; install it (apt-get install maven)")
        build = self.libs.parent / "build"
        build.mkdir(parents=True, exist_ok=True)
        pom = resources.files("argus.kafka").joinpath("pom.xml").read_text()
        (build / "pom.xml").write_text(pom.replace("@KAFKA_VERSION@", self.version))
        tmp = self.libs.parent / "libs.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [
            mvn,
            "-B",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}",
            "-DincludeScope=runtime",
        ]
        if quiet:
            cmd.insert(1, "-q")
        proc = subprocess.run(cmd, cwd=build, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BrokerError(
                f"mvn could not resolve org.apache.kafka:kafka_2.13:{self.version} "
                f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        shutil.rmtree(self.libs, ignore_errors=True)
        tmp.rename(self.libs)
        marker.write_text(self.version + "\n")
        return self.libs

    # -- lifecycle --------------------------------------------------------------------------
    def _java(self) -> str:
        home = os.environ.get("JAVA_HOME")
        if home and (Path(home) / "bin" / "java").exists():
            return str(Path(home) / "bin" / "java")
        java = shutil.which("java")
        if java is None:
            raise BrokerError(
                "java is not on PATH; Kafka 4 needs Java 17+ (apt-get install openjdk-17-jre-headless)"
            )
        return java

    def _listener_props(self, node: Node, secure: bool) -> list[str]:
        if not secure:
            return [
                f"listeners=PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            ]
        admin_pw = self.password_file("admin").read_text().strip()
        tls = self.tls_dir
        return [
            f"listeners=SASL_SSL://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            f"advertised.listeners=SASL_SSL://127.0.0.1:{node.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=SASL_SSL",
            "listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{admin_pw}";',
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={tls / 'broker-keystore.pem'}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={tls / 'ca.pem'}",
            "ssl.client.auth=none",
            # the controller listener: mutual TLS, the broker's certificate is its principal
            "listener.name.controller.ssl.client.auth=required",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            f"super.users={SUPER_USERS}",
            "allow.everyone.if.no.acl.found=false",
        ]

    def _write_props(self, node: Node, nodes: list[Node], secure: bool = False) -> None:
        node.props.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(node.props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # holds the admin password when secure
        with os.fdopen(fd, "w") as fh:
            fh.write(self._props_text(node, nodes, secure))

    def _props_text(self, node: Node, nodes: list[Node], secure: bool) -> str:
        n = len(nodes)
        # one broker: nothing to replicate; a cluster: replication factor 3 (or n), and a write
        # acknowledged by acks=all is on 2 brokers, so it survives the loss of any one
        rf = min(n, 3)
        isr = max(1, rf - 1)
        voters = ",".join(f"{x.id}@127.0.0.1:{x.controller_port}" for x in nodes)
        return "\n".join(
            [
                "# written by `argus kafka up`; edit argus settings, not this file",
                "process.roles=broker,controller",
                f"node.id={node.id}",
                f"controller.quorum.voters={voters}",
                *self._listener_props(node, secure),
                f"log.dirs={node.data}",
                "num.partitions=1",
                f"default.replication.factor={rf}",
                f"min.insync.replicas={isr}",
                f"offsets.topic.replication.factor={rf}",
                "offsets.topic.num.partitions=8",
                f"transaction.state.log.replication.factor={rf}",
                f"transaction.state.log.min.isr={isr}",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=true",
                "log.retention.check.interval.ms=60000",
                "",
            ]
        )

    # -- nodes ------------------------------------------------------------------------------
    @property
    def brokers(self) -> int:
        """Nodes of this cluster (fixed when the storage is formatted; 1 when not formatted)."""
        try:
            return max(1, int(self.brokers_file.read_text().strip()))
        except (OSError, ValueError):
            return 1

    def node(self, node_id: int) -> Node:
        """Node ``node_id`` (1-based). Node 1 keeps the single broker's paths and ports; node
        i listens on ``kafka_port + 10 (i-1)`` and ``controller_port + 10 (i-1)``."""
        s = self.settings
        off = PORT_STRIDE * (node_id - 1)
        if node_id == 1:
            return Node(1, s.kafka_port, s.controller_port, self.data, self.props,
                        self.pid_file, self.logs)  # fmt: skip
        d = self.home / f"node-{node_id}"
        return Node(node_id, s.kafka_port + off, s.controller_port + off, d / "data",
                    d / "server.properties", d / "broker.pid", d / "logs")  # fmt: skip

    def nodes(self, count: int | None = None) -> list[Node]:
        """Every node of the cluster (``count`` of them; default: as formatted)."""
        return [self.node(i) for i in range(1, (count or self.brokers) + 1)]

    @property
    def bootstrap(self) -> str:
        """``host:port`` of every node's client listener, comma-separated."""
        if not self.settings.local_broker:
            return self.settings.bootstrap_servers
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes())

    def node_pid(self, node: Node) -> int | None:
        """The pid of ``node``'s running JVM (None: not running, or the pid is not ours)."""
        try:
            pid = int(node.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        if b"kafka.Kafka" in cmdline and str(node.props).encode() in cmdline and not _zombie(pid):
            return pid
        return None  # pid reused by another process: not ours

    def _pid(self) -> int | None:
        return self.node_pid(self.node(1))

    def status(self) -> BrokerStatus:
        s = self.settings
        if not s.local_broker:
            host, _, port = s.bootstrap.split(",")[0].rpartition(":")
            up = _port_open(host or "127.0.0.1", int(port or 9092))
            return BrokerStatus(
                up, None, s.bootstrap, False, "existing cluster (ARGUS_KAFKA_BOOTSTRAP)"
            )
        nodes = self.nodes()
        pids = [self.node_pid(n) for n in nodes]
        up = all(p is not None for p in pids) and all(
            _port_open("127.0.0.1", n.port) for n in nodes
        )
        detail = f"Apache Kafka {self.version}" + (", SASL_SSL" if self.secure else "")
        if len(nodes) > 1:
            alive = sum(p is not None for p in pids)
            detail += f", {len(nodes)} brokers ({alive} running)"
        bootstrap = s.bootstrap_servers if len(nodes) == 1 else self.bootstrap
        return BrokerStatus(up, pids[0], bootstrap, True, detail)

    def up(
        self, *, timeout_s: float = 90.0, secure: bool | None = None, brokers: int | None = None
    ) -> BrokerStatus:
        """Start the broker(s) unless they run (or an existing cluster is configured).

        ``secure``: format a new broker for SASL_SSL (True) or PLAINTEXT (False); None keeps
        what the storage was formatted with (PLAINTEXT for a new one). ``brokers``: format a
        new cluster of this many KRaft nodes (each broker + controller); None keeps what was
        formatted (1 for a new one). On a cluster, only the nodes that are not running are
        started (a killed node rejoins).
        """
        s = self.settings
        formatted = (self.data / "meta.properties").exists()
        if secure is not None and formatted and secure != self.secure:
            raise BrokerError(
                f"the broker in {self.home} was formatted "
                f"{'SASL_SSL' if self.secure else 'PLAINTEXT'}; `argus kafka reset` to change it"
            )
        if brokers is not None and brokers < 1:
            raise BrokerError(f"--brokers must be >= 1, not {brokers}")
        if brokers is not None and formatted and brokers != self.brokers:
            raise BrokerError(
                f"the cluster in {self.home} was formatted with {self.brokers} broker(s); "
                "`argus kafka reset` to change it"
            )
        if not s.local_broker:
            return self.status()
        nodes = self.nodes(self.brokers if formatted else (brokers or 1))
        stopped = [n for n in nodes if self.node_pid(n) is None]
        if not stopped:  # every JVM is up (answering or not yet): wait for them
            return self._wait(nodes, timeout_s)
        for n in stopped:
            if _port_open("127.0.0.1", n.port) or _port_open("127.0.0.1", n.controller_port):
                raise BrokerError(
                    f"port {n.port} or {n.controller_port} on 127.0.0.1 is taken by another "
                    "process; set ARGUS_KAFKA_PORT / ARGUS_KAFKA_CONTROLLER_PORT or stop it"
                )
        libs = self.fetch()
        java = self._java()
        if not formatted:
            for n in nodes:
                shutil.rmtree(n.data, ignore_errors=True)
            self.home.mkdir(parents=True, exist_ok=True)
            self.mode_file.write_text("sasl_ssl\n" if secure else "plaintext\n")
            self.brokers_file.write_text(f"{len(nodes)}\n")
        secure = self.secure
        scram: list[str] = []
        if secure:
            self._ensure_tls()
            users = self._ensure_passwords()
            for user, pw in users.items():
                scram += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={pw}]"]
        for n in stopped:
            self._write_props(n, nodes, secure)
            n.logs.mkdir(parents=True, exist_ok=True)
        cp = f"{libs}/*"
        unformatted = [n for n in stopped if not (n.data / "meta.properties").exists()]
        if unformatted:
            cluster_id = _meta_cluster_id(self.data) or _cluster_id()
            for n in unformatted:
                fmt = subprocess.run(
                    [java, *self._log_opts(n), "-cp", cp, "kafka.tools.StorageTool", "format",
                     f"--cluster-id={cluster_id}", "-c", str(n.props), *scram],
                    capture_output=True,
                    text=True,
                    check=False,
                )  # fmt: skip
                if fmt.returncode != 0:
                    text = f"{fmt.stdout}{fmt.stderr}"
                    for pw in (p.split("password=")[-1].rstrip("]") for p in scram[1::2]):
                        text = text.replace(pw, "********")
                    raise BrokerError(f"formatting KRaft storage of node {n.id} failed:\n{text}")
        heap = os.environ.get("ARGUS_KAFKA_HEAP", "768m" if len(nodes) == 1 else "512m")
        for n in stopped:
            with open(n.logs / "stdout.log", "ab") as out:
                proc = subprocess.Popen(
                    [java, f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC",
                     "-Djava.awt.headless=true", *self._log_opts(n), "-cp", cp, "kafka.Kafka",
                     str(n.props)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # survives the CLI; `down` stops it
                )  # fmt: skip
            n.pid_file.write_text(f"{proc.pid}\n")
        return self._wait(nodes, timeout_s)

    def _log_opts(self, node: Node) -> list[str]:
        log4j = resources.files("argus.kafka").joinpath("log4j2.properties")
        return [f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={node.logs}"]

    def _wait(self, nodes: list[Node], timeout_s: float) -> BrokerStatus:
        """Until every node's JVM runs and the cluster's metadata lists all of them."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        bootstrap = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
        cfg = self.client_settings().kafka_config(
            **{"log_level": 0, "bootstrap.servers": bootstrap}
        )
        admin = AdminClient(cfg)
        gone: dict[int, float] = {}  # node id -> when it was first seen not running
        while time.monotonic() < deadline:
            for n in nodes:
                if self.node_pid(n) is not None:
                    gone.pop(n.id, None)
                    continue
                # seen not running for EXIT_GRACE_S on end: one look can miss a starting JVM
                # (a CI run once read it as exited while it went on to run for minutes)
                first = gone.setdefault(n.id, time.monotonic())
                if time.monotonic() - first >= EXIT_GRACE_S:
                    tail = _tail(n.logs / "server.log") or _tail(n.logs / "stdout.log")
                    raise BrokerError(
                        f"the broker{f' node {n.id}' if len(nodes) > 1 else ''} exited during "
                        f"start-up; last log lines:\n{tail}"
                    )
            if all(_port_open("127.0.0.1", n.port) for n in nodes):
                try:
                    md = admin.list_topics(timeout=2.0)
                    if len(md.brokers) >= len(nodes):
                        return self.status()
                except Exception:  # not ready yet
                    pass
            time.sleep(0.3)
        raise BrokerError(
            f"broker (pid {self.node_pid(nodes[0])}) did not answer within {timeout_s:.0f} s; "
            f"see {nodes[0].logs}/server.log"
        )

    def down(self, *, timeout_s: float = 30.0) -> bool:
        """Stop the broker(s) this folder started; True if one was stopped."""
        if not self.settings.local_broker:
            return False
        running = [(n, pid) for n in self.nodes() if (pid := self.node_pid(n)) is not None]
        for n in self.nodes():
            if all(n is not m for m, _ in running):
                n.pid_file.unlink(missing_ok=True)
        for _, pid in running:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for n, pid in running:
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                if _zombie(pid):
                    break
                time.sleep(0.2)
            if Path(f"/proc/{pid}").exists() and not _zombie(pid):
                os.kill(pid, signal.SIGKILL)
            n.pid_file.unlink(missing_ok=True)
        return bool(running)

    def reset(self) -> None:
        """Stop the broker(s) and delete their data (topics, offsets)."""
        self.down()
        for n in self.nodes():
            shutil.rmtree(n.data, ignore_errors=True)
        for d in self.home.glob("node-*"):
            shutil.rmtree(d, ignore_errors=True)
        for p in (self.tls_dir, self.secrets_dir):
            shutil.rmtree(p, ignore_errors=True)
        self.mode_file.unlink(missing_ok=True)
        self.brokers_file.unlink(missing_ok=True)


def _meta_cluster_id(data: Path) -> str | None:
    """The cluster id a node's storage was formatted with (None: not formatted)."""
    try:
        for line in (data / "meta.properties").read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False


def _cluster_id() -> str:
    """A KRaft cluster id (Kafka's format: URL-safe base64 of 16 random bytes, no padding);
    never starting with '-', which command-line parsers take for an option."""
    import base64

    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""
