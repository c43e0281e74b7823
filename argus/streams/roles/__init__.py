"""The engine's roles: the window and judging logic of every stateful worker role.

Pure and typed: no faust, no Kafka. Three drivers run them: the faust agents
(:mod:`argus.streams.agents`), the in-memory driver (:mod:`argus.streams.memory`) behind
``argus diagnose`` and ``argus replay``, and tests. Windows close on event time
(:mod:`argus.streams.windows`; docs/pipeline.md, "Time model").
"""

from argus.streams.roles.context import RoleContext, emit_findings, remember
from argus.streams.roles.funnel import Funnel, finding_from_anomaly
from argus.streams.roles.l3 import L3Windows, route_summary
from argus.streams.roles.steps import JobSteps, StepBlocks, missing_finding, route_step

__all__ = [
    "Funnel",
    "JobSteps",
    "L3Windows",
    "RoleContext",
    "StepBlocks",
    "emit_findings",
    "finding_from_anomaly",
    "missing_finding",
    "remember",
    "route_step",
    "route_summary",
]
