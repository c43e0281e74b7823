"""The live pipeline's window logic, run offline over recorded records.

``argus replay --mode stream`` (the default) and tests use this to reproduce exactly what the
live workers found: the very window agents of :mod:`argus.streams.agents` (steps: L1 and
L2; kernels: L3) are driven by a stand-in for the faust context whose tables are dicts and
whose topics are lists. Records are fed in event order, every rank of every window present,
so windows close on completion as they do in a live run that keeps up; the anomaly ids are
then the live ones. (A live run whose windows timed out, or that saw late records, differs
by exactly those windows; its DLQ and metrics say so.)
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from argus.detectors.config import DetectorsConfig
from argus.schemas import Codec
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.summary_record import summarize_batch

__all__ = ["StreamReplay", "replay_stream"]


class _Topic:
    def __init__(self, name: str) -> None:
        self.name = name

    def get_topic_name(self) -> str:
        return self.name


@dataclass
class _OfflineCtx:
    """What the window agents use of :class:`argus.streams.app.Ctx`."""

    detectors: DetectorsConfig
    pcfg: PipelineConfig
    codec: Codec = field(default_factory=Codec)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    anomalies: list[dict[str, Any]] = field(default_factory=list)
    internal_msgs: list[tuple[str, str, Any]] = field(default_factory=list)

    def table(self, name: str) -> dict[str, Any]:
        return self.tables.setdefault(name, {})

    def internal_topic(self, name: str) -> _Topic:
        return _Topic(name)

    async def send_keyed(self, topic: _Topic, key: str, value: Any) -> None:
        self.internal_msgs.append((topic.name, key, value))

    async def emit(
        self, suffix: str, key: str, record_name: str, value: dict[str, Any], role: str
    ) -> None:
        if suffix == "anomalies":
            self.anomalies.append(value)


@dataclass(frozen=True)
class StreamReplay:
    """Anomaly records the live agents would have emitted, in emission order."""

    anomalies: list[dict[str, Any]]

    @property
    def ids(self) -> set[str]:
        return {a["id"] for a in self.anomalies}


async def _run(
    ctx: _OfflineCtx,
    steps: Sequence[Mapping[str, Any]],
    summaries: Sequence[Mapping[str, Any]],
) -> None:
    from argus.detectors.routing import Routing
    from argus.streams.agents.kernels import _L3
    from argus.streams.agents.steps import _Blocks, _Steps, route_step

    st_impl = _Steps(ctx)  # type: ignore[arg-type]
    st_impl.levels.update({"l1", "l2"})
    blocks = _Blocks(ctx, st_impl.levels)  # type: ignore[arg-type]
    block_state: dict[str, Any] = {}
    state: dict[str, Any] = {}
    for rec in sorted(steps, key=lambda r: (r["job"], int(r["step"]), int(r["rank"]))):
        for key, item in route_step(rec, ctx.pcfg.steps_block_ranks):
            st = block_state.setdefault(key, blocks.new(key))
            await blocks.add(key, st, item, 0.0)
        await _digests(ctx, st_impl, state)
    for key, st in block_state.items():  # end of input: what a live idle close does
        await blocks.finish(key, st)
    await _digests(ctx, st_impl, state)
    for job, st in state.items():
        await st_impl.finish(job, st)
    routing = Routing.from_config(ctx.detectors.routing)
    l3 = _L3(ctx, routing, ctx.table("l3-cells"))  # type: ignore[arg-type]
    l3_state: dict[str, Any] = {}
    for rec in sorted(summaries, key=lambda r: (r["job"], int(r["window_id"]), int(r["rank"]))):
        sid = routing.group_for_kind(rec["coords"], "dp")
        key = f"{rec['job']}/dp/{sid}"
        st = l3_state.setdefault(key, l3.new(key))
        item = {
            "r": rec["rank"],
            "w": rec["window_id"],
            "exp": routing.expected_size(rec["coords"], "dp"),
            "v": base64.b64encode(ctx.codec.encode("kernel_summary", dict(rec))).decode(),
        }
        await l3.add(key, st, item, 0.0)
    for key, st in l3_state.items():  # end of input: what a live idle close does
        await l3.finish(key, st)


async def _digests(ctx: _OfflineCtx, st_impl: Any, state: dict[str, Any]) -> None:
    """Hand the blocks' digests on to the job tier."""
    while ctx.internal_msgs:
        topic, job, msg = ctx.internal_msgs.pop(0)
        if topic != "steps-by-job":
            continue
        st = state.setdefault(job, st_impl.new(job))
        for digest in msg["items"]:
            await st_impl.add(job, st, digest, 0.0)


def replay_stream(
    steps: Iterable[Mapping[str, Any]],
    *,
    kernel_batches: Iterable[Mapping[str, Any]] = (),
    kernel_summaries: Iterable[Mapping[str, Any]] = (),
    detectors: DetectorsConfig | None = None,
    pcfg: PipelineConfig | None = None,
) -> StreamReplay:
    """Run the live L1/L2/L3 window agents offline; see the module doc.

    Kernel batches are compressed as the live compressor does
    (:func:`~argus.streams.summary_record.summarize_batch`); summaries are used as they are.
    """
    ctx = _OfflineCtx(detectors or DetectorsConfig(), pcfg or PipelineConfig())
    summaries = [summarize_batch(b) for b in kernel_batches] + [dict(s) for s in kernel_summaries]
    asyncio.run(_run(ctx, list(steps), summaries))
    return StreamReplay(ctx.anomalies)
