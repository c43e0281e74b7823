"""Configuration by file + environment, frozen once loaded.

Sources, later ones win:

1. defaults in :class:`Settings`;
2. a TOML file: ``--config PATH``, else ``$ARGUS_CONFIG``, else ``./argus.toml`` if present;
3. environment: the short names below, and for any nested key
   ``ARGUS_<SECTION>__<KEY>`` (e.g. ``ARGUS_DETECTORS__L2__Z=3``).

=============================  ===========================  =================================
setting                        environment                  meaning
=============================  ===========================  =================================
kafka.bootstrap                ARGUS_KAFKA_BOOTSTRAP        existing cluster; empty: local broker
kafka.port                     ARGUS_KAFKA_PORT             local broker's client port (19092)
kafka.controller_port          ARGUS_KAFKA_CONTROLLER_PORT  local KRaft controller port (19093)
kafka.schema_registry_url      ARGUS_SCHEMA_REGISTRY_URL    Confluent framing when set
kafka.client                   ARGUS_KAFKA__CLIENT__<KEY>   extra librdkafka settings
kafka.security.protocol        ARGUS_KAFKA_SECURITY_PROTOCOL  PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL
kafka.security.mechanism       ARGUS_KAFKA_SASL_MECHANISM   SCRAM-SHA-512 (default), -256, PLAIN
kafka.security.username        ARGUS_KAFKA_USERNAME         SASL user
(environment only)             ARGUS_KAFKA_PASSWORD         SASL password (never in the file)
kafka.security.password_file   ARGUS_KAFKA_PASSWORD_FILE    file holding the SASL password
kafka.security.ca_file         ARGUS_KAFKA_CA_FILE          PEM CA bundle of the brokers
kafka.security.cert_file       ARGUS_KAFKA_CERT_FILE        client certificate (mutual TLS)
kafka.security.key_file        ARGUS_KAFKA_KEY_FILE         its private key
topics.prefix                  ARGUS_TOPIC_PREFIX           topic name prefix ("argus")
state_dir                      ARGUS_STATE_DIR              broker data, logs, pid (~/.argus)
cache_dir                      ARGUS_CACHE_DIR              Kafka jars (~/.cache/argus-trace)
=============================  ===========================  =================================

Secrets (passwords) come only from the environment or from files; a secret written in the
TOML file is a :class:`ConfigError`. See :mod:`argus.kafka.security` and docs/security.md.

Other sections (``detectors``, ``streams``, ``collectors``, ...) are kept as plain mappings
and read by their components with :meth:`Settings.section`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from argus.kafka.security import KafkaSecurity, file_secrets, parse_security, reveal
from argus.schemas.errors import ArgusError

__all__ = ["ConfigError", "Settings", "load_settings"]


class ConfigError(ArgusError, ValueError):
    """Bad configuration; the message names the key and the source."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Process-wide settings. Build with :func:`load_settings`."""

    bootstrap: str = ""
    kafka_port: int = 19092
    controller_port: int = 19093
    schema_registry_url: str = ""
    client_config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    topic_prefix: str = "argus"
    state_dir: Path = field(default_factory=lambda: Path.home() / ".argus")
    cache_dir: Path = field(default_factory=lambda: Path.home() / ".cache" / "argus-trace")
    sections: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def local_broker(self) -> bool:
        """True when argus runs its own broker (no existing cluster configured)."""
        return not self.bootstrap

    @property
    def bootstrap_servers(self) -> str:
        """The cluster to talk to: the configured one, or the local broker."""
        return self.bootstrap or f"127.0.0.1:{self.kafka_port}"

    def kafka_config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for a confluent-kafka client of this cluster."""
        return {
            "bootstrap.servers": self.bootstrap_servers,
            **self.security.librdkafka(),
            **{k: reveal(v) for k, v in self.client_config.items()},
            **extra,
        }

    def section(self, name: str) -> Mapping[str, Any]:
        """A nested section of the file/env (e.g. ``"detectors"``), empty when absent."""
        value = self.sections.get(name, {})
        if not isinstance(value, Mapping):
            raise ConfigError(f"[{name}] must be a table, got {type(value).__name__}")
        return value


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


_SHORT_ENV = {
    "ARGUS_KAFKA_BOOTSTRAP": ("kafka", "bootstrap"),
    "ARGUS_KAFKA_PORT": ("kafka", "port"),
    "ARGUS_KAFKA_CONTROLLER_PORT": ("kafka", "controller_port"),
    "ARGUS_SCHEMA_REGISTRY_URL": ("kafka", "schema_registry_url"),
    "ARGUS_KAFKA_SECURITY_PROTOCOL": ("kafka", "security", "protocol"),
    "ARGUS_KAFKA_SASL_MECHANISM": ("kafka", "security", "mechanism"),
    "ARGUS_KAFKA_USERNAME": ("kafka", "security", "username"),
    "ARGUS_KAFKA_PASSWORD": ("kafka", "security", "password"),
    "ARGUS_KAFKA_PASSWORD_FILE": ("kafka", "security", "password_file"),
    "ARGUS_KAFKA_CA_FILE": ("kafka", "security", "ca_file"),
    "ARGUS_KAFKA_CERT_FILE": ("kafka", "security", "cert_file"),
    "ARGUS_KAFKA_KEY_FILE": ("kafka", "security", "key_file"),
    "ARGUS_TOPIC_PREFIX": ("topics", "prefix"),
    "ARGUS_STATE_DIR": ("state_dir",),
    "ARGUS_CACHE_DIR": ("cache_dir",),
}


def _env_tree(env: Mapping[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}

    def put(path: tuple[str, ...], value: str) -> None:
        node = tree
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = value

    for key, value in env.items():
        if key in _SHORT_ENV:
            put(_SHORT_ENV[key], value)
        elif key.startswith("ARGUS_") and "__" in key:
            put(tuple(p.lower() for p in key[len("ARGUS_") :].split("__")), value)
    return tree


def _int(value: Any, key: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be an integer, got {value!r}") from None


def load_settings(
    path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Read defaults, the TOML file and the environment into frozen :class:`Settings`.

    Raises
    ------
    ConfigError
        The file is missing (when named explicitly), is not valid TOML, or a value has the
        wrong type.
    """
    env = os.environ if env is None else env
    tree: dict[str, Any] = {}
    cfg_path = path or env.get("ARGUS_CONFIG") or None
    if cfg_path is None and Path("argus.toml").is_file():
        cfg_path = "argus.toml"
    if cfg_path is not None:
        p = Path(cfg_path)
        try:
            tree = tomllib.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {p} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None
        if bad := file_secrets(tree):
            raise ConfigError(
                f"config file {p} holds secret(s) {', '.join(bad)}; put them in the "
                "environment (ARGUS_KAFKA_PASSWORD) or a file (kafka.security.password_file)"
            )
    tree = _merge(tree, _env_tree(env))
    kafka = tree.pop("kafka", {}) or {}
    topics = tree.pop("topics", {}) or {}
    client = kafka.get("client", {}) or {}
    if not isinstance(client, Mapping):
        raise ConfigError("kafka.client must be a table of librdkafka settings")
    security_table = kafka.get("security", {}) or {}
    if not isinstance(security_table, Mapping):
        raise ConfigError("kafka.security must be a table")
    security, client = parse_security(security_table, client)
    kw: dict[str, Any] = {
        "bootstrap": str(kafka.get("bootstrap", "") or ""),
        "kafka_port": _int(kafka.get("port", 19092), "kafka.port"),
        "controller_port": _int(kafka.get("controller_port", 19093), "kafka.controller_port"),
        "schema_registry_url": str(kafka.get("schema_registry_url", "") or ""),
        "client_config": MappingProxyType(client),
        "security": security,
        "topic_prefix": str(topics.get("prefix", "argus")),
        "sections": MappingProxyType(tree),
    }
    if "state_dir" in tree:
        kw["state_dir"] = Path(str(tree.pop("state_dir"))).expanduser()
    if "cache_dir" in tree:
        kw["cache_dir"] = Path(str(tree.pop("cache_dir"))).expanduser()
    if kw["kafka_port"] == kw["controller_port"]:
        raise ConfigError("kafka.port and kafka.controller_port must differ")
    return Settings(**kw)
