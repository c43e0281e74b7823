"""Progressive diagnosis (paper §6): pure L1/L2/L3 detectors, findings, the funnel.

* :mod:`argus.detectors.l1` - iteration-time spikes (jitter) and change points (regression);
* :mod:`argus.detectors.l2` - straggler ranks and the bottleneck phase per comparison group;
* :mod:`argus.detectors.l3` - W1 over quantile matrices, IQR fence, group-vs-group;
* :mod:`argus.detectors.l3_window` - L3 over one window of kernel summaries;
* :mod:`argus.detectors.inputs` - step records -> detector arrays;
* :mod:`argus.detectors.findings` - findings and their ``anomaly`` records;
* :mod:`argus.detectors.funnel` - culprits, persistence, confidence, ``alert`` records;
* :mod:`argus.detectors.config` - frozen thresholds, overridable from ``[detectors]``.

The phase -> comparison-group table they group ranks by is :mod:`argus.routing`, a layer
below (the collectors name their groups with it too). See ``docs/detectors.md``.
"""

from argus.detectors.config import DetectorsConfig, FunnelConfig, L1Config, L2Config, L3Config
from argus.detectors.findings import Finding, anomaly_key, finding_id, to_anomaly
from argus.errors import DetectorConfigError, DetectorInputError

__all__ = [
    "DetectorConfigError",
    "DetectorInputError",
    "DetectorsConfig",
    "Finding",
    "FunnelConfig",
    "L1Config",
    "L2Config",
    "L3Config",
    "anomaly_key",
    "finding_id",
    "to_anomaly",
]
