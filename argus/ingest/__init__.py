"""``argus ingest``: PyTorch profiler (Kineto) traces -> argus step records and kernel batches.

* :mod:`argus.ingest.kineto` - one trace file -> :class:`~argus.ingest.kineto.RankTrace`
  (steps, phases, kernels), or a :class:`~argus.ingest.kineto.TraceError` naming the file;
* :mod:`argus.ingest.assemble` - a directory of files -> ranks, world, aligned clocks and the
  ``(topic suffix, key, record)`` stream that ``argus.sim``'s writer and publisher take.

Pure: no Kafka import. ``docs/integrations.md`` ("argus ingest") documents what is read.
"""

from argus.ingest.assemble import IngestOptions, IngestResult, Skipped, find_traces, ingest
from argus.ingest.kineto import RankTrace, TraceError, read_kineto

__all__ = [
    "IngestOptions",
    "IngestResult",
    "RankTrace",
    "Skipped",
    "TraceError",
    "find_traces",
    "ingest",
    "read_kineto",
]
