"""Collector configuration: arguments > environment > file > defaults, validated once.

Sources (later ones win):

1. the defaults below;
2. the ``[collectors]`` table of the argus TOML file (see :mod:`argus.config`);
3. environment: ``ARGUS_COLLECTORS__<KEY>`` for any key (e.g.
   ``ARGUS_COLLECTORS__KERNELS_PERIOD_STEPS=100``), plus the short ``ARGUS_JOB``;
4. keyword arguments of :func:`argus.collectors.start`.

All of them go through :func:`argus.config.build_config`. Inside a training process the file
and the environment are read leniently: a value that does not convert or validate, or an
unknown key, is logged (logger ``argus.config``) and its default applies, so configuration
never stops a training job. Arguments of :func:`~argus.collectors.start` are code and raise
:class:`CollectorConfigError`; so does a missing or malformed job name, which has no default.

==========================  =========  ==========================================================
key                         default    meaning
==========================  =========  ==========================================================
job                         (none)     job name; required (``ARGUS_JOB``)
phases                      true       phase channel (step records)
kernels                     true       kernel channel (CUPTI / Kineto / CPU ops)
stacks                      true       register this process for the ``argus collect stacks`` sidecar
kernels_backend             auto       auto | cupti | kineto | cpu_ops
kernels_period_steps        50         one kernel window every N steps (duty cycle = active/period)
kernels_active_steps        1          steps per kernel window
kernels_max_events          200000     events kept per window; the rest are counted as dropped
overhead_budget             0.01       fraction of step time the collectors may spend (1%)
max_queue_records           10000      producer queue bound, records
max_queue_bytes             33554432   producer queue bound, bytes (32 MiB)
message_timeout_ms          30000      give up on (and count) a record the broker did not take
delivery_interval_ms        1000       the delivery thread hands queued records to Kafka this often
control                     true       follow runtime commands on the control topic
publish_topology            true       publish the job layout to the jobs topic at start
stacks_rate_hz              1.0        sidecar: py-spy dumps per second per process
stacks_window_s             10.0       sidecar: window of one stack_batch record, seconds
stacks_drill_rate_hz        10.0       sidecar: rate during a drill-down
==========================  =========  ==========================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from argus.collectors.errors import CollectorConfigError
from argus.config import (
    POSITIVE,
    ConfigError,
    Range,
    Settings,
    build_config,
    check_ranges,
    load_settings,
)

__all__ = ["KERNEL_BACKENDS", "CollectorConfig", "load_collector_config"]

KERNEL_BACKENDS = ("auto", "cupti", "kineto", "cpu_ops")

_POSITIVE = (
    "kernels_period_steps",
    "kernels_active_steps",
    "kernels_max_events",
    "max_queue_records",
    "max_queue_bytes",
    "message_timeout_ms",
    "delivery_interval_ms",
    "stacks_rate_hz",
    "stacks_window_s",
    "stacks_drill_rate_hz",
)
#: overhead_budget: a fraction of step time
_RANGES = {**dict.fromkeys(_POSITIVE, POSITIVE), "overhead_budget": Range(gt=0, lt=1)}


@dataclass(frozen=True, kw_only=True)
class CollectorConfig:
    """Frozen collector settings; build with :func:`load_collector_config`.

    Values are checked on construction; :meth:`validate` also requires the job name (the
    ``[collectors]`` section is valid without one: it may come from ``start()``).
    """

    job: str = ""
    phases: bool = True
    kernels: bool = True
    stacks: bool = True
    kernels_backend: str = "auto"
    kernels_period_steps: int = 50
    kernels_active_steps: int = 1
    kernels_max_events: int = 200_000
    overhead_budget: float = 0.01
    max_queue_records: int = 10_000
    max_queue_bytes: int = 32 * 1024 * 1024
    message_timeout_ms: int = 30_000
    delivery_interval_ms: int = 1000
    control: bool = True
    publish_topology: bool = True
    stacks_rate_hz: float = 1.0
    stacks_window_s: float = 10.0
    stacks_drill_rate_hz: float = 10.0

    @property
    def kernels_duty_cycle(self) -> float:
        """Fraction of steps that run inside a kernel window (0..1]."""
        return self.kernels_active_steps / self.kernels_period_steps

    def __post_init__(self) -> None:
        if "/" in self.job:
            raise CollectorConfigError(
                f"collectors.job must be a non-empty name without '/', got {self.job!r} "
                "(pass job=... to start() or set ARGUS_JOB)"
            )
        if self.kernels_backend not in KERNEL_BACKENDS:
            raise CollectorConfigError(
                f"collectors.kernels_backend must be one of {', '.join(KERNEL_BACKENDS)}, "
                f"got {self.kernels_backend!r}"
            )
        check_ranges(self, "collectors", _RANGES, error=CollectorConfigError)
        if self.kernels_active_steps > self.kernels_period_steps:
            raise CollectorConfigError(
                "collectors.kernels_active_steps must be <= kernels_period_steps, got "
                f"{self.kernels_active_steps} > {self.kernels_period_steps}"
            )

    def validate(self) -> CollectorConfig:
        """Return self, or raise :class:`CollectorConfigError` when the job is not set."""
        if not self.job:
            raise CollectorConfigError(
                "collectors.job is not set: pass job=... to argus.collectors.start() or set "
                "ARGUS_JOB"
            )
        return self


def load_collector_config(
    settings: Settings | None = None,
    env: Mapping[str, str] | None = None,
    **overrides: Any,
) -> CollectorConfig:
    """Merge file, environment and keyword overrides into a validated :class:`CollectorConfig`.

    Parameters
    ----------
    settings : Settings, optional
        Loaded argus settings (its ``[collectors]`` section holds file, ``ARGUS_COLLECTORS__*``
        and ``ARGUS_JOB`` values); loaded leniently from the environment when omitted.
    env : mapping, optional
        Environment (defaults to ``os.environ``), read for ``ARGUS_JOB`` (which wins over
        ``settings``, when those were loaded from another environment).
    **overrides
        Keyword arguments from :func:`argus.collectors.start`; ``None`` values are ignored.

    Returns
    -------
    CollectorConfig
        File and environment values that do not convert or validate are logged and replaced
        by their defaults.

    Raises
    ------
    CollectorConfigError
        No job name, a malformed one, or a bad keyword argument (unknown, wrong type or
        invalid); the message names the key and where it came from.
    """
    env = os.environ if env is None else env
    try:
        settings = settings if settings is not None else load_settings(env=env, lenient=True)
    except CollectorConfigError:
        raise
    except ConfigError as exc:
        raise CollectorConfigError(str(exc)) from None
    cfg = build_config(
        CollectorConfig,
        settings.section("collectors"),
        section="collectors",
        origins=settings.origins,
        error=CollectorConfigError,
        lenient=True,
    )
    strict = (
        ({"job": env["ARGUS_JOB"]} if env.get("ARGUS_JOB") else {}, "env ARGUS_JOB"),
        ({k: v for k, v in overrides.items() if v is not None}, "a start() argument"),
    )
    for values, source in strict:
        cfg = build_config(
            CollectorConfig,
            values,
            section="collectors",
            origins={f"collectors.{k}": source for k in values},
            base=cfg,
            error=CollectorConfigError,
        )
    return cfg.validate()


def with_changes(cfg: CollectorConfig, **changes: Any) -> CollectorConfig:
    """A validated copy of ``cfg`` with ``changes`` applied."""
    return replace(cfg, **changes).validate()
