"""L5 drill-down: the hottest collapsed stacks of a rank, as text, folded or speedscope.

Input records are ``stack_summary`` (``argus.summary.stacks``) or ``stack_batch``
(``argus.raw.stacks``) dicts; their ``stacks`` are collapsed stacks, root first
(``thread;func (file:line);...``) with a sample count. All functions but
:func:`stacks_from_kafka` are pure.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from argus.errors import ArgusError

__all__ = [
    "FrameDiff",
    "HotStack",
    "StacksError",
    "aggregate",
    "diff",
    "hottest",
    "hottest_leaves",
    "is_argus_stack",
    "select",
    "stacks_from_kafka",
    "thread_of",
    "threads",
    "to_diff_folded",
    "to_diff_text",
    "to_folded",
    "to_speedscope",
    "to_speedscope_multi",
    "to_text",
]

_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^():]+):(?P<line>\d+)\)$")
_ARGUS_THREAD = re.compile(r"^argus[-_]")
_ARGUS_FILE = re.compile(r"(^|/)argus/(collectors|streams|sinks)/")
_THREADING = re.compile(r"\((?:[^()]*/)?threading\.py:\d+\)$")


def thread_of(stack: str) -> str:
    """The thread element of a collapsed stack (its first frame: ``MainThread``)."""
    return stack.split(";", 1)[0].strip()


def is_argus_stack(stack: str) -> bool:
    """Whether a collapsed stack is one of argus's own threads (collector, producer,
    control, watcher): its thread is named ``argus-*``, or the thread's entry point (its
    first frame past ``threading.py``) is argus's collector or stream code. Training
    threads that call into argus hooks are not argus's: their entry point is the user's.
    """
    frames = stack.split(";")
    if _ARGUS_THREAD.match(frames[0].strip()):
        return True
    for fr in frames[1:]:
        if _THREADING.search(fr):
            continue
        return bool(_ARGUS_FILE.search(fr))
    return False


def select(
    counts: Mapping[str, int], *, own: bool = False, thread: str | None = None
) -> Counter[str]:
    """The stacks to show: without argus's own threads unless ``own``, and only threads
    whose name contains ``thread`` (case-insensitive) when given."""
    want = thread.lower() if thread else None
    out: Counter[str] = Counter()
    for s, n in counts.items():
        if not own and is_argus_stack(s):
            continue
        if want is not None and want not in thread_of(s).lower():
            continue
        out[s] += n
    return out


def threads(counts: Mapping[str, int]) -> list[tuple[str, int, bool]]:
    """``(thread, samples, argus's own)`` of every thread, most samples first."""
    by: Counter[str] = Counter()
    own: dict[str, bool] = {}
    for s, n in counts.items():
        t = thread_of(s)
        by[t] += n
        own[t] = own.get(t, True) and is_argus_stack(s)
    return [(t, n, own[t]) for t, n in sorted(by.items(), key=lambda kv: (-kv[1], kv[0]))]


class StacksError(ArgusError):
    """Stack records that cannot be aggregated (negative counts, empty stacks, none at all)."""


@dataclass(frozen=True)
class HotStack:
    """One collapsed stack and its share of the samples."""

    stack: str
    count: int
    share: float
    """count / all samples, 0..1."""


def aggregate(records: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """Sum the sample counts of each collapsed stack over records (windows).

    Raises
    ------
    StacksError
        A negative count or an empty stack string (the message names the record).
    """
    out: Counter[str] = Counter()
    for rec in records:
        for sc in rec.get("stacks", []):
            stack, n = str(sc.get("stack", "")), int(sc.get("count", 0))
            if not stack.strip():
                raise StacksError(
                    f"rank {rec.get('rank')} window {rec.get('window_start_ns')}: empty stack"
                )
            if n < 0:
                raise StacksError(
                    f"rank {rec.get('rank')} window {rec.get('window_start_ns')}: "
                    f"negative count {n} for {stack[:80]!r}"
                )
            out[stack] += n
    return out


def hottest(counts: Mapping[str, int], top: int = 20) -> list[HotStack]:
    """The ``top`` stacks by sample count (ties by stack text)."""
    total = sum(counts.values()) or 1
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [HotStack(s, n, n / total) for s, n in items]


def hottest_leaves(counts: Mapping[str, int], top: int = 10) -> list[tuple[str, int, float]]:
    """``(leaf frame, self samples, share)`` of the ``top`` leaf frames."""
    leaves: Counter[str] = Counter()
    for s, n in counts.items():
        leaves[s.rsplit(";", 1)[-1]] += n
    total = sum(leaves.values()) or 1
    return [(f, n, n / total) for f, n in sorted(leaves.items(), key=lambda kv: (-kv[1], kv[0]))][
        :top
    ]


def to_folded(counts: Mapping[str, int]) -> str:
    """Brendan Gregg's folded format (``stack count`` per line; flamegraph.pl, inferno)."""
    return "".join(f"{s} {n}\n" for s, n in sorted(counts.items()) if n > 0)


def to_speedscope(
    counts: Mapping[str, int], *, name: str, by_thread: bool = True
) -> dict[str, Any]:
    """A speedscope file (https://www.speedscope.app/file-format-schema.json) whose weights
    are sample counts: one sampled profile per thread (``name: thread``; the thread frame is
    dropped from its stacks), or one for all when not ``by_thread``."""
    return to_speedscope_multi({name: counts}, by_thread=by_thread)


def to_speedscope_multi(
    named: Mapping[str, Mapping[str, int]], *, by_thread: bool = True
) -> dict[str, Any]:
    """A speedscope file of several stack sets (e.g. a culprit rank and a peer), each split
    into one profile per thread when ``by_thread``; frames shared."""
    frames: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    profiles: list[dict[str, Any]] = []

    def frame(fr: str) -> int:
        if fr not in index:
            index[fr] = len(frames)
            m = _FRAME.match(fr)
            frames.append(
                {"name": m["name"], "file": m["file"], "line": int(m["line"])}
                if m
                else {"name": fr}
            )
        return index[fr]

    for name, counts in named.items():
        groups: dict[str, list[tuple[list[str], int]]] = {}
        for stack, n in sorted(counts.items()):
            if n <= 0:
                continue
            fr = stack.split(";")
            if by_thread:
                groups.setdefault(fr[0].strip(), []).append((fr[1:] or fr[:1], int(n)))
            else:
                groups.setdefault("", []).append((fr, int(n)))
        order = sorted(groups, key=lambda t: (-sum(n for _f, n in groups[t]), t))
        for t in order:
            samples = [[frame(x) for x in fr] for fr, _n in groups[t]]
            weights = [n for _fr, n in groups[t]]
            profiles.append(
                {
                    "type": "sampled",
                    "name": f"{name}: {t}" if t else name,
                    "unit": "none",
                    "startValue": 0,
                    "endValue": sum(weights),
                    "samples": samples,
                    "weights": weights,
                }
            )
    title = " vs ".join(named)
    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "name": title,
        "exporter": "argus-trace",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": profiles,
    }


@dataclass(frozen=True)
class FrameDiff:
    """One frame's share of the samples in a culprit rank and in a peer (0..1)."""

    frame: str
    culprit: float
    peer: float

    @property
    def delta(self) -> float:
        return self.culprit - self.peer


def diff(
    culprit: Mapping[str, int], peer: Mapping[str, int], *, top: int = 15, leaves: bool = True
) -> list[FrameDiff]:
    """Frames whose share of the samples differs most between ``culprit`` and ``peer``
    (leaf frames: self time; else every frame on the stack: inclusive), largest change
    first."""

    def shares(counts: Mapping[str, int]) -> dict[str, float]:
        out: Counter[str] = Counter()
        for s, n in counts.items():
            frs = s.split(";")[1:] or s.split(";")
            for f in [frs[-1]] if leaves else set(frs):
                out[f] += n
        total = sum(counts.values()) or 1
        return {f: n / total for f, n in out.items()}

    a, b = shares(culprit), shares(peer)
    rows = [FrameDiff(f, a.get(f, 0.0), b.get(f, 0.0)) for f in set(a) | set(b)]
    rows.sort(key=lambda r: (-abs(r.delta), r.frame))
    return rows[:top]


def to_diff_text(
    culprit: Mapping[str, int], peer: Mapping[str, int], *, names: tuple[str, str], top: int = 15
) -> str:
    """Text: the leaf (self) and inclusive frames whose share differs most, culprit vs peer."""
    a, b = names
    lines = [
        f"{a}: {sum(culprit.values())} samples; {b}: {sum(peer.values())} samples",
        "",
        f"self time (leaf frames), share of samples: {a} | {b} | change",
    ]
    for r in diff(culprit, peer, top=top):
        lines.append(
            f"{100 * r.culprit:6.1f}% {100 * r.peer:6.1f}% {100 * r.delta:+7.1f}  {r.frame}"
        )
    lines += ["", f"inclusive (on the stack), share of samples: {a} | {b} | change"]
    for r in diff(culprit, peer, top=top, leaves=False):
        lines.append(
            f"{100 * r.culprit:6.1f}% {100 * r.peer:6.1f}% {100 * r.delta:+7.1f}  {r.frame}"
        )
    return "\n".join(lines) + "\n"


def to_diff_folded(culprit: Mapping[str, int], peer: Mapping[str, int]) -> str:
    """``stack peer_count culprit_count`` lines, the input of ``flamegraph.pl`` /
    ``inferno-diff-folded`` differential flame graphs (before = peer, after = culprit)."""
    keys = sorted(set(culprit) | set(peer))
    return "".join(f"{s} {int(peer.get(s, 0))} {int(culprit.get(s, 0))}\n" for s in keys)


def to_text(counts: Mapping[str, int], *, top: int = 20, width: int = 160) -> str:
    """Plain-text report: the hottest stacks (leaf first, so the hot frame leads) and leaves."""
    total = sum(counts.values())
    lines = [f"{total} samples, {len(counts)} distinct stacks", "", "hottest stacks:"]
    for h in hottest(counts, top):
        frames = h.stack.split(";")
        text = " <- ".join(reversed(frames))
        if len(text) > width:
            text = text[: width - 3] + "..."
        lines.append(f"{h.count:>8} {100 * h.share:5.1f}%  {text}")
    lines += ["", "hottest leaf frames:"]
    for f, n, sh in hottest_leaves(counts, min(top, 10)):
        lines.append(f"{n:>8} {100 * sh:5.1f}%  {f}")
    return "\n".join(lines) + "\n"


def stacks_from_kafka(
    settings: Any,
    job: str,
    rank: int,
    tr: Any,
    *,
    prefix: str | None = None,
    lag_ns: int | None = None,
) -> tuple[Counter[str], str]:
    """Aggregated stacks of ``job``/``rank`` in ``tr``: from ``summary.stacks``, or
    ``raw.stacks`` when no summary covers the range. Returns ``(counts, topic suffix used)``.

    Raises
    ------
    StacksError
        No stack record of that rank in the range, or malformed counts.
    ReplayError
        A read failed.
    """
    from argus.replay import read_range
    from argus.topics import topic_name

    pfx = settings.topic_prefix if prefix is None else prefix
    for suffix in ("summary.stacks", "raw.stacks"):
        recs = read_range(
            settings, topic_name(suffix, pfx), tr, job=job, ranks=[rank], lag_ns=lag_ns
        )
        if recs:
            return aggregate(recs), suffix
    from argus.replay import why_empty

    raise StacksError(
        f"no stack records of {job} rank {rank} in summary.stacks or raw.stacks: "
        + why_empty(settings, topic_name("raw.stacks", pfx), job, tr, lag_ns=lag_ns, ranks=[rank])
    )
