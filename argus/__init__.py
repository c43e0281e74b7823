"""argus-trace: always-on fail-slow diagnosis for large LLM training jobs.

Subpackages: :mod:`argus.collectors` (inside training ranks), :mod:`argus.schemas` (the wire
contract), :mod:`argus.summaries` (KDE compression, log-normal reconstruction),
:mod:`argus.detectors` (L1-L3, funnel), :mod:`argus.streams` (the engine's roles and their
faust and in-memory drivers), :mod:`argus.sinks` (PagerDuty). The layers and the direction of
imports are in README.md ("Layout"). This module imports nothing.
"""

__version__ = "0.1.0"
