"""The summaries layer: how kernel durations are compressed, carried and reconstructed.

Pure (numpy/scipy, no Kafka): below the detectors, above the wire contract.

* :mod:`argus.summaries.kde` - windowed KDE valley clustering: durations (ns) -> clusters of
  ``(count, quantiles)`` per (kernel, stream) group, and its presets (:data:`PAPER`,
  :data:`ROBUST`, :data:`COMPACT` = :data:`DEFAULT`);
* :mod:`argus.summaries.lognormal` - clusters -> log-normal mixtures, quantile matrices on a
  probability grid, Wasserstein-1 (ns);
* :mod:`argus.summaries.quantile_wire` - the ``float32`` and ``log16`` encodings of cluster
  quantiles in ``kernel_summary``;
* :mod:`argus.summaries.summary_record` - ``kernel_batch`` -> ``kernel_summary`` records and
  back to :class:`Summary` per (kernel id, stream), and the consumer's :class:`KernelNames`.

See ``docs/wire.md`` (the records) and ``BENCHMARKS.md`` (speed, bytes, fidelity).
"""

from argus.summaries.kde import (
    COMPACT,
    DEFAULT,
    PAPER,
    ROBUST,
    Cluster,
    KdeConfig,
    ManySummary,
    Rejected,
    Summary,
    SummaryInputError,
    config_for_method,
    summarize,
    summarize_many,
)
from argus.summaries.lognormal import (
    default_probs,
    empirical_quantile_matrix,
    log_quantiles,
    lognormal_params,
    lognormal_w1,
    logq_rows,
    mixture_cdf,
    mixture_quantile,
    mixture_quantile_rows,
    pairwise_w1,
    quantile_matrix,
    w1,
    w1_matrix_to_reference,
    w1_samples,
)
from argus.summaries.quantile_wire import (
    ENCODINGS,
    LOG16_MAX_REL_ERROR,
    LOG16_STEPS_PER_UNIT,
    decode_log16,
    encode_log16,
    median_index,
    through_wire,
)
from argus.summaries.summary_record import (
    BatchError,
    KernelNames,
    SummarizedBatches,
    batch_columns,
    groups_from_summary,
    names_from_summary,
    summarize_batch,
    summarize_batches,
    summary_columns,
)

__all__ = [
    "COMPACT",
    "DEFAULT",
    "ENCODINGS",
    "LOG16_MAX_REL_ERROR",
    "LOG16_STEPS_PER_UNIT",
    "PAPER",
    "ROBUST",
    "BatchError",
    "Cluster",
    "KdeConfig",
    "KernelNames",
    "ManySummary",
    "Rejected",
    "SummarizedBatches",
    "Summary",
    "SummaryInputError",
    "batch_columns",
    "config_for_method",
    "decode_log16",
    "default_probs",
    "empirical_quantile_matrix",
    "encode_log16",
    "groups_from_summary",
    "log_quantiles",
    "lognormal_params",
    "lognormal_w1",
    "logq_rows",
    "median_index",
    "mixture_cdf",
    "mixture_quantile",
    "mixture_quantile_rows",
    "names_from_summary",
    "pairwise_w1",
    "quantile_matrix",
    "summarize",
    "summarize_batch",
    "summarize_batches",
    "summarize_many",
    "summary_columns",
    "through_wire",
    "w1",
    "w1_matrix_to_reference",
    "w1_samples",
]
