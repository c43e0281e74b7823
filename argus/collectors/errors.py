"""Typed errors of the collectors.

Only :class:`CollectorConfigError` ever reaches user code, and only from
:func:`argus.collectors.start`: a bad configuration is reported once, at start, never
mid-run. Everything that goes wrong later is caught, counted and logged.
"""

from __future__ import annotations

from argus.config import ConfigError

__all__ = ["CollectorConfigError"]


class CollectorConfigError(ConfigError):
    """The collector configuration is invalid; the message names the key and its source."""
