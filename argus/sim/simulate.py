"""The simulator's driver: records, Avro container files, Kafka.

:func:`simulate` yields ``(topic_suffix, key, record)`` in event-time order (per step: the
step records of every rank, then their kernel batches); :func:`write_avro` writes them to
Avro object container files (``steps.avro``, ``kernels.avro``) plus ``truth.json``;
:func:`publish` produces them to Kafka (single-object Avro values, keys ``job/rank``) at a
chosen step rate.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from argus.schemas.arrays import pack
from argus.sim.kernels import kernel_batch_records
from argus.sim.layout import Layout, LayoutError
from argus.sim.mega import STREAMS as MEGA_STREAMS
from argus.sim.mega import MegaModel, host_of
from argus.sim.model import TimingModel
from argus.sim.scenarios import GroundTruth, Scenario, build, default_layout

__all__ = [
    "STEP_GAP_MS",
    "SimRun",
    "offline_collector",
    "publish",
    "simulate",
    "write_avro",
]

STEP_GAP_MS = 0.5
T0_NS = 1_780_000_000_000_000_000  # a fixed epoch (2026) so runs are reproducible

FILES = {
    "raw.steps": ("steps.avro", "step_record"),
    "raw.kernels": ("kernels.avro", "kernel_batch"),
}


@dataclass(frozen=True)
class SimRun:
    """A configured simulation."""

    scenario: Scenario
    layout: Layout
    steps: int
    seed: int = 0
    job: str = "sim"
    kernels: bool = True
    kernel_every: int = 1  # emit kernel batches every k-th step (1: every step)

    @classmethod
    def make(
        cls,
        scenario: str,
        *,
        ranks: int | None = None,
        layout: Layout | str | None = None,
        steps: int = 200,
        seed: int = 0,
        job: str | None = None,
        kernels: bool = True,
        kernel_every: int = 1,
    ) -> SimRun:
        if isinstance(layout, str):
            layout = Layout.parse(layout)
        if layout is None:
            layout = default_layout(scenario, ranks)
        if layout is None:
            layout = Layout.for_ranks(ranks or 64)
        elif ranks is not None and ranks != layout.world:
            raise LayoutError(f"--ranks {ranks} but layout {layout} has {layout.world} ranks")
        if steps < 1:
            raise LayoutError(f"steps must be >= 1, got {steps}")
        sc = build(scenario, layout, steps, seed)
        return cls(sc, layout, steps, seed, job or f"sim-{scenario}", kernels, kernel_every)

    @property
    def truth(self) -> GroundTruth:
        return self.scenario.truth

    def truth_dict(self) -> dict[str, Any]:
        return {
            **self.truth.to_dict(),
            "job": self.job,
            "layout": str(self.layout),
            "world": self.layout.world,
            "steps": self.steps,
            "seed": self.seed,
        }


def simulate(
    scenario: str | SimRun,
    *,
    ranks: int | None = None,
    steps: int = 200,
    layout: Layout | str | None = None,
    seed: int = 0,
    job: str | None = None,
    kernels: bool = True,
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Yield ``(topic_suffix, key, record)`` of a simulated job, step by step.

    Parameters
    ----------
    scenario : str or SimRun
        A scenario name (see :data:`argus.sim.scenarios.SCENARIOS`) or a configured run.
    ranks, layout, steps, seed, job, kernels
        See :meth:`SimRun.make` (ignored when ``scenario`` is a SimRun).

    Yields
    ------
    (str, str, dict)
        ``("raw.steps", "job/rank", step_record)`` for every rank, then (when ``kernels``)
        ``("raw.kernels", "job/rank", kernel_batch)``; step by step in event-time order.
    """
    run = (
        scenario
        if isinstance(scenario, SimRun)
        else SimRun.make(
            scenario, ranks=ranks, layout=layout, steps=steps, seed=seed, job=job, kernels=kernels
        )
    )
    if run.scenario.noise is not None:
        yield from _simulate_mega(run)
        return
    lay = run.layout
    model = TimingModel(lay, run.scenario.faults, seed=run.seed)
    krng = np.random.default_rng([run.seed, 11])
    coords = [lay.coords(r) for r in range(lay.world)]
    hosts = [host_of(r) for r in range(lay.world)]
    keys = [f"{run.job}/{r}" for r in range(lay.world)]
    t_ns = T0_NS
    for s in range(run.steps):
        st = model.step(s)
        end_ns = t_ns + (st.end_ms * 1e6).astype(np.int64)
        for r in range(lay.world):
            phases = [
                {
                    "name": p.name,
                    "stream_kind": p.stream_kind,
                    "start_ns": int(t_ns + st.start_ms[p.name][r] * 1e6),
                    "duration_ns": int(st.dur_ms[p.name][r] * 1e6),
                    "timer": "cuda_event",
                }
                for p in st.phases
            ]
            yield (
                "raw.steps",
                keys[r],
                {
                    "job": run.job,
                    "rank": r,
                    "step": s,
                    "start_ns": int(t_ns),
                    "end_ns": int(end_ns[r]),
                    "host": hosts[r],
                    "coords": coords[r],
                    "phases": phases,
                    "collector": offline_collector(bool(run.kernels and s % run.kernel_every == 0)),
                },
            )
        step_end = int(end_ns.max())
        if run.kernels and s % run.kernel_every == 0:
            for rec in kernel_batch_records(
                krng,
                job=run.job,
                window_id=s,
                step_start_ns=t_ns,
                window_end_ns=step_end,
                coords=coords,
                hosts=hosts,
                start_ms=st.start_ms,
                kernel_ms=st.kernel_ms,
            ):
                yield ("raw.kernels", keys[int(rec["rank"])], rec)  # type: ignore[call-overload]
        t_ns = step_end + int(STEP_GAP_MS * 1e6)


