"""Typed errors of the detectors."""

from __future__ import annotations

from argus.config import ConfigError
from argus.errors import ArgusError

__all__ = ["DetectorConfigError", "DetectorInputError"]


class DetectorInputError(ArgusError, ValueError):
    """Detector input of the wrong shape, type or content; the message names what and how to fix."""


class DetectorConfigError(ConfigError):
    """A detector setting is unknown or out of range; the message names the key (a
    :class:`~argus.config.ConfigError`, as every configuration error)."""
