"""The compressor role: raw kernel batches -> kernel summaries and their L3 items, a poll at
a time.

Pure (no faust, no Kafka): a driver (the faust agent of :mod:`argus.streams.agents.kernels`,
or its own confluent-kafka loop, :mod:`argus.streams.compressor_loop`) hands each raw record to
:meth:`Compressor.take` with a token (its Kafka message), then a poll's complete windows to
:meth:`Compressor.summarize`, and sends what comes back; it sends a record that raised, or a
:class:`Made` with an ``error``, to the DLQ. What the role decides:

* *Checks*: a record is decoded and checked (``Checker.kernel_batch_columns``) before
  anything else; its columns are unpacked once, by the check.
* *Split windows*: parts are merged as they arrive (:class:`PartAssembler`); the driver's
  :class:`PartHolder` holds each part's input uncommitted until its window is summarised or
  given up (the role asks for the hold; the driver releases after it sent the DLQ records
  of windows given up, so no commit passes a part before that).
* *Summaries*: a poll's windows are compressed in one call
  (:class:`~argus.summaries.summary_record.SummarizedBatches`); should that fail, one at a
  time, and only the failing window gets an error. Kernel names are announced per window in
  input order (:class:`~argus.summaries.summary_record.NameAnnouncements`).
* *L3 items*: each summary's item for its scope (:func:`~argus.streams.roles.l3.route_window`);
  a summary whose coords name no scope gets no item while L3 routes other producers'
  summaries itself (its router then sends this one to the DLQ with the reason), else the
  error.
* *Fidelity*: one window in ``fidelity_every`` keeps its raw batch and summary record;
  :meth:`Compressor.due_samples` hands a window's sampled ranks over once 8 arrived, or
  after 10 s, for the driver to judge (:func:`argus.streams.fidelity.judge_samples`).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from argus.routing import Routing
from argus.schemas import Codec
from argus.schemas.kernel_parts import Incomplete, PartAssembler
from argus.streams.roles.l3 import route_window
from argus.streams.roles.state import KernelItem
from argus.streams.validate import Checker
from argus.summaries.summary_record import BatchColumns, NameAnnouncements, SummarizedBatches

__all__ = ["Compressor", "Made", "PartHolder", "Taken"]

log = logging.getLogger("argus.streams")

_FIDELITY_MIN_RANKS = 8
_FIDELITY_WAIT_S = 10.0


class PartHolder(Protocol):
    """Where a driver keeps a split window's parts from being committed."""

    def hold(self, token: Any) -> None:
        """``token``'s record is a part of a window not complete yet: read it again after
        a restart until released."""

    def release(self, token: Any) -> None:
        """``token``'s part is no longer needed (its window was summarised or given up)."""


@dataclasses.dataclass
class Taken:
    """One raw record taken: ``part`` its partition, ``piece`` as decoded, ``whole`` the
    window it completed (``piece`` itself unless split), ``columns`` its unpacked columns
    when ``whole`` is ``piece`` (None: :class:`SummarizedBatches` unpacks the merged
    window)."""

    token: Any
    part: int
    piece: dict[str, Any]
    whole: Mapping[str, Any]
    columns: BatchColumns | None

    @property
    def events(self) -> int:
        """Kernel events of the window (from its ``duration_ns`` column's bytes)."""
        return len(self.whole.get("duration_ns") or b"") // 8


@dataclasses.dataclass
class Made:
    """One window's outputs: its summary (``key`` ``job/rank``, ``value`` the encoded
    ``kernel_summary``), its L3 items ``[(scope key, item)]`` and, when sampled for the
    fidelity check, the summary record; or the ``error`` that stopped it (DLQ ``token``)."""

    taken: Taken
    key: bytes = b""
    value: bytes = b""
    items: list[tuple[str, KernelItem]] = dataclasses.field(default_factory=list)
    error: Exception | None = None


