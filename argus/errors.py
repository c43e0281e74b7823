"""Typed errors shared across layers: the root, configuration, detector input, the wire's.

The bottom layer (README.md, "Layout"): it imports nothing, so every module can raise these,
:mod:`argus.config` and :mod:`argus.routing` included. Errors of one component only live with
it and derive from :class:`ArgusError` too (``BatchError``, ``SummaryInputError``, ...).
"""

from __future__ import annotations

__all__ = [
    "ArgusError",
    "ConfigError",
    "DecodeError",
    "DetectorConfigError",
    "DetectorInputError",
    "EncodeError",
    "SchemaNotFound",
]


class ArgusError(Exception):
    """Root of every error argus raises on purpose."""


class ConfigError(ArgusError, ValueError):
    """Bad configuration; the message names the key and the source."""


class DetectorInputError(ArgusError, ValueError):
    """Detector input of the wrong shape, type or content; the message names what and how to fix."""


class DetectorConfigError(ConfigError):
    """A detector setting is unknown or out of range; the message names the key (a
    :class:`ConfigError`, as every configuration error)."""


class DecodeError(ArgusError, ValueError):
    """A value on the wire could not be decoded.

    ``reason`` is a short machine-readable code (``empty``, ``bad-magic``, ``truncated``,
    ``unknown-fingerprint``, ``unknown-schema-id``, ``bad-body``, ``wrong-record``) and the
    message says what was wrong in words; DLQ records carry both.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


class EncodeError(ArgusError, ValueError):
    """A record does not match its schema; the message names the record and the field."""


class SchemaNotFound(ArgusError, KeyError):
    """No schema of that name ships with argus."""
