"""TLS and SASL for every Kafka client, from one configuration.

One :class:`KafkaSecurity` (``[kafka.security]`` in the TOML file, ``ARGUS_KAFKA_*`` in the
environment, or the matching librdkafka keys in ``[kafka.client]``) yields both client
flavours argus uses:

* :meth:`KafkaSecurity.librdkafka` - settings for confluent-kafka (collectors' producer,
  CLI/admin/replay consumers, the PagerDuty sink);
* :meth:`KafkaSecurity.faust_app_kwargs` - ``broker_credentials``/``ssl_context`` for
  ``faust.App`` (the stream workers, which talk to Kafka through aiokafka).

Secrets (the SASL password, a TLS key's password) come only from the environment or from
files named in the configuration; the TOML file itself may not hold them. They are kept as
:class:`Secret`, whose ``repr``/``str`` never show the value, so logging the settings is safe.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus.errors import ArgusError

__all__ = [
    "CLIENT_KEYS",
    "PROTOCOLS",
    "SECURITY_KEYS",
    "KafkaAuthError",
    "KafkaSecurity",
    "Secret",
    "check_connection",
    "checked_admin",
    "is_sensitive",
    "list_topics",
    "parse_security",
]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
REDACTED = "********"


class KafkaAuthError(ArgusError, RuntimeError):
    """The cluster refused this client (bad SASL credentials, TLS trust or ACLs).

    ``reason`` is ``authentication`` (SASL/TLS handshake refused) or ``unreachable`` (no
    broker answered in time); the message names the user and the mechanism, never the
    password.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class Secret:
    """A string that never shows itself in ``repr``/``str``/logs; :meth:`reveal` gives it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({REDACTED!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Secret) and type(other) is type(self) and other._value == self._value
        )

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)


def is_sensitive(key: str) -> bool:
    """Whether a librdkafka/argus setting holds a secret (its value is never shown)."""
    k = key.lower().replace("_", ".")
    return any(
        w in k
        for w in ("password", "secret", "jaas", "ssl.key.pem", "token", "routing.key", "credential")
    )


def reveal(value: Any) -> Any:
    """The plain value of a :class:`Secret`, anything else unchanged."""
    return value.reveal() if isinstance(value, Secret) else value


@dataclass(frozen=True, kw_only=True)
class KafkaSecurity:
    """How clients authenticate and encrypt. Default: PLAINTEXT (a loopback dev broker).

    Paths are PEM files: ``ca_file`` the CA bundle that signed the brokers' certificates,
    ``cert_file``/``key_file`` an optional client certificate (mutual TLS).
    """

    protocol: str = "PLAINTEXT"
    mechanism: str = ""  # SASL mechanism; empty: SCRAM-SHA-512
    username: str = ""
    password: Secret | None = field(default=None)
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    key_password: Secret | None = None
    check_hostname: bool = True

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def sasl_mechanism(self) -> str:
        return self.mechanism or "SCRAM-SHA-512"

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def librdkafka(self) -> dict[str, str]:
        """confluent-kafka settings (plain strings: this dict holds the password)."""
        out = {"security.protocol": self.protocol}
        if self.sasl or self.mechanism:
            out["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl:
            out["sasl.username"] = self.username
            out["sasl.password"] = reveal(self.password) or ""
        if self.tls:
            if self.ca_file:
                out["ssl.ca.location"] = self.ca_file
            if self.cert_file:
                out["ssl.certificate.location"] = self.cert_file
            if self.key_file:
                out["ssl.key.location"] = self.key_file
            if self.key_password:
                out["ssl.key.password"] = reveal(self.key_password)
            out["ssl.endpoint.identification.algorithm"] = (
                "https" if self.check_hostname else "none"
            )
        return out

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context (CA, optional client certificate), or None without TLS."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file or None)
        ctx.check_hostname = self.check_hostname
        if self.cert_file:
            pw = reveal(self.key_password) if self.key_password else None
            ctx.load_cert_chain(self.cert_file, self.key_file or None, password=pw)
        return ctx

    def faust_app_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``faust.App`` (faust-streaming 0.15 / aiokafka 0.14).

        SASL: ``broker_credentials=faust.SASLCredentials(..., ssl_context=...)`` (faust then
        asks aiokafka for ``SASL_SSL``, or ``SASL_PLAINTEXT`` without a context); TLS only:
        ``broker_credentials=faust.SSLCredentials(ctx)``. The broker URL stays ``kafka://``.
        """
        import faust

        ctx = self.ssl_context()
        if self.sasl:
            return {
                "broker_credentials": faust.SASLCredentials(
                    username=self.username,
                    password=reveal(self.password) or "",
                    ssl_context=ctx,
                    mechanism=self.sasl_mechanism,
                )
            }
        if ctx is not None:
            return {"broker_credentials": faust.SSLCredentials(ctx)}
        return {}

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for an aiokafka client (``AIOKafkaClient``): the protocol, the
        TLS context, the SASL mechanism and login."""
        out: dict[str, Any] = {"security_protocol": self.protocol}
        ctx = self.ssl_context()
        if ctx is not None:
            out["ssl_context"] = ctx
        if self.sasl:
            out["sasl_mechanism"] = self.sasl_mechanism
            out["sasl_plain_username"] = self.username
            out["sasl_plain_password"] = reveal(self.password) or ""
        return out

    def describe(self) -> dict[str, Any]:
        """The settings with secrets redacted (for ``argus config show`` and logs)."""
        return {
            "protocol": self.protocol,
            "mechanism": self.sasl_mechanism if self.sasl else self.mechanism,
            "username": self.username,
            "password": REDACTED if self.password else "",
            "ca_file": self.ca_file,
            "cert_file": self.cert_file,
            "key_file": self.key_file,
            "key_password": REDACTED if self.key_password else "",
            "check_hostname": self.check_hostname,
        }


# -- parsing ----------------------------------------------------------------------------------
#: librdkafka keys in ``[kafka.client]`` that are read into :class:`KafkaSecurity` instead
CLIENT_KEYS = {
    "security.protocol": "protocol",
    "sasl.mechanism": "mechanism",
    "sasl.mechanisms": "mechanism",
    "sasl.username": "username",
    "sasl.password": "password",
    "ssl.ca.location": "ca_file",
    "ssl.certificate.location": "cert_file",
    "ssl.key.location": "key_file",
    "ssl.key.password": "key_password",
}

#: keys of ``[kafka.security]``
SECURITY_KEYS = (
    "protocol",
    "mechanism",
    "username",
    "password",
    "password_file",
    "ca_file",
    "cert_file",
    "key_file",
    "key_password",
    "key_password_file",
    "check_hostname",
)


def _read_secret(path: str, key: str) -> Secret:
    from argus.config import ConfigError

    p = Path(path).expanduser()
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {p} ({exc.strerror})") from None
    value = text.strip("\r\n")
    if not value:
        raise ConfigError(f"{key}: {p} is empty")
    return Secret(value)


def file_secrets(file_tree: Mapping[str, Any]) -> list[str]:
    """Names of secret values written in the TOML file itself (not allowed)."""
    kafka = file_tree.get("kafka") or {}
    found: list[str] = []
    if not isinstance(kafka, Mapping):
        return found
    for section in ("security", "client"):
        table = kafka.get(section) or {}
        if isinstance(table, Mapping):
            found += [
                f"kafka.{section}.{k}"
                for k in table
                if is_sensitive(str(k)) and not str(k).endswith("_file")
            ]
    return found


def parse_security(
    table: Mapping[str, Any], client: Mapping[str, Any]
) -> tuple[KafkaSecurity, dict[str, Any]]:
    """Build :class:`KafkaSecurity` from ``[kafka.security]`` and the security keys of
    ``[kafka.client]``; return it and the remaining client settings (other secrets among
    them wrapped in :class:`Secret`).

    Raises ``ConfigError`` on unknown keys, an unknown protocol or mechanism, a key set in
    both places with different values, SASL without a username or password, or an
    unreadable secret file.
    """
    from argus.config import ConfigError, parse_bool

    unknown = sorted(set(table) - set(SECURITY_KEYS))
    if unknown:
        raise ConfigError(
            f"kafka.security: unknown key(s) {unknown}; known: {', '.join(SECURITY_KEYS)}"
        )
    vals: dict[str, Any] = {k: v for k, v in table.items() if v not in (None, "")}
    rest: dict[str, Any] = {}
    for k, v in client.items():
        key = str(k).replace("_", ".")
        if key in CLIENT_KEYS:
            name = CLIENT_KEYS[key]
            if name in vals and str(vals[name]) != str(v):
                raise ConfigError(
                    f"kafka.client.{key} and kafka.security.{name} disagree; set one of them"
                )
            vals[name] = v
        else:
            rest[key] = Secret(str(v)) if is_sensitive(key) else str(v)
    if key_ep := rest.pop("ssl.endpoint.identification.algorithm", None):
        vals.setdefault("check_hostname", str(key_ep).lower() != "none")

    protocol = str(vals.get("protocol", "PLAINTEXT")).upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"kafka.security.protocol must be one of {PROTOCOLS}, got {protocol!r}")
    mechanism = str(vals.get("mechanism", "")).upper()
    if mechanism and mechanism not in MECHANISMS:
        raise ConfigError(
            f"kafka.security.mechanism must be one of {MECHANISMS}, got {mechanism!r}"
        )
    password: Secret | None = None
    if vals.get("password"):
        password = Secret(str(vals["password"]))
    if vals.get("password_file"):
        if password is not None:
            raise ConfigError("set kafka.security.password_file or ARGUS_KAFKA_PASSWORD, not both")
        password = _read_secret(str(vals["password_file"]), "kafka.security.password_file")
    key_password: Secret | None = None
    if vals.get("key_password"):
        key_password = Secret(str(vals["key_password"]))
    if vals.get("key_password_file"):
        key_password = _read_secret(
            str(vals["key_password_file"]), "kafka.security.key_password_file"
        )
    sec = KafkaSecurity(
        protocol=protocol,
        mechanism=mechanism,
        username=str(vals.get("username", "")),
        password=password,
        ca_file=_path(vals.get("ca_file")),
        cert_file=_path(vals.get("cert_file")),
        key_file=_path(vals.get("key_file")),
        key_password=key_password,
        check_hostname=parse_bool(  # an empty value is an error, as for every boolean
            vals.get("check_hostname", table.get("check_hostname", True)),
            "kafka.security.check_hostname",
        ),
    )
    if sec.sasl and not (sec.username and sec.password):
        raise ConfigError(
            f"security protocol {protocol} needs kafka.security.username and a password "
            "(ARGUS_KAFKA_PASSWORD or kafka.security.password_file)"
        )
    for name in ("ca_file", "cert_file", "key_file"):
        path = getattr(sec, name)
        if path and not Path(path).is_file():
            raise ConfigError(f"kafka.security.{name}: {path} does not exist")
    if bool(sec.cert_file) != bool(sec.key_file):
        raise ConfigError("kafka.security.cert_file and key_file go together (mutual TLS)")
    return sec, rest


def _path(value: Any) -> str:
    return str(Path(str(value)).expanduser()) if value else ""


# -- connection check -------------------------------------------------------------------------
def _who(settings: Any) -> str:
    sec: KafkaSecurity = settings.security
    if sec.sasl:
        return f"user {sec.username!r} ({sec.sasl_mechanism} over {sec.protocol})"
    return sec.protocol


def checked_admin(settings: Any) -> tuple[Any, list[Any]]:
    """An ``AdminClient`` of ``settings`` and the list its ``error_cb`` fills (for
    :func:`list_topics`)."""
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient(settings.kafka_config(**{"error_cb": errors.append, "log_level": 0}))
    return admin, errors


def list_topics(admin: Any, errors: list[Any], settings: Any, timeout_s: float) -> Any:
    """Cluster metadata from :func:`checked_admin`'s client, failing fast.

    A refused SASL/TLS handshake raises :class:`KafkaAuthError` (``authentication``) as soon
    as librdkafka reports it (about 1 s), silence raises it (``unreachable``) after
    ``timeout_s``.
    """
    from confluent_kafka import KafkaError, KafkaException

    auth_codes = {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._SSL,
    }
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        left = deadline - time.monotonic()
        try:
            md = admin.list_topics(timeout=min(1.0, max(0.1, left)))
            if md.brokers:
                return md
        except KafkaException as exc:
            last = str(exc.args[0]) if exc.args else str(exc)
        admin.poll(0)
        for err in errors:
            if err.code() in auth_codes:
                raise KafkaAuthError(
                    "authentication",
                    f"{settings.bootstrap_servers} refused {_who(settings)}: {err.str()}",
                )
            last = err.str()
        if left <= 0:
            raise KafkaAuthError(
                "unreachable",
                f"no broker at {settings.bootstrap_servers} answered {_who(settings)} within "
                f"{timeout_s:g} s" + (f" (last error: {last})" if last else ""),
            )


def check_connection(settings: Any, *, timeout_s: float = 15.0) -> int:
    """Connect with ``settings`` and fetch cluster metadata; return the broker count.

    Raises :class:`KafkaAuthError` (see :func:`list_topics`) instead of hanging.
    """
    admin, errors = checked_admin(settings)
    return len(list_topics(admin, errors, settings, timeout_s).brokers)
