"""Each agent's input path as a plain function of the bytes it consumes.

They compose exactly what the routers (and the compressor) run on one record: decode,
validate, then route or compress. The fuzz targets call them; each must return a result or
raise an :class:`~argus.errors.ArgusError` that carries a ``reason`` code.
"""

from __future__ import annotations

from typing import Any

from argus.detectors.config import DetectorsConfig
from argus.detectors.inputs import validate_step_record
from argus.detectors.l3_window import table_from_summaries
from argus.routing import Routing
from argus.schemas import Codec
from argus.schemas.kernel_parts import PartAssembler
from argus.streams.roles.funnel import finding_from_anomaly
from argus.streams.roles.steps import collector_metrics, route_step
from argus.streams.validate import Checker
from argus.summaries.summary_record import KernelNames, summarize_batch, summary_columns

CODEC = Codec()
ROUTING = Routing.from_config(DetectorsConfig().routing)


def steps(raw: bytes, chk: Checker) -> Any:
    """``argus.raw.steps`` router (L1/L2)."""
    rec = CODEC.decode_as("step_record", raw)
    chk.step(rec, raw)
    validate_step_record(rec)
    collector_metrics(rec["job"], rec)
    return route_step(rec)


def compressor(raw: bytes, chk: Checker) -> Any:
    """``argus.raw.kernels`` -> ``argus.summary.kernels``."""
    part = CODEC.decode_as("kernel_batch", raw)
    chk.kernel_batch(part)
    batch, _ = PartAssembler().add(part)  # PartError (bad-part) on a nonsensical part/parts
    if batch is None:  # a part of a split window: held until its window is whole
        return None
    rec = summarize_batch(batch, announced=set())
    return CODEC.encode("kernel_summary", rec)


def l3(raw: bytes, chk: Checker) -> Any:
    """``argus.summary.kernels`` router, and the L3 window's table of an accepted summary."""
    rec = CODEC.decode_as("kernel_summary", raw)
    summary_columns(rec)
    chk.kernel_summary(rec, raw)
    sid = ROUTING.group_for_kind(rec["coords"], "dp")
    names = KernelNames()
    names.update(rec)
    table_from_summaries([rec], names)
    return (f"{rec['job']}/dp/{sid}", ROUTING.expected_size(rec["coords"], "dp"))


def stacks(raw: bytes, chk: Checker) -> Any:
    """``argus.raw.stacks`` router."""
    rec = CODEC.decode_as("stack_batch", raw)
    chk.stack_batch(rec, raw)
    return (f"{rec['job']}/{rec['rank']}", [[s["stack"], s["count"]] for s in rec["stacks"]])


def funnel(raw: bytes, chk: Checker) -> Any:
    """``argus.anomalies`` router (funnel)."""
    rec = CODEC.decode_as("anomaly", raw)
    chk.anomaly(rec, raw)
    return finding_from_anomaly(rec)


PATHS = {
    "step_record": steps,
    "kernel_batch": compressor,
    "kernel_summary": l3,
    "stack_batch": stacks,
    "anomaly": funnel,
}