def offline_collector(kernels: bool) -> dict[str, Any]:
    """A step record's ``collector`` field for records made without a collector (the
    simulator, ingested traces): no overhead, drops or errors; ``kernels``: this step's
    kernels were recorded."""
    return {
        "overhead_ns": 0,
        "dropped_records": 0,
        "dropped_bytes": 0,
        "errors": 0,
        "queue_depth": 0,
        "backed_off": False,
        "kernels": kernels,
    }


def _simulate_mega(run: SimRun) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """:func:`simulate` for the ``mega-*`` scenarios (:class:`~argus.sim.mega.MegaModel`).

    Per step: the step records of the reporting ranks (rank order), then their kernel
    batches (when ``run.kernels`` and the step is a kernel step). All ranks start a step at
    the same event time; the next step starts after the latest end.
    """
    assert run.scenario.noise is not None
    lay = run.layout
    model = MegaModel(lay, run.scenario.noise, run.scenario.mega_faults, seed=run.seed)
    coords = [lay.coords(r) for r in range(lay.world)]
    hosts = [host_of(r) for r in range(lay.world)]
    keys = [f"{run.job}/{r}" for r in range(lay.world)]
    streams = [{"id": k, "kind": v[0], "label": v[1]} for k, v in MEGA_STREAMS.items()]
    t_ns = T0_NS
    for s in range(run.steps):
        st = model.step(s)
        with_k = bool(run.kernels and s % run.kernel_every == 0)
        end_ns = t_ns + (st.end_ms * 1e6).astype(np.int64)
        step_end = int(end_ns.max())
        recs: list[tuple[int, dict[str, Any]]] = []
        kbs: list[tuple[int, dict[str, Any]]] = []
        for b in st.blocks:
            p_start = (t_ns + b.phase_start * 1e6).astype(np.int64).tolist()
            p_dur = np.maximum(b.phase_dur * 1e6, 0).astype(np.int64).tolist()
            meta = list(zip(b.phase_names, b.phase_kinds, strict=True))
            if with_k:
                k_start = (t_ns + b.kernel_start * 1e6).astype(np.int64)
                k_dur = np.maximum(b.kernel_dur * 1e6, 1).astype(np.int64)
                name_idx = pack(b.kernel_name, "uint32")
                stream = pack(b.kernel_stream, "uint32")
            for i, r in enumerate(b.ranks.tolist()):
                if not st.reporting[r]:
                    continue
                phases = [
                    {
                        "name": n,
                        "stream_kind": k,
                        "start_ns": a,
                        "duration_ns": d,
                        "timer": "cpu" if k == "host" else "cuda_event",
                    }
                    for (n, k), a, d in zip(meta, p_start[i], p_dur[i], strict=True)
                ]
                recs.append(
                    (
                        r,
                        {
                            "job": run.job,
                            "rank": r,
                            "step": s,
                            "start_ns": int(t_ns),
                            "end_ns": int(end_ns[r]),
                            "host": hosts[r],
                            "coords": coords[r],
                            "phases": phases,
                            "collector": offline_collector(with_k),
                        },
                    )
                )
                if with_k:
                    kbs.append(
                        (
                            r,
                            {
                                "job": run.job,
                                "rank": r,
                                "window_id": s,
                                "window_start_ns": int(t_ns),
                                "window_end_ns": step_end,
                                "host": hosts[r],
                                "coords": coords[r],
                                "source": "simulator",
                                "names": model.names,
                                "name_idx": name_idx,
                                "stream": stream,
                                "start_ns": pack(k_start[i], "int64"),
                                "duration_ns": pack(k_dur[i], "int64"),
                                "streams": streams,
                                "dropped": 0,
                            },
                        )
                    )
        recs.sort(key=lambda x: x[0])
        for r, rec in recs:
            yield ("raw.steps", keys[r], rec)
        kbs.sort(key=lambda x: x[0])
        for r, rec in kbs:
            yield ("raw.kernels", keys[r], rec)
        t_ns = step_end + int(STEP_GAP_MS * 1e6)


