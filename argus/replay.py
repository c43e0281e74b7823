"""Replay a historical window of a job from Kafka through the offline diagnosis.

The records' Kafka timestamps are the producers' create times, which are at or after the
records' own event times (the collector sends a step once it ended). So the read range on
each partition is

* start: ``offsets_for_times(T1 - skew)`` (the first record created at or after T1 less a
  clock-skew allowance), and
* end: the high watermark by default (a record may be produced long after its event time:
  a backfill, a simulator with a fixed epoch); with ``lag_ns`` set,
  ``offsets_for_times(T2 + lag)`` (records created at most ``lag`` after T2), which bounds
  the read on a busy topic.

Every record read is then filtered by its own event-time fields (step ``start_ns``/``end_ns``,
window ``window_start_ns``/``window_end_ns``) and by job, and the selection is fed to
:func:`argus.diagnose.diagnose` — the same compression, L1-L3 and funnel code as
``argus diagnose`` and the stream agents.

:func:`read_range` is the shared reader of the operator commands (replay, trace, stacks,
report).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from argus.detectors.config import DetectorsConfig
from argus.diagnose import DiagnoseResult, diagnose
from argus.errors import ArgusError

__all__ = [
    "ReplayError",
    "ReplayResult",
    "TimeRange",
    "align_steps",
    "event_overlaps",
    "parse_time",
    "publish_findings",
    "read_range",
    "replay",
    "why_empty",
]

Progress = Callable[[str, int, int], None]
"""``on_progress(topic, offsets done, offsets total)``."""

DEFAULT_SKEW_NS = 60 * 10**9


class ReplayError(ArgusError):
    """A replay request that cannot be served (bad time, nothing in range, broker trouble)."""


def parse_time(value: str | int) -> int:
    """Event time in ns since the Unix epoch from ISO 8601 text or an integer of ns.

    ``"1780000000000000000"`` and ``1780000000000000000`` are ns; ``"2026-05-28T20:26:40Z"``
    (or with an offset; naive times are UTC) is converted.

    Raises
    ------
    ReplayError
        Neither an integer nor an ISO 8601 time.
    """
    if isinstance(value, int):
        return value
    text = value.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ReplayError(
            f"time {value!r} is neither ns since epoch nor ISO 8601 (e.g. 2026-05-28T20:26:40Z)"
        ) from exc
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    whole = int(dt.replace(microsecond=0).timestamp())
    return whole * 10**9 + dt.microsecond * 1000


@dataclass(frozen=True)
class TimeRange:
    """An event-time range ``[start_ns, end_ns]`` (ns since epoch, inclusive)."""

    start_ns: int
    end_ns: int

    def __post_init__(self) -> None:
        if self.end_ns < self.start_ns:
            raise ReplayError(f"--to ({self.end_ns}) is before --from ({self.start_ns})")

    @classmethod
    def parse(cls, start: str | int, end: str | int) -> TimeRange:
        return cls(parse_time(start), parse_time(end))


def event_overlaps(rec: Mapping[str, Any], tr: TimeRange) -> bool:
    """Whether a record's own event-time span overlaps ``tr``.

    Step records span ``start_ns..end_ns``; batches and summaries
    ``window_start_ns..window_end_ns``.
    """
    if "window_start_ns" in rec:
        lo, hi = int(rec["window_start_ns"]), int(rec["window_end_ns"])
    else:
        lo, hi = int(rec["start_ns"]), int(rec["end_ns"])
    return lo <= tr.end_ns and hi >= tr.start_ns


def read_range(
    settings: Any,
    topic: str,
    tr: TimeRange,
    *,
    job: str,
    ranks: Iterable[int] | None = None,
    skew_ns: int = DEFAULT_SKEW_NS,
    lag_ns: int | None = None,
    on_progress: Progress | None = None,
    timeout_s: float = 60.0,
    errors: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Records of ``job`` on ``topic`` whose event time overlaps ``tr``, in offset order.

    Parameters
    ----------
    settings : argus.config.Settings
    topic : str
        Full topic name (``argus.raw.steps``).
    tr : TimeRange
    job : str
    ranks : iterable of int, optional
        Keep only these ranks.
    skew_ns : int
        Producer clock skew allowed before T1 (see module doc).
    lag_ns : int, optional
        Longest delay from event time to create time; None: read to the high watermark.
    on_progress : callable, optional
        ``(topic, offsets done, offsets total)`` after each fetched batch.
    timeout_s : float
        Give up when the range has not been read by then.
    errors : list of str, optional
        Records of the job that do not decode are skipped and described here
        (``topic[partition]@offset: reason``); without a list they raise.

    Raises
    ------
    ReplayError
        The topic does not exist, the broker does not answer, the read timed out, or (without
        ``errors``) a record of the job does not decode.
    """
    import time

    from confluent_kafka import KafkaException, TopicPartition

    from argus.kafka.read import consume_ranges, partitions, scratch_consumer
    from argus.schemas.codec import Codec

    codec = Codec(registry_url=getattr(settings, "schema_registry_url", "") or None)
    want = None if ranks is None else set(int(r) for r in ranks)
    key_prefix = f"{job}/".encode()
    out: list[dict[str, Any]] = []
    with scratch_consumer(settings, "replay") as cons:
        try:
            parts = partitions(cons, topic)
        except KafkaException as exc:
            raise ReplayError(f"{topic}: broker did not answer ({exc})") from exc
        if not parts:
            from argus.topics import TOPICS, most_alike

            suffix = next((f".{t.suffix}" for t in TOPICS if topic.endswith(f".{t.suffix}")), "")
            try:
                listed = cons.list_topics(timeout=10).topics if suffix else {}
            except KafkaException:
                listed = {}
            alike = most_alike(topic, (t for t in listed if t.endswith(suffix)))
            hint = f"; topics with that suffix: {', '.join(alike[:8])}" if alike else ""
            raise ReplayError(
                f"prefix: topic {topic} does not exist (check --prefix / [topics] prefix){hint}"
            )
        t_lo = max(0, (tr.start_ns - skew_ns) // 1_000_000)
        t_hi = -1 if lag_ns is None else (tr.end_ns + lag_ns) // 1_000_000
        for attempt in range(20):  # a new topic's leader may not be elected yet
            try:
                lo = cons.offsets_for_times([TopicPartition(topic, p, t_lo) for p in parts], 10)
                hi = (
                    lo
                    if t_hi < 0
                    else cons.offsets_for_times([TopicPartition(topic, p, t_hi) for p in parts], 10)
                )
                wm = {p: cons.get_watermark_offsets(TopicPartition(topic, p), 10) for p in parts}
                break
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                retriable = bool(getattr(err, "retriable", lambda: False)()) or (
                    "leader" in str(exc).lower()
                )
                if not retriable or attempt == 19:
                    raise ReplayError(f"{topic}: offsets_for_times failed ({exc})") from exc
                time.sleep(0.25)
        ranges: dict[int, tuple[int, int]] = {}
        for a, b in zip(lo, hi, strict=True):
            low, high = wm[a.partition]
            start = max(a.offset if a.offset >= 0 else high, low)
            end = b.offset if t_hi >= 0 and b.offset >= 0 else high
            if end > start:
                ranges[a.partition] = (start, end)
        total = sum(e - s for s, e in ranges.values())

        def progress(done: int) -> None:
            if on_progress:
                on_progress(topic, done, total)

        def timed_out(_left: object) -> ReplayError:
            return ReplayError(
                f"{topic}: read of {total} offsets timed out after {timeout_s:.0f} s"
            )

        progress(0)
        for m in consume_ranges(
            cons, topic, ranges, timeout_s=timeout_s, timed_out=timed_out, on_progress=progress
        ):
            key = m.key()
            if key is not None and not key.startswith(key_prefix):
                continue
            try:
                _name, rec = codec.decode(m.value())
            except ArgusError as exc:
                where = f"{topic}[{m.partition()}]@{m.offset()}: {exc}"
                if errors is None:
                    raise ReplayError(f"undecodable record {where}") from exc
                errors.append(where)
                continue
            if rec.get("job") != job:
                continue
            if want is not None and int(rec.get("rank", -1)) not in want:
                continue
            if event_overlaps(rec, tr):
                out.append(rec)
        if ranges:
            progress(total)
    return out


def why_empty(
    settings: Any,
    topic: str,
    job: str,
    tr: TimeRange,
    *,
    lag_ns: int | None = None,
    ranks: Iterable[int] | None = None,
) -> str:
    """Which of time range, prefix or lag limit left a read of ``job`` on ``topic`` empty,
    and the job's own range there (:func:`argus.drill.read.explain`); never raises."""
    from argus.drill.read import explain

    try:
        return explain(
            settings, topic, job, tr.start_ns, tr.end_ns, lag_ns=lag_ns,
            ranks=None if ranks is None else list(ranks),
        )  # fmt: skip
    except Exception as exc:  # an explanation must not hide the empty read itself
        return f"(could not say why: {exc})"


def align_steps(steps: list[dict[str, Any]], window_steps: int) -> list[dict[str, Any]]:
    """Drop the leading partial window so windows start at multiples of ``window_steps``.

    Live windows are counted from step 0 of the job; a replay that starts mid-window would
    otherwise shift every window (``diagnose`` counts from the first step it sees).
    """
    if not steps:
        return steps
    first = min(int(r["step"]) for r in steps)
    aligned = -(-first // window_steps) * window_steps
    return [r for r in steps if int(r["step"]) >= aligned]


@dataclass
class ReplayResult:
    """A replay: what was read, and the diagnosis of it."""

    job: str
    range: TimeRange
    result: DiagnoseResult
    kernel_source: str
    """``raw.kernels``, ``summary.kernels`` (raw expired) or ``none``."""
    read: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """Undecodable records of the job, skipped (``topic[partition]@offset: reason``)."""
    stream_anomalies: list[dict[str, Any]] = field(default_factory=list)
    """Every anomaly record the engine emitted for these records (findings and verdicts,
    :attr:`DiagnoseResult.anomalies`): the live ``argus.anomalies`` of the same records,
    same ids, for windows that do not need history from before the range."""

    def to_json(self) -> dict[str, Any]:
        doc = self.result.to_json()
        doc["replay"] = {
            "from_ns": self.range.start_ns,
            "to_ns": self.range.end_ns,
            "kernel_source": self.kernel_source,
            "read": self.read,
            "skipped": self.skipped,
        }
        doc["stream_anomalies"] = self.stream_anomalies
        return doc


def replay(
    settings: Any,
    job: str,
    tr: TimeRange,
    *,
    config: DetectorsConfig | None = None,
    window_steps: int = 10,
    prefix: str | None = None,
    on_progress: Progress | None = None,
    timeout_s: float = 120.0,
    lag_ns: int | None = None,
) -> ReplayResult:
    """Read ``job``'s records in ``tr`` from Kafka and diagnose them like ``argus diagnose``.

    Records of the job that do not decode are skipped and listed in
    :attr:`ReplayResult.skipped`. Kernel timings come from ``raw.kernels``; when none are left there for the range (short
    retention) the compressor's ``summary.kernels`` are used instead. ``lag_ns``: see
    :func:`read_range`.

    Raises
    ------
    ReplayError
        No step records of the job in the range, or a read failed.
    DetectorInputError
        Malformed records.
    """
    from argus.topics import topic_name

    pfx = settings.topic_prefix if prefix is None else prefix
    t = {s: topic_name(s, pfx) for s in ("raw.steps", "raw.kernels", "summary.kernels")}
    errors: list[str] = []
    kw: dict[str, Any] = {
        "job": job,
        "on_progress": on_progress,
        "timeout_s": timeout_s,
        "lag_ns": lag_ns,
        "errors": errors,
    }
    steps = align_steps(read_range(settings, t["raw.steps"], tr, **kw), window_steps)
    # partitions interleave arbitrarily: a deterministic order (stable, so one rank's
    # records keep their offset order, which is their partition's)
    steps.sort(key=lambda r: (int(r["step"]), int(r["rank"])))
    if not steps:
        raise ReplayError(
            f"no step records of job {job!r} in {t['raw.steps']} for that range: "
            + why_empty(settings, t["raw.steps"], job, tr, lag_ns=lag_ns)
        )
    lo = min(int(r["step"]) for r in steps)
    hi = max(int(r["step"]) for r in steps)

    def in_steps(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        sel = [r for r in recs if lo <= int(r["window_id"]) <= hi]
        return sorted(sel, key=lambda r: (int(r["window_id"]), int(r["rank"])))

    batches = in_steps(read_range(settings, t["raw.kernels"], tr, **kw))
    summaries: list[dict[str, Any]] = []
    source = "raw.kernels"
    if not batches:
        summaries = in_steps(read_range(settings, t["summary.kernels"], tr, **kw))
        source = "summary.kernels" if summaries else "none"
    from argus.streams.pipeline_config import PipelineConfig

    res = diagnose(
        steps,
        kernel_batches=batches,
        kernel_summaries=summaries,
        config=config,
        window_steps=window_steps,
        job=job,
        pcfg=PipelineConfig.from_mapping(settings.section("streams")),
    )
    read = {"step_records": len(steps), "kernel_batches": len(batches)}
    read["kernel_summaries"] = len(summaries)
    read["undecodable"] = len(errors)
    return ReplayResult(job, tr, res, source, read, errors, res.anomalies)


def publish_findings(settings: Any, result: DiagnoseResult, topic: str) -> int:
    """Produce the replay's anomaly records (findings and verdicts) to ``topic``.

    Keys are ``job/group_kind/group_id`` like ``argus.anomalies``; subscribers dedupe on the
    record ``id``. Returns the number of records produced.

    Raises
    ------
    ReplayError
        Records not delivered within 30 s.
    """
    from confluent_kafka import Producer

    from argus.schemas.codec import Codec

    codec = Codec(registry_url=getattr(settings, "schema_registry_url", "") or None)
    doc = result.to_json()
    prod = Producer(settings.kafka_config(**{"linger.ms": 20}))
    n = 0
    for rec in [*doc["findings"], *doc["verdicts"]]:
        key = f"{rec['job']}/{rec['group_kind']}/{rec['group_id']}"
        prod.produce(topic, value=codec.encode("anomaly", rec), key=key.encode())
        prod.poll(0)
        n += 1
    left = prod.flush(30.0)
    if left:
        raise ReplayError(f"{left} replay findings were not delivered to {topic} within 30 s")
    return n
