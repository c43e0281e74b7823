"""Configuration: one loader, one type conversion, one boolean parser, frozen once loaded.

Sources, later ones win:

1. defaults: the fields of each section's frozen dataclass;
2. a TOML file: ``--config PATH``, else ``$ARGUS_CONFIG``, else ``./argus.toml`` if present;
3. environment: ``ARGUS_<SECTION>__<KEY>`` for any key, nested with ``__`` (e.g.
   ``ARGUS_DETECTORS__L2__Z=3``), then the short names below, which win over the long form.

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
collectors.job                 ARGUS_JOB                    the training job's name
(environment only)             ARGUS_PAGERDUTY_ROUTING_KEY  PagerDuty routing key
pagerduty.routing_key_file     ARGUS_PAGERDUTY_ROUTING_KEY_FILE  file holding it
=============================  ===========================  =================================

The other sections are the frozen dataclasses of their components, named in
:data:`SECTIONS` (``[streams]``: :class:`~argus.streams.pipeline_config.PipelineConfig`,
``[detectors]``: :class:`~argus.detectors.config.DetectorsConfig`, ``[collectors]``:
:class:`~argus.collectors.config.CollectorConfig`, ``[pagerduty]``:
:class:`~argus.sinks.pagerduty.config.PagerDutySettings`). Every one of them is built by
:func:`build_config`, which converts strings from the environment by the field's type (booleans
by :func:`parse_bool`), rejects an unknown key naming it, its section, where it came from (the
environment variable, or the file) and the known keys, and validates the values (the
dataclass's ``__post_init__``; numeric ranges through :func:`check_ranges`, one message for
every section: ``<section>.<key> must be <range>, got <value>``). :func:`load_settings` builds
every section the file or the environment sets, so a bad value fails at load time, in ``argus config show`` as in a worker.

Lenient mode (``load_settings(lenient=True)``, used inside training processes by
:mod:`argus.collectors`): a value that does not convert or validate, or an unknown key, is
logged and left out (its default applies) instead of raising; the collectors never stop a
training job over configuration.

Secrets (passwords, the PagerDuty routing key) come only from the environment or from files;
a secret written in the TOML file is a :class:`ConfigError`. See :mod:`argus.kafka.security`
and docs/security.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from argus.errors import ConfigError
from argus.kafka.security import (
    REDACTED,
    KafkaSecurity,
    Secret,
    file_secrets,
    is_sensitive,
    parse_security,
    reveal,
)

__all__ = [
    "NON_NEGATIVE",
    "POSITIVE",
    "SECTIONS",
    "ConfigError",
    "Range",
    "Settings",
    "build_config",
    "check_ranges",
    "effective",
    "load_settings",
    "parse_bool",
]

log = logging.getLogger("argus.config")


#: ``[section]`` -> ``"module:Class"``, the frozen dataclass of that section. Imported when a
#: file or the environment sets the section (and by ``argus config show``), so this module
#: imports nothing above it.
SECTIONS: Mapping[str, str] = MappingProxyType(
    {
        "collectors": "argus.collectors.config:CollectorConfig",
        "detectors": "argus.detectors.config:DetectorsConfig",
        "pagerduty": "argus.sinks.pagerduty.config:PagerDutySettings",
        "streams": "argus.streams.pipeline_config:PipelineConfig",
    }
)


# -- values -----------------------------------------------------------------------------------
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def parse_bool(value: Any, key: str) -> bool:
    """The one boolean parser: ``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case).

    Raises
    ------
    ConfigError
        Anything else, naming ``key``.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        s = value.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    raise ConfigError(f"{key} must be a boolean (true/false, 1/0, yes/no, on/off), got {value!r}")