def write_avro(
    records: Iterator[tuple[str, str, dict[str, Any]]],
    out_dir: str | Path,
    *,
    truth: Mapping[str, Any] | None = None,
    codec: str = "deflate",
) -> dict[str, int]:
    """Write simulated records to Avro object container files in ``out_dir``.

    One :class:`fastavro.write.Writer` per file holds the header and sync marker and cuts
    blocks of ~16 kB (its ``sync_interval``), so a file is written in any number of blocks
    with every fastavro the project allows (calling ``fastavro.writer`` again on the open
    file, as before, raised "you must use the 'a+' mode" at the second flush). Files are
    written as ``NAME.part`` and renamed when all records are in; on an error the parts are
    removed, so a failed run leaves no truncated ``*.avro``.

    Returns
    -------
    dict
        Records written per file name (``steps.avro``, ``kernels.avro``).
    """
    from fastavro.write import Writer

    from argus.schemas.codec import load_schemas

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    schemas = load_schemas()
    handles: dict[str, Any] = {}
    writers: dict[str, Any] = {}
    counts: dict[str, int] = {}
    done = False
    try:
        for suffix, _key, rec in records:
            if suffix not in FILES:
                continue
            fname, schema = FILES[suffix]
            w = writers.get(fname)
            if w is None:
                fh = handles[fname] = open(out / f"{fname}.part", "wb")  # noqa: SIM115 - closed below
                w = writers[fname] = Writer(fh, schemas[schema].parsed, codec=codec)
                counts[fname] = 0
            w.write(rec)
            counts[fname] += 1
        for w in writers.values():
            w.flush()
        done = True
    finally:
        for fname, fh in handles.items():
            fh.close()
            part = out / f"{fname}.part"
            if done:
                part.replace(out / fname)
            else:
                part.unlink(missing_ok=True)
    if truth is not None:
        (out / "truth.json").write_text(json.dumps(dict(truth), indent=2) + "\n")
    return counts


def publish(
    records: Iterator[tuple[str, str, dict[str, Any]]],
    settings: Any,
    *,
    prefix: str | None = None,
    step_rate: float | None = None,
    producer: Any = None,
    on_step: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Produce simulated records to Kafka.

    Parameters
    ----------
    records : iterator of (topic_suffix, key, record)
        From :func:`simulate`.
    settings : argus.config.Settings
        Cluster and client settings.
    prefix : str, optional
        Topic prefix (default ``settings.topic_prefix``).
    step_rate : float, optional
        Steps per second to pace at (wall clock); None: as fast as possible.
    producer : confluent_kafka.Producer, optional
        Reuse a producer (it is flushed, not closed).
    on_step : callable, optional
        Called with each step number once its records are queued.

    Returns
    -------
    dict
        Records produced per topic.
    """
    from confluent_kafka import Producer

    from argus.schemas.codec import Codec
    from argus.topics import TOPICS, topic_name

    codec = Codec(registry_url=getattr(settings, "schema_registry_url", "") or None)
    pfx = settings.topic_prefix if prefix is None else prefix
    record_of = {t.suffix: t.record for t in TOPICS}
    prod = producer or Producer(
        settings.kafka_config(**{"linger.ms": 20, "compression.type": "lz4"})
    )
    counts: dict[str, int] = {}
    t_start = time.monotonic()
    current_step: int | None = None
    n_steps = 0
    for suffix, key, rec in records:
        step = int(rec.get("step", rec.get("window_id", 0)))
        if step != current_step:
            if current_step is not None:
                n_steps += 1
                if on_step is not None:
                    on_step(current_step)
                if step_rate:
                    delay = t_start + n_steps / step_rate - time.monotonic()
                    if delay > 0:
                        prod.flush(delay)
                        rest = t_start + n_steps / step_rate - time.monotonic()
                        if rest > 0:
                            time.sleep(rest)
            current_step = step
        topic = topic_name(suffix, pfx)
        value = codec.encode(record_of[suffix], rec)
        while True:
            try:
                prod.produce(topic, value=value, key=key.encode())
                break
            except BufferError:
                prod.poll(0.1)
        prod.poll(0)
        counts[topic] = counts.get(topic, 0) + 1
    if current_step is not None and on_step is not None:
        on_step(current_step)
    remaining = prod.flush(30.0)
    if remaining:
        from argus.errors import ArgusError

        raise ArgusError(f"{remaining} simulated records were not delivered within 30 s")
    return counts
