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
    "HotStack",
    "StacksError",
    "aggregate",
    "hottest",
    "hottest_leaves",
    "stacks_from_kafka",
    "to_folded",
    "to_speedscope",
    "to_text",
]

_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^():]+):(?P<line>\d+)\)$")


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


def to_speedscope(counts: Mapping[str, int], *, name: str) -> dict[str, Any]:
    """A speedscope file (https://www.speedscope.app/file-format-schema.json), one sampled
    profile whose weights are sample counts."""
    frames: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    samples: list[list[int]] = []
    weights: list[int] = []
    for stack, n in sorted(counts.items()):
        if n <= 0:
            continue
        ids = []
        for fr in stack.split(";"):
            if fr not in index:
                index[fr] = len(frames)
                m = _FRAME.match(fr)
                if m:
                    frames.append({"name": m["name"], "file": m["file"], "line": int(m["line"])})
                else:
                    frames.append({"name": fr})
            ids.append(index[fr])
        samples.append(ids)
        weights.append(int(n))
    total = sum(weights)
    return {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "name": name,
        "exporter": "argus-trace",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": [
            {
                "type": "sampled",
                "name": name,
                "unit": "none",
                "startValue": 0,
                "endValue": total,
                "samples": samples,
                "weights": weights,
            }
        ],
    }


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
    raise StacksError(f"no stack records of {job} rank {rank} in summary.stacks or raw.stacks")