@dataclass(frozen=True)
class Range:
    """An interval of allowed values: ``gt``/``ge`` below, ``lt``/``le`` above (None: open).

    ``str`` gives it as a message writes it: ``> 0``, ``>= 1``, ``in (0, 1)``, ``in [1, 255]``.
    NaN lies in no bounded range.
    """

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def __contains__(self, value: Any) -> bool:
        return (
            (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.lt is None or value < self.lt)
            and (self.le is None or value <= self.le)
        )

    def __str__(self) -> str:
        low = [f"{op} {v}" for op, v in ((">", self.gt), (">=", self.ge)) if v is not None]
        high = [f"{op} {v}" for op, v in (("<", self.lt), ("<=", self.le)) if v is not None]
        if low and high:
            lo = f"({self.gt}" if self.gt is not None else f"[{self.ge}"
            hi = f"{self.lt})" if self.lt is not None else f"{self.le}]"
            return f"in {lo}, {hi}"
        return " and ".join(low + high) or "any value"


#: the two ranges most fields have
POSITIVE = Range(gt=0)
NON_NEGATIVE = Range(ge=0)


def check_ranges(
    obj: Any,
    section: str,
    ranges: Mapping[str, Range],
    *,
    error: type[ConfigError] = ConfigError,
) -> None:
    """The one range check of the config dataclasses (call it in ``__post_init__``).

    Parameters
    ----------
    obj : dataclass instance
        Whose attributes to check.
    section : str
        Dotted name of its table (``"collectors"``, ``"kde"``), for the message.
    ranges : mapping
        ``{attribute name: Range}``, checked in this order.
    error : ConfigError subclass
        What to raise.

    Raises
    ------
    ConfigError
        (``error``) for the first attribute outside its range:
        ``"<section>.<name> must be <range>, got <value>"``.
    """
    for name, allowed in ranges.items():
        value = getattr(obj, name)
        if value not in allowed:
            raise error(f"{section}.{name} must be {allowed}, got {value!r}")


def _from(origins: Mapping[str, str], path: str) -> str:
    """`` (from env ARGUS_X)`` for the source of ``path`` or of a key below it; else empty."""
    if path in origins:
        return f" (from {origins[path]})"
    below = sorted(v for k, v in origins.items() if k.startswith(path + "."))
    return f" (from {below[0]})" if below else ""


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", Path: "a path"}


def _type_name(hint: Any) -> str:
    return _TYPE_NAMES.get(hint) or getattr(hint, "__name__", None) or str(hint)


