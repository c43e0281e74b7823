"""Group-wide and host faults in the steps roles: collectives compared across groups.

:mod:`argus.detectors.groupwide` compares every comparison group's *transfer time* with the
other groups of its kind, so it needs every group of the job at once, while the rank blocks
hold only their own groups. So each block reduces its own groups' collectives to one transfer
time per (group, phase) and step (:func:`transfer_rows`, a few bytes a group) and sends them in
its digest; the job tier adds the groups that span blocks (their windows are joined there
anyway) and, when a step closes the last step of a funnel window (``funnel_window_steps``),
judges that window with :func:`argus.detectors.groupwide.detect_stats`. The findings' window is
the funnel's, so they join the culprits of that window.

Rows wait in the table ``steps-transfer`` under ``job|<step>|<part>`` (``b<block>``, ``job`` for
the spanning groups, ``m`` for the step's iteration time and span) until their window is judged;
the ranks' hosts under ``job`` in ``steps-hosts``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

import numpy as np

from argus.detectors import groupwide
from argus.detectors.findings import Finding
from argus.detectors.l2 import GroupWindow
from argus.streams import metrics
from argus.streams.roles.context import RoleContext
from argus.streams.roles.state import TransferRow

__all__ = ["TransferWindows", "transfer_rows"]


def transfer_rows(windows: Sequence[GroupWindow]) -> list[TransferRow]:
    """One step's transfer time per (group, collective or p2p phase) of ``windows`` (windows
    of that one step): ``(kind, group id, phase, members, ns or None)``."""
    _steps, stats, _it = groupwide.group_stats(windows)
    return [
        (
            g.group_kind,
            g.group_id,
            g.phase,
            list(g.members),
            float(g.t_ns[0]) if g.t_ns.size and math.isfinite(g.t_ns[0]) else None,
        )
        for g in stats
    ]


class TransferWindows:
    """The job tier's cross-group comparison, one judgement per funnel window."""

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.width = ctx.pcfg.funnel_window_steps
        self.cfg = groupwide.GroupwideConfig()
        self.table = ctx.table("steps-transfer")
        self.hosts = ctx.table("steps-hosts")

    def keep(self, job: str, step: int, part: str, rows: Sequence[TransferRow]) -> None:
        """Rows of ``step`` from ``part`` (a block, or ``job`` for the spanning groups)."""
        if rows:
            self.table[f"{job}|{step}|{part}"] = list(rows)

    def keep_hosts(self, job: str, hosts: Mapping[str, str]) -> None:
        known = self.hosts.get(job) or {}
        if any(known.get(r) != h for r, h in hosts.items()):
            self.hosts[job] = {**known, **hosts}

    def closed(
        self, job: str, step: int, iter_ns: float, span: tuple[int, int], blocks: int
    ) -> list[Finding]:
        """``step`` closed (``iter_ns``, its (start, end) ns; the job has ``blocks`` blocks):
        the findings of its funnel window when it is the window's last step, else none."""
        self.table[f"{job}|{step}|m"] = [iter_ns, span[0], span[1]]
        if (step + 1) % self.width:
            return []
        steps = list(range(step + 1 - self.width, step + 1))
        parts = [*(f"b{b}" for b in range(blocks)), "job"]
        meta: list[list[float]] = []
        rows: list[tuple[int, list[TransferRow]]] = []
        for i, s in enumerate(steps):
            for part in [*parts, "m"]:
                v = self.table.get(f"{job}|{s}|{part}")
                if v is None:
                    continue
                del self.table[f"{job}|{s}|{part}"]
                if part == "m":
                    meta.append(v)
                else:
                    rows.append((i, v))
        if not rows or not meta:
            return []
        t0 = time.perf_counter()
        found = groupwide.detect_stats(
            job,
            np.asarray(steps, np.int64),
            _stats(rows, len(steps)),
            float(np.median([m[0] for m in meta])),
            (int(min(m[1] for m in meta)), int(max(m[2] for m in meta))),
            {int(r): h for r, h in (self.hosts.get(job) or {}).items()},
            self.cfg,
        )
        metrics.DETECT_S.labels("L2").observe(time.perf_counter() - t0)
        return found


def _stats(rows: Sequence[tuple[int, Sequence[TransferRow]]], n: int) -> list[groupwide.GroupStat]:
    """Rows of ``n`` steps (``(step index, rows)``) -> one GroupStat per (group, phase)."""
    by: dict[tuple[str, str, str], tuple[tuple[int, ...], np.ndarray]] = {}
    for i, rs in rows:
        for kind, gid, phase, members, t in rs:
            key = (kind, gid, phase)
            if key not in by:
                by[key] = (tuple(int(r) for r in members), np.full(n, np.nan))
            if t is not None:
                by[key][1][i] = t
    return [
        groupwide.GroupStat(kind, gid, phase, members, groupwide.stage_of(gid), t)
        for (kind, gid, phase), (members, t) in sorted(by.items())
    ]
