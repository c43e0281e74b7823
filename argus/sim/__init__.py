"""Fault-scenario simulator: a synthetic training job with ground truth.

* :mod:`argus.sim.layout` - DP x TP x PP x EP (x CP) layouts, Megatron rank order;
* :mod:`argus.sim.model` - the per-step timing model (synchronising collectives, pipeline
  waits, overlapped expert-grad sync, natural jitter) and :class:`Fault`;
* :mod:`argus.sim.scenarios` - ``healthy`` and the fault scenarios with ground truth;
* :mod:`argus.sim.kernels` - kernel batches consistent with the phase timings;
* :mod:`argus.sim.simulate` - ``simulate(...)`` records, Avro files, Kafka publishing.
"""

from argus.sim.layout import Layout, LayoutError
from argus.sim.scenarios import SCENARIOS, GroundTruth, Scenario, build, scenario_names
from argus.sim.simulate import SimRun, publish, simulate, write_avro

__all__ = [
    "SCENARIOS",
    "GroundTruth",
    "Layout",
    "LayoutError",
    "Scenario",
    "SimRun",
    "build",
    "publish",
    "scenario_names",
    "simulate",
    "write_avro",
]