def _convert(value: Any, hint: Any, key: str) -> Any:
    """``value`` (a TOML value, or a string from the environment) as type ``hint``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and (value is None or value == ""):
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _convert(value, rest[0], key)
        raise ConfigError(f"{key}: unsupported setting type {hint}")  # not used by any section
    if hint is bool:
        return parse_bool(value, key)
    bad = ConfigError(f"{key} must be {_type_name(hint)}, got {value!r}")
    if hint is int:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            if value.is_integer():
                return int(value)
            raise bad
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise bad from None
        raise bad
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise bad
        try:
            return float(value)
        except ValueError:
            raise bad from None
    if hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise bad
    if hint is Path:
        if isinstance(value, str | Path):
            return Path(value).expanduser()
        raise bad
    if hint is Secret:
        if isinstance(value, Secret):
            return value
        if isinstance(value, str):
            return Secret(value)
        raise bad
    if origin is tuple:
        items = (
            [x.strip() for x in value.split(",") if x.strip()] if isinstance(value, str) else value
        )
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{key} must be a list (or comma-separated), got {value!r}")
        elem = args[0] if args else Any
        return tuple(_convert(x, elem, f"{key}[{i}]") for i, x in enumerate(items))
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key} must be a table, got {value!r}")
        vt = args[1] if len(args) == 2 else Any
        return {str(k): _convert(v, vt, f"{key}.{k}") for k, v in value.items()}
    raise ConfigError(f"{key}: unsupported setting type {hint}")  # a programming error


_FIELDS: dict[type, dict[str, tuple[Any, Any]]] = {}


def _fields(cls: type) -> dict[str, tuple[Any, Any]]:
    """``{field: (type hint, default)}`` of a config dataclass (init fields only)."""
    if cls in _FIELDS:
        return _FIELDS[cls]
    hints = typing.get_type_hints(cls)
    out: dict[str, tuple[Any, Any]] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out[f.name] = (hints[f.name], default)
    _FIELDS[cls] = out
    return out


def _is_section_class(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _is_secret(hint: Any) -> bool:
    return hint is Secret or Secret in typing.get_args(hint)


_C = TypeVar("_C")


def build_config(
    cls: type[_C],
    values: Any,
    *,
    section: str,
    origins: Mapping[str, str] | None = None,
    base: _C | None = None,
    error: type[ConfigError] = ConfigError,
    lenient: bool = False,
) -> _C:
    """Build the frozen config dataclass ``cls`` from a table of settings.

    Parameters
    ----------
    cls : dataclass type
        The section's dataclass; a field whose type is itself a dataclass is a sub-table.
    values : mapping or None
        Keys of the table: TOML values, or strings from the environment, converted by the
        field's type (:func:`parse_bool` for booleans; comma-separated strings for tuples).
    section : str
        Dotted name of the table (``"streams"``, ``"detectors.l2"``), for messages.
    origins : mapping, optional
        ``{dotted key: source}`` (``"env ARGUS_STREAMS__X"``, ``"file argus.toml"``), named in
        messages.
    base : instance of cls, optional
        Values not in ``values`` come from it (else from the field defaults).
    error : ConfigError subclass
        What to raise (``DetectorConfigError``, ``CollectorConfigError``).
    lenient : bool
        Log a bad value or unknown key and leave it out, instead of raising.

    Raises
    ------
    ConfigError
        (``error``) ``values`` is not a table, a key is unknown (named with its section, its
        source and the known keys), a value does not convert, a secret comes from the file, or
        the dataclass rejects the values (its message, with the source of the key at fault).
    """
    obj, _ = _build(cls, values, section, origins or {}, base, error, lenient)
    return obj


def _make(cls: type[_C], base: _C | None, kw: Mapping[str, Any]) -> _C:
    if base is not None:
        return dataclasses.replace(base, **kw)  # type: ignore[type-var]
    return cls(**kw)


def _skip(exc: Exception, default: Any) -> None:
    shown = "" if default is dataclasses.MISSING else f"; using {_show(default)!r}"
    log.warning("argus config: %s; ignored%s", exc, shown)


def _build(
    cls: type[_C],
    values: Any,
    where: str,
    origins: Mapping[str, str],
    base: _C | None,
    error: type[ConfigError],
    lenient: bool,
) -> tuple[_C, dict[str, Any]]:
    """:func:`build_config`, also returning the accepted part of ``values`` (lenient mode)."""
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        exc = error(f"{where} must be a table, got {values!r}{_from(origins, where)}")
        if not lenient:
            raise exc
        _skip(exc, dataclasses.MISSING)
        values = {}
    spec = _fields(cls)
    kw: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for key, raw in values.items():
        path = f"{where}.{key}" if where else key
        try:
            if key not in spec:
                raise error(
                    f"unknown key {key!r} in [{where}]{_from(origins, path)}; "
                    f"known: {', '.join(sorted(spec))}"
                )
            hint, default = spec[key]
            current = getattr(base, key) if base is not None else default
            if _is_section_class(hint):
                kw[key], kept[key] = _build(hint, raw, path, origins, current, error, lenient)
                continue
            if _is_secret(hint) and origins.get(path, "").startswith("file"):
                raise error(
                    f"{path} is a secret and may not be written in the config file"
                    f"{_from(origins, path)}; set it in the environment "
                    f"(ARGUS_{path.upper().replace('.', '__')}) or name a file holding it"
                )
            try:
                value = _convert(raw, hint, path)
            except ConfigError as exc:
                raise error(f"{exc}{_from(origins, path)}") from None
            if isinstance(value, dict) and isinstance(current, Mapping):
                spelled = {str(k).lower(): k for k in current}  # env names are lower case
                value = {**current, **{spelled.get(k.lower(), k): v for k, v in value.items()}}
            kw[key] = value
            kept[key] = raw
        except ConfigError as exc:
            if not lenient:
                raise
            _skip(exc, getattr(base, key, spec.get(key, (None, dataclasses.MISSING))[1]))
    try:
        return _make(cls, base, kw), kept
    except (TypeError, ValueError) as first:
        good: dict[str, Any] = {}
        for key in list(kw):  # the first key whose value the dataclass rejects
            try:
                _make(cls, base, {**good, key: kw[key]})
                good[key] = kw[key]
                continue
            except (TypeError, ValueError) as exc:
                text = str(exc)
                msg = text if where in text else f"{where}: {text}"
                bad = error(f"{msg}{_from(origins, f'{where}.{key}' if where else key)}")
            if not lenient:
                raise bad from None
            kept.pop(key, None)
            _skip(bad, getattr(base, key, spec[key][1]))
        if not lenient or len(good) == len(kw):
            raise error(f"{where}: {first}") from None
        return _make(cls, base, good), kept


# -- the file and the environment -------------------------------------------------------------
_PORT = Range(ge=1, le=65535)


@dataclass(frozen=True, kw_only=True)
class KafkaSection:
    """``[kafka]``: the cluster. ``client``: extra librdkafka settings; ``security``: read
    by :func:`argus.kafka.security.parse_security`."""

    bootstrap: str = ""
    port: int = 19092
    controller_port: int = 19093
    schema_registry_url: str = ""
    client: Mapping[str, Any] = field(default_factory=dict)
    security: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_ranges(self, "kafka", dict.fromkeys(("port", "controller_port"), _PORT))
        if self.port == self.controller_port:
            raise ConfigError("kafka.port and kafka.controller_port must differ")


@dataclass(frozen=True, kw_only=True)
class _SecurityTable:
    """The keys of ``[kafka.security]`` (:data:`argus.kafka.security.SECURITY_KEYS`), checked
    here; :func:`~argus.kafka.security.parse_security` reads them."""

    protocol: str = ""
    mechanism: str = ""
    username: str = ""
    password: Secret | None = None
    password_file: str = ""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    key_password: Secret | None = None
    key_password_file: str = ""
    check_hostname: bool = True


@dataclass(frozen=True, kw_only=True)
class TopicsSection:
    """``[topics]``: ``prefix`` of every topic name; empty: unprefixed names."""

    prefix: str = "argus"


def _state_dir() -> Path:
    return Path.home() / ".argus"


def _cache_dir() -> Path:
    return Path.home() / ".cache" / "argus-trace"


@dataclass(frozen=True, kw_only=True)
class _Dirs:
    state_dir: Path = field(default_factory=_state_dir)
    cache_dir: Path = field(default_factory=_cache_dir)


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
    "ARGUS_JOB": ("collectors", "job"),
    "ARGUS_PAGERDUTY_ROUTING_KEY": ("pagerduty", "routing_key"),
    "ARGUS_PAGERDUTY_ROUTING_KEY_FILE": ("pagerduty", "routing_key_file"),
}

_ROOT_KEYS = ("kafka", "topics", "state_dir", "cache_dir")


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def _leaves(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(_leaves(v, path + "."))
        else:
            out[path] = v
    return out


def _env_tree(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The environment's settings as a tree, and ``{dotted key: "env VAR"}``."""
    tree: dict[str, Any] = {}
    origins: dict[str, str] = {}

    def put(path: tuple[str, ...], value: str, var: str) -> None:
        node = tree
        for p in path[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                nxt = node[p] = {}
            node = nxt
        node[path[-1]] = value
        origins[".".join(path)] = f"env {var}"

    generic = sorted(k for k in env if k.startswith("ARGUS_") and "__" in k)
    for key in generic:  # long form first: the short names win
        put(tuple(p.lower() for p in key[len("ARGUS_") :].split("__")), env[key], key)
    for key in sorted(_SHORT_ENV):
        if key in env:
            put(_SHORT_ENV[key], env[key], key)
    return tree, origins


def section_class(name: str) -> type:
    """The dataclass of ``[name]`` (:data:`SECTIONS`), imported on first use."""
    module, _, qual = SECTIONS[name].partition(":")
    cls: type = getattr(importlib.import_module(module), qual)
    return cls


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Process-wide settings. Build with :func:`load_settings`.

    ``sections`` holds the component sections (``streams``, ``detectors``, ``collectors``,
    ``pagerduty``) as tables, each already validated by building its dataclass; ``origins``
    says where each key set came from (``{dotted key: "env VAR" | "file PATH"}``).
    """

    bootstrap: str = KafkaSection.bootstrap  # the defaults: the sections'
    kafka_port: int = KafkaSection.port
    controller_port: int = KafkaSection.controller_port
    schema_registry_url: str = KafkaSection.schema_registry_url
    client_config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    security: KafkaSecurity = field(default_factory=KafkaSecurity)
    topic_prefix: str = TopicsSection.prefix
    state_dir: Path = field(default_factory=_state_dir)
    cache_dir: Path = field(default_factory=_cache_dir)
    sections: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    origins: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    config_file: Path | None = None

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
        """A component section's table (e.g. ``"detectors"``), empty when absent; build its
        dataclass with :func:`build_config` (the components' ``from_settings``)."""
        value = self.sections.get(name, {})
        if not isinstance(value, Mapping):
            raise ConfigError(f"[{name}] must be a table, got {type(value).__name__}")
        return value


def load_settings(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    lenient: bool = False,
) -> Settings:
    """Read defaults, the TOML file and the environment into frozen, validated :class:`Settings`.

    Parameters
    ----------
    path : path, optional
        The TOML file; else ``$ARGUS_CONFIG``, else ``./argus.toml`` when present.
    env : mapping, optional
        The environment (``os.environ``).
    lenient : bool
        Log and leave out bad values and unknown keys (training processes) instead of raising;
        the file's syntax, secrets and the Kafka security settings still raise.

    Raises
    ------
    ConfigError
        The file is missing (when named explicitly) or not valid TOML; a section, key or
        ``ARGUS_<SECTION>__<KEY>`` variable is unknown; a value has the wrong type or range
        (the message names the key and its source).
    """
    env = os.environ if env is None else env
    tree: dict[str, Any] = {}
    cfg_path = path or env.get("ARGUS_CONFIG") or None
    if cfg_path is None and Path("argus.toml").is_file():
        cfg_path = "argus.toml"
    file: Path | None = None
    if cfg_path is not None:
        file = Path(cfg_path)
        try:
            tree = tomllib.loads(file.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {file} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {file} is not valid TOML: {exc}") from None
        if bad := file_secrets(tree):
            raise ConfigError(
                f"config file {file} holds secret(s) {', '.join(bad)}; put them in the "
                "environment (ARGUS_KAFKA_PASSWORD) or a file (kafka.security.password_file)"
            )
    origins = {k: f"file {file}" for k in _leaves(tree)}
    env_tree, env_origins = _env_tree(env)
    origins.update(env_origins)
    tree = _merge(tree, env_tree)

    known = sorted({*_ROOT_KEYS, *SECTIONS})
    for name in list(tree):
        if name not in known:
            err = ConfigError(
                f"unknown section {name!r}{_from(origins, name)}; known: {', '.join(known)}"
            )
            if not lenient:
                raise err
            _skip(err, dataclasses.MISSING)
            del tree[name]

    kafka, _ = _build(KafkaSection, tree.get("kafka"), "kafka", origins, None, ConfigError, lenient)
    topics, _ = _build(
        TopicsSection, tree.get("topics"), "topics", origins, None, ConfigError, lenient
    )
    dirs, _ = _build(
        _Dirs,
        {k: tree[k] for k in ("state_dir", "cache_dir") if k in tree},
        "",
        origins,
        None,
        ConfigError,
        lenient,
    )
    _, security_table = _build(  # types and unknown keys named with their source
        _SecurityTable, kafka.security, "kafka.security", origins, None, ConfigError, lenient
    )
    security, client = parse_security(security_table, kafka.client)

    sections: dict[str, Any] = {}
    for name in SECTIONS:
        if name not in tree:
            continue
        _, accepted = _build(
            section_class(name), tree[name], name, origins, None, ConfigError, lenient
        )
        sections[name] = tree[name] if not lenient else accepted
    return Settings(
        bootstrap=kafka.bootstrap,
        kafka_port=kafka.port,
        controller_port=kafka.controller_port,
        schema_registry_url=kafka.schema_registry_url,
        client_config=MappingProxyType(client),
        security=security,
        topic_prefix=topics.prefix,
        state_dir=dirs.state_dir,
        cache_dir=dirs.cache_dir,
        sections=MappingProxyType(sections),
        origins=MappingProxyType(origins),
        config_file=file,
    )


# -- what is in effect ------------------------------------------------------------------------
def _show(value: Any, key: str = "") -> Any:
    """A JSON-able form of a setting's value, secrets as ``********``."""
    if isinstance(value, Secret) or (key and is_sensitive(key) and not key.endswith("_file")):
        return REDACTED if value else ""
    if isinstance(value, Mapping):
        return {str(k): _show(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_show(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _source(origins: Mapping[str, str], *paths: str) -> str:
    """``default``, ``file`` or ``env VAR`` (several joined by ``, ``) of the first of
    ``paths`` set, or of keys below it."""
    for path in paths:
        found = sorted(
            {
                "file" if v.startswith("file") else v
                for k, v in origins.items()
                if k == path or k.startswith(path + ".")
            }
        )
        if found:
            return ", ".join(found)
    return "default"


def _walk(obj: Any, prefix: str, origins: Mapping[str, str]) -> list[tuple[str, Any, str]]:
    out: list[tuple[str, Any, str]] = []
    for name in _fields(type(obj)):
        value = getattr(obj, name)
        path = f"{prefix}.{name}"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += _walk(value, path, origins)
        else:
            out.append((path, _show(value, name), _source(origins, path)))
    return out


def effective(settings: Settings) -> list[tuple[str, Any, str]]:
    """Every setting in effect as ``(dotted key, value, source)``; secrets as ``********``.

    ``source`` is ``default``, ``file`` or ``env VAR``. Each component section is built as
    its component builds it, so a value a worker would reject raises the same
    :class:`ConfigError` here.
    """
    o = settings.origins
    out: list[tuple[str, Any, str]] = [
        ("kafka.bootstrap", settings.bootstrap, _source(o, "kafka.bootstrap")),
        ("kafka.port", settings.kafka_port, _source(o, "kafka.port")),
        ("kafka.controller_port", settings.controller_port, _source(o, "kafka.controller_port")),
        (
            "kafka.schema_registry_url",
            settings.schema_registry_url,
            _source(o, "kafka.schema_registry_url"),
        ),
    ]
    from argus.kafka.security import CLIENT_KEYS

    for name, value in settings.security.describe().items():
        aliases = [k for k, v in CLIENT_KEYS.items() if v == name]
        paths = [f"kafka.security.{name}", f"kafka.security.{name}_file"]
        paths += [f"kafka.client.{a}" for a in aliases]
        paths += [f"kafka.client.{a.replace('.', '_')}" for a in aliases]
        out.append((f"kafka.security.{name}", value, _source(o, *paths)))
    for key, value in sorted(settings.client_config.items()):
        src = _source(o, f"kafka.client.{key}", f"kafka.client.{key.replace('.', '_')}")
        out.append((f"kafka.client.{key}", _show(value, key), src))
    out += [
        ("topics.prefix", settings.topic_prefix, _source(o, "topics.prefix")),
        ("state_dir", str(settings.state_dir), _source(o, "state_dir")),
        ("cache_dir", str(settings.cache_dir), _source(o, "cache_dir")),
    ]
    for name in sorted(SECTIONS):
        obj: Any = build_config(
            section_class(name), settings.section(name), section=name, origins=o
        )
        out += _walk(obj, name, o)
    return out
