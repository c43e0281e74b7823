"""Issue 21 bench: the compressor's work per 3,000-event record against its floor.

Run (one process; rounds interleave every path, medians):

    .venv/bin/python bench/bench_compressor_batch.py [--events 3000] [--poll 64,256] [--rounds 15]

The workload is ``--poll`` raw ``kernel_batch`` records of ``--events`` events each (the
simulator's default kernel mix, one window per rank, the ranks' names already announced,
i.e. steady state), Avro-encoded as the collectors send them. Per round, on the same bytes:

* **floor**: decode each record with fastavro (``Codec(kernel_batch_reader=False)``, the
  issue's floor, what ``Codec.decode_as`` was before ``argus.schemas.kernel_batch_body``) and
  sort its durations (``np.sort``): what any compressor must at least do; the ratios
  (``x floor``) are to it;
* **argus floor**: the same with this tree's ``Codec.decode_as`` (the hand-written reader):
  ``x argus floor`` is the ratio to it;
* **batched**: what the compressor agent does per poll, without Kafka: decode, validate
  (``Checker.kernel_batch_columns``) and merge parts (``PartAssembler``) each record, compress
  the poll's windows in ``SummarizedBatches`` calls of up to ``CHUNK_EVENTS`` events each (a
  run of records decoded, then compressed; older trees: one call a poll; given the columns
  the check unpacked),
  then encode each summary (``SummarizedBatches.encoded``; older trees: ``record`` and
  ``Codec.encode``);
* **one at a time**: the same with a poll of one record (the agent before issue 21: one
  ``summarize_many`` per record).

With ``--baseline DIR`` (e.g. ``git worktree add DIR <commit>``), the batched and one-at-a-time
paths of the ``argus`` package under DIR run in the same rounds (its modules loaded beside
this tree's), so the two trees' ratios come from one run.

Reported: us per record (wall, ``perf_counter``) and the CPU time of this thread
(``thread_time``), medians over rounds, and the ratios to the floor of the same round.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from argus.schemas.codec import Codec
from argus.streams import synth
from argus.summaries.summary_record import batch_columns


def workload(n_rec: int, n_events: int, seed: int = 0) -> list[bytes]:
    """``n_rec`` encoded kernel_batch records (ranks 0..n_rec-1, one window each, now)."""
    rng = np.random.default_rng(seed)
    mix = synth.default_mix(seed)
    codec = Codec()
    t0 = time.time_ns() - 10 * 10**9
    return [
        codec.encode(
            "kernel_batch",
            synth.kernel_batch(
                rng,
                mix,
                job="bench",
                rank=r,
                window_id=1,
                n_events=n_events,
                window_start_ns=t0,
                coords={"dp_rank": r, "dp_size": n_rec},
            ),
        )
        for r in range(n_rec)
    ]


def _lib() -> SimpleNamespace:
    """The classes :class:`Compressor` uses, from the ``argus`` package now imported."""
    mod = importlib.import_module
    validate = mod("argus.streams.validate")
    return SimpleNamespace(
        Codec=mod("argus.schemas.codec").Codec,
        Checker=validate.Checker,
        Limits=validate.Limits,
        PipelineConfig=mod("argus.streams.pipeline_config").PipelineConfig,
        PartAssembler=mod("argus.schemas.kernel_parts").PartAssembler,
        SummarizedBatches=mod("argus.summaries.summary_record").SummarizedBatches,
        # the agent's runs of a poll (older trees: the whole poll in one call)
        run_events=getattr(mod("argus.summaries.summary_record"), "CHUNK_EVENTS", None),
    )


_LIB = _lib()


def baseline_lib(path: str) -> SimpleNamespace:
    """:func:`_lib` from the ``argus`` package under ``path``.

    Its modules are imported while this tree's are set aside in ``sys.modules``, then this
    tree's are put back: each tree's functions keep their own module globals.
    """
    mine = {k: m for k, m in sys.modules.items() if k == "argus" or k.startswith("argus.")}
    for k in mine:
        del sys.modules[k]
    sys.path.insert(0, os.path.abspath(path))
    try:
        return _lib()
    finally:
        sys.path.remove(os.path.abspath(path))
        for k in [k for k in sys.modules if k == "argus" or k.startswith("argus.")]:
            del sys.modules[k]
        sys.modules.update(mine)


class Compressor:
    """The agent's per-poll work (argus.streams.agents.kernels.register_compressor), pure;
    ``lib``: the classes to use (:func:`baseline_lib`; default this tree's)."""

    def __init__(self, lib: SimpleNamespace = _LIB) -> None:
        self.lib = lib
        self.codec = lib.Codec()
        self.check = lib.Checker(lib.Limits.from_pipeline(lib.PipelineConfig()))
        self.parts = lib.PartAssembler()
        self.announced: dict[str, set[int]] = {}

    def poll(self, raws: list[bytes]) -> int:
        """One poll: records decoded, checked and merged, compressed in runs of up to
        ``CHUNK_EVENTS`` events as the agent does (older trees: all at once), encoded."""
        wholes: list[Any] = []
        cols: list[Any] = []
        check = getattr(self.check, "kernel_batch_columns", None)  # older trees: no columns
        limit = self.lib.run_events
        out = n_ev = 0
        for raw in raws:
            piece = self.codec.decode_as("kernel_batch", raw)
            c = check(piece) if check is not None else self.check.kernel_batch(piece)
            whole, _ = self.parts.add(piece, None)
            if whole is not None:
                wholes.append(whole)
                cols.append(c if check is not None and whole is piece else None)
                n_ev += len(whole["duration_ns"]) // 8
                if limit is not None and n_ev > limit and len(wholes) > 1:
                    out += self._summarize(wholes[:-1], cols[:-1])
                    wholes, cols = wholes[-1:], cols[-1:]
                    n_ev = len(wholes[0]["duration_ns"]) // 8
        return out + self._summarize(wholes, cols) if wholes else out

    def _summarize(self, wholes: list[Any], cols: list[Any]) -> int:
        check = getattr(self.check, "kernel_batch_columns", None)
        done = self.lib.SummarizedBatches(wholes, columns=cols if check is not None else None)
        out = 0
        for i, b in enumerate(wholes):
            known = self.announced.setdefault(f"{b['job']}/{b['rank']}", set())
            if hasattr(done, "encoded"):  # the agent's path
                data, named = done.encoded(i, self.codec, announced=known)
                known.update(named)
            else:  # older trees: the record, then fastavro
                rec = done.record(i, announced=known)
                known.update(int(n["id"]) for n in rec["kernel_names"])
                data = self.codec.encode("kernel_summary", rec)
            out += len(data)
        return out

    def poll_each(self, raws: list[bytes]) -> int:
        """Polls of one record each (the agent before issue 21)."""
        return sum(self.poll([r]) for r in raws)


def floor(codec: Codec, raws: list[bytes]) -> int:
    n = 0
    for raw in raws:
        d = codec.decode_as("kernel_batch", raw)
        n += int(np.sort(np.frombuffer(d["duration_ns"], "<i8"))[-1] > 0)
    return n


def recorded(path: str, rounds: int) -> None:
    """The compression step of ``argus diagnose`` on a recording, before and after."""
    from argus.diagnose import read_avro
    from argus.streams.memory import batch_summaries, batches_summaries

    _, it = read_avro(os.path.join(path, "kernels.avro"))
    recs = list(it)
    n_ev = sum(len(r["duration_ns"]) // 8 for r in recs)
    paths: dict[str, Callable[[], Any]] = {
        "one summarize_batch per window": lambda: [batch_summaries(r) for r in recs],
        "batches_summaries": functools.partial(batches_summaries, recs),
    }
    cpu: dict[str, list[float]] = {k: [] for k in paths}
    for r in range(rounds):
        for k in list(paths)[r % 2 :] + list(paths)[: r % 2]:
            c0 = time.thread_time()
            paths[k]()
            cpu[k].append(time.thread_time() - c0)
    print(f"\nrecorded job {path}: {len(recs)} windows, {n_ev} events, {rounds} rounds")
    base = statistics.median(cpu["one summarize_batch per window"])
    for k, v in cpu.items():
        m = statistics.median(v)
        print(f"{k:32s} {m:7.2f} s CPU   {base / m:5.1f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--events", type=int, default=3000)
    ap.add_argument("--poll", default="64,256", help="records per poll (comma-separated)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument(
        "--recorded",
        metavar="DIR",
        help="also time the compression step of `argus diagnose` on DIR/kernels.avro "
        "(e.g. from `argus simulate --out DIR`): one summarize_batch per window (before) vs "
        "memory.batches_summaries, interleaved",
    )
    ap.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run the batched and one-at-a-time paths of the argus package under DIR "
        "(a worktree of an older commit) in the same rounds",
    )
    ap.add_argument(
        "--malloc",
        choices=("kept", "default"),
        default="kept",
        help="kept: argus.malloc.keep_freed_blocks() first, as the compressor agent and "
        "argus diagnose do (process-wide: --baseline runs under it too); default: glibc's",
    )
    ap.add_argument(
        "--batched-only",
        action="store_true",
        help="leave out the one-at-a-time paths: their many small calls between two batched "
        "polls leave the next one ~20 us/record of colder caches (2-core VM, 2026-12-03); the "
        "agent runs batched polls back to back",
    )
    args = ap.parse_args()
    if args.malloc == "kept":
        from argus.malloc import keep_freed_blocks

        print(f"malloc: freed blocks kept (argus.malloc): {keep_freed_blocks()}")
    else:
        print("malloc: glibc defaults")
    base = baseline_lib(args.baseline) if args.baseline else None
    if args.recorded:
        recorded(args.recorded, max(3, args.rounds // 3))
    if base is not None:
        print(f"baseline: {base.SummarizedBatches.__init__.__code__.co_filename}")
    print(
        f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cpus; load average {os.getloadavg()}"
    )
    for n_rec in (int(p) for p in args.poll.split(",")):
        raws = workload(n_rec, args.events)
        codec = Codec()
        comp = Compressor()
        comp.poll(raws)  # first window: names announced; then steady state
        fl, fl2 = "floor (fastavro + sort)", "argus floor (argus + sort)"
        paths: dict[str, Callable[[], Any]] = {
            fl: functools.partial(floor, Codec(kernel_batch_reader=False), raws),
            fl2: functools.partial(floor, Codec(), raws),
            "batched (one call per poll)": functools.partial(comp.poll, raws),
        }
        if not args.batched_only:
            paths["one at a time"] = functools.partial(comp.poll_each, raws)
        if base is not None:
            old = Compressor(base)
            old.poll(raws)
            paths["baseline batched"] = functools.partial(old.poll, raws)
            if not args.batched_only:
                paths["baseline one at a time"] = functools.partial(old.poll_each, raws)
        wall: dict[str, list[float]] = {k: [] for k in paths}
        cpu: dict[str, list[float]] = {k: [] for k in paths}
        ratio_w: dict[str, list[float]] = {k: [] for k in paths}
        ratio_c: dict[str, list[float]] = {k: [] for k in paths}
        ratio_c2: dict[str, list[float]] = {k: [] for k in paths}
        for r in range(args.rounds):
            names = list(paths)
            names = names[r % len(names) :] + names[: r % len(names)]
            got_w, got_c = {}, {}
            for k in names:
                c0, t0 = time.thread_time(), time.perf_counter()
                paths[k]()
                got_w[k] = (time.perf_counter() - t0) / n_rec * 1e6
                got_c[k] = (time.thread_time() - c0) / n_rec * 1e6
            for k in paths:
                wall[k].append(got_w[k])
                cpu[k].append(got_c[k])
                ratio_w[k].append(got_w[k] / got_w[fl])
                ratio_c[k].append(got_c[k] / max(got_c[fl], 1e-9))
                ratio_c2[k].append(got_c[k] / max(got_c[fl2], 1e-9))
        ev = args.events
        print(
            f"\n{n_rec} records of {ev} events per poll, {args.rounds} interleaved rounds "
            f"(batch columns check: {len(batch_columns(codec.decode_as('kernel_batch', raws[0]))[0])} names)"
        )
        print(
            f"{'path':30s} {'us/record':>10s} {'cpu us/rec':>11s} {'x floor':>8s} "
            f"{'x floor cpu':>12s} {'x argus floor cpu':>18s}"
        )
        for k in paths:
            print(
                f"{k:30s} {statistics.median(wall[k]):10.0f} {statistics.median(cpu[k]):11.0f} "
                f"{statistics.median(ratio_w[k]):8.1f} {statistics.median(ratio_c[k]):12.1f} "
                f"{statistics.median(ratio_c2[k]):18.1f}"
            )
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
