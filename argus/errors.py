"""Typed errors: the root of every error argus raises on purpose, and the wire contract's.

The bottom layer (README.md, "Layout"): it imports nothing, so every module can raise these,
:mod:`argus.config` included. Each component's own errors derive from :class:`ArgusError`
(``ConfigError``, ``DetectorInputError``, ``BatchError``, ...).
"""

from __future__ import annotations


class ArgusError(Exception):
    """Root of every error argus raises on purpose."""


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
