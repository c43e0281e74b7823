"""argus-trace: always-on fail-slow diagnosis for large LLM training jobs.

Subpackages: :mod:`argus.collectors` (inside training ranks), :mod:`argus.schemas` (the wire
contract), :mod:`argus.streams` (compression core and stream agents), :mod:`argus.detectors`
(L1-L3, funnel, alert sinks).
"""

__version__ = "0.1.0"