class Compressor:
    """The compressor's state and rules (module docstring); one per worker process.

    ``route_required``: not ``streams.l3_route_summaries`` (L3 reads only what compressors
    routed, so a summary without a scope is an error here)."""

    def __init__(
        self,
        codec: Codec,
        check: Checker,
        routing: Routing,
        holder: PartHolder,
        *,
        fidelity_every: int,
        route_required: bool,
    ) -> None:
        self.codec = codec
        self.check = check
        self.routing = routing
        self.holder = holder
        self.fidelity_every = fidelity_every
        self.route_required = route_required
        self.announced = NameAnnouncements()  # per job/rank: the kernel ids it named
        self.parts = PartAssembler()  # split windows' parts until the last one arrives
        self._sample: dict[tuple[str, int], dict[str, Any]] = {}  # (job, window) -> its ranks
        self._checked: OrderedDict[tuple[str, int], None] = OrderedDict()  # already judged

    def take(
        self, value: bytes, token: Any, part: int, broker_s: float | None = None
    ) -> tuple[Taken | None, list[Incomplete]]:
        """Decode, check and merge one raw record (``part``: its partition, where L3's
        per-partition watermark sees this compressor's catch-up skew; ``broker_s``: its
        broker timestamp, s): the window when this record completed it (else None), and
        the windows given up (their parts: DLQ, then release).

        Raises
        ------
        Exception
            The record does not decode or check (``DecodeError``, ``InputError``), or is a
            bad part (``PartError``): the driver sends it to the DLQ.
        """
        piece = self.codec.decode_as("kernel_batch", value)
        cols = self.check.kernel_batch_columns(piece, broker_s=broker_s)
        split = isinstance(piece.get("parts"), int) and piece["parts"] > 1
        if split:
            self.holder.hold(token)
        try:
            whole, given_up = self.parts.add(piece, token)
        except Exception:
            if split:
                self.holder.release(token)
            raise
        if whole is None:
            return None, given_up
        return Taken(token, part, piece, whole, cols if whole is piece else None), given_up

    def summarize(self, ready: Sequence[Taken]) -> list[Made]:
        """Compress ``ready``'s windows in one call; their outputs in order."""
        try:
            done: SummarizedBatches | None = SummarizedBatches(
                [t.whole for t in ready], columns=[t.columns for t in ready]
            )
        except Exception:  # one bad window must not cost the others: one at a time
            log.exception("compressor: a poll of %d windows failed; one at a time", len(ready))
            done = None
        out = []
        for i, taken in enumerate(ready):
            try:
                src, j = (done, i) if done is not None else (SummarizedBatches([taken.whole]), 0)
                out.append(self._made(taken, src, j))
            except Exception as exc:
                out.append(Made(taken, error=exc))
        return out

    def _made(self, taken: Taken, done: SummarizedBatches, i: int) -> Made:
        batch = taken.whole
        who = f"{batch['job']}/{batch['rank']}"
        known = self.announced.known(who)
        job, w = str(batch["job"]), int(batch["window_id"])
        sampled = w % self.fidelity_every == 0 and (job, w) not in self._checked
        rec = done.record(i, announced=known) if sampled else None
        data, named = done.encoded(i, self.codec, announced=known)  # = encode(record(i))
        try:
            items = route_window(batch, data, done.names_of(i, named), self.routing, taken.part)
        except Exception:
            if self.route_required:
                raise  # not sent: its names stay to announce with the rank's next window
            items = []
        known.update(named)
        if rec is not None:
            s = self._sample.setdefault((job, w), {"t0": time.time(), "batches": [], "recs": []})
            s["batches"].append(batch)
            s["recs"].append(rec)
        return Made(taken, who.encode(), data, items)

    def due_samples(
        self, now: float, force: bool = False
    ) -> list[tuple[str, list[Mapping[str, Any]], list[dict[str, Any]]]]:
        """The sampled windows due for the fidelity check (8 ranks in, 10 s waited, or all
        when ``force``): ``(job, raw batches, their summary records)``, each window once;
        one with under 4 ranks is dropped (:func:`argus.streams.fidelity.judge_samples`
        judges the rest)."""
        due = []
        for key in list(self._sample):
            s = self._sample[key]
            if len(s["batches"]) < _FIDELITY_MIN_RANKS and not (
                force or now - s["t0"] > _FIDELITY_WAIT_S
            ):
                continue
            del self._sample[key]
            self._checked[key] = None  # one check per sampled window, not one per 8 ranks
            while len(self._checked) > 4096:
                self._checked.popitem(last=False)
            if len(s["batches"]) >= 4:
                due.append((key[0], s["batches"], s["recs"]))
        return due
