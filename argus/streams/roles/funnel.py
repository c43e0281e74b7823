"""Funnel/alerter: ``argus.anomalies`` -> ``argus.alerts``.

The router re-keys anomalies by job (a culprit's L1, L2 and L3 findings come from different
groups). Findings go to event-time windows of ``funnel_window_steps`` steps by their last
step. The job tier of the steps roles reports each closed step (its *progress*, with the ids
of the findings it just emitted and, for steps a kernel batch covers, how many L3 scopes will
judge them); each L3 scope reports the window id up to which it judged, with the ids of the
findings it just sent. **A window closes on event time** (docs/pipeline.md, "Time model")
once

* the steps passed its end, and every step finding announced up to its end arrived (they
  travel one hop more than the progress), and
* every L3 scope the job's steps declared (``step_record.collector.kernels``) judged past
  its end; for a job that declares none, every L3 scope seen so far did, or else
  ``funnel_grace_s`` of processing time passed (collectors that do not declare their kernel
  windows get the old, lag-dependent rule).

So a late or lagging L3 finding joins its own window, like a prompt one. Two bounds are
processing time and only end waits: a window the steps passed by ``_MAX_OPEN`` windows
closes anyway (memory), and a job without progress for ``funnel_idle_s`` closes one window
per period (after ``funnel_l3_wait_s`` while declared L3 judgement is missing), so a
finished or stalled job's last window closes and its alerts resolve. Then the pure funnel
(:func:`argus.detectors.funnel.step`) advances by that window: quiet windows count towards
resolving an alert. Findings for a window already closed join the next open one (counted
``argus_late_records_total{role="funnel"}``).

A closed window's verdicts go to ``argus.anomalies`` (level ``funnel``, the records and ids
of :meth:`argus.detectors.funnel.Verdict.to_anomaly`, as ``argus diagnose`` makes them) and
its alerts to ``argus.alerts`` (keyed by their dedup key, with a deterministic ``id``:
:func:`argus.detectors.alert_id.alert_id` of the window). Both leave through an outbox in
the job's state, exactly once (:mod:`argus.streams.outbox`). The funnel state lives in a
table, so a restarted worker neither loses an open alert nor triggers it twice (anomaly ids
seen are kept too, so a replayed anomaly is not counted again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from argus.detectors import funnel
from argus.detectors.alert_id import alert_id
from argus.detectors.findings import Finding
from argus.detectors.funnel.render import with_hosts
from argus.routing import Routing
from argus.streams import metrics
from argus.streams.roles.context import RoleContext, remember
from argus.streams.roles.outbox import OutboxEntry, entry
from argus.streams.roles.state import FunnelJobState

__all__ = ["Funnel", "finding_from_anomaly"]

_MAX_OPEN = 64
"""Windows the steps may run ahead of the funnel's oldest open window (memory bound)."""

_FIELDS = (
    "job",
    "level",
    "kind",
    "group_kind",
    "group_id",
    "phase",
    "kernel",
    "stream",
    "window_start_step",
    "window_end_step",
    "window_start_ns",
    "window_end_ns",
    "score",
    "threshold",
    "baseline",
    "observed",
    "unit",
)


def finding_from_anomaly(rec: Mapping[str, Any]) -> Finding:
    """The :class:`Finding` an ``anomaly`` record was made from (inverse of ``to_anomaly``)."""
    return Finding(
        ranks=tuple(rec.get("ranks", ())),
        evidence=dict(rec.get("evidence") or {}),
        **{k: rec[k] for k in _FIELDS if k in rec},
    )


class Funnel:
    """The funnel role of one job (key ``job``): event-time windows of findings, judged by
    :func:`argus.detectors.funnel.step`; verdicts and alerts go to the state's outbox
    (entries by :attr:`incarnation`), which the driver sends."""

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.cfg = ctx.detectors.funnel
        self.groups = Routing.from_config(ctx.detectors.routing).groups  # who are peers
        self.w = ctx.pcfg.funnel_window_steps
        self.grace = ctx.pcfg.funnel_grace_s
        self.idle = ctx.pcfg.funnel_idle_s
        self.l3_wait = max(ctx.pcfg.funnel_l3_wait_s, self.idle)
        self.resumed: set[str] = set()  # jobs whose state this process has touched
        self.incarnation = ""  # the sending process's id, set by the driver (outbox entries)
        # called with (first step, last step, output) of each closed window (offline drivers)
        self.on_window: Callable[[int, int, funnel.FunnelOutput], None] | None = None
        # the findings of each open window, under job|window (``buckets`` in the job's state
        # counts them): under lag many windows wait for L3, and one state entry per job
        # outgrew a 1 MB changelog record
        self.buckets = ctx.table("funnel-buckets")
        # rank -> host per job, from the steps' progress (written when it changes): the
        # alerts name the culprit's hosts (render.with_hosts)
        self.hosts = ctx.table("funnel-hosts")

    def new(self, key: str) -> FunnelJobState:
        return FunnelJobState(
            fs=funnel.FunnelState().to_dict(),
            buckets={},
            closed=None,
            progress=-1,
            passed={},
            t_progress=0.0,
            l3={},
            l3n={},
            seen=[],
            outbox=[],
            expect={},
        )

    def _start(self, st: FunnelJobState, step: int, now: float) -> None:
        """First progress of the job: its windows start at that step's window, or at the
        earliest window a finding that came before it belongs to (windows before are not
        ours)."""
        if st["closed"] is None:
            first = min([step // self.w, *(int(k) for k in st["buckets"])])
            st["closed"] = first - 1
            st["t_progress"] = now

    async def add(self, job: str, st: FunnelJobState, m: dict[str, Any], now: float) -> None:
        self._resumed(job, st, now)
        if "scope" in m:  # L3Progress
            st["l3"][m["scope"]] = max(int(m["upto"]), int(st["l3"].get(m["scope"], -1)))
            self._expect(st, m)
            return
        if "progress" in m:  # StepProgress
            self._start(st, int(m["progress"]), now)
            st["progress"] = max(st["progress"], int(m["progress"]))
            st["t_progress"] = now
            if m.get("l3n"):  # L3 scopes that will judge this step's kernels
                win = str(int(m["progress"]) // self.w)
                need = st["l3n"]
                need[win] = max(int(need.get(win, 0)), int(m["l3n"]))
            if m.get("hosts"):
                known = self.hosts.get(job) or {}
                if any(known.get(r) != h for r, h in m["hosts"].items()):
                    self.hosts[job] = {**known, **m["hosts"]}
            self._expect(st, m)
            return
        st["expect"].pop(m["id"], None)
        if not remember(st["seen"], m["id"]):
            metrics.DUPLICATES.labels("funnel").inc()
            return
        k = int(m["window_end_step"]) // self.w
        if st["closed"] is not None and k <= st["closed"]:
            metrics.LATE.labels("funnel").inc()
            k = st["closed"] + 1
        bucket = f"{job}|{k}"  # a table entry per window: a job's state stays small
        self.buckets[bucket] = [*(self.buckets.get(bucket) or []), m]
        st["buckets"][str(k)] = int(st["buckets"].get(str(k), 0)) + 1

    @staticmethod
    def _expect(st: FunnelJobState, m: dict[str, Any]) -> None:
        """Findings a progress message names: sent before it, still on their way (one hop
        more, through ``argus.anomalies``); the windows they belong to wait for them."""
        expect = st["expect"]
        for i, end in (m.get("ids") or {}).items():
            if i not in st["seen"]:
                expect[i] = int(end)

    def _resumed(self, job: str, st: FunnelJobState, now: float) -> bool:
        """First sight of a job's state in this process (after a restart): the time the
        funnel itself was down is not the job's idleness, or its open alerts would resolve
        and trigger anew; count idleness from now."""
        if job in self.resumed:
            return False
        self.resumed.add(job)
        st["t_progress"] = max(float(st["t_progress"]), now)
        return True

    async def tick(self, job: str, st: FunnelJobState, now: float) -> bool:
        """Close every window whose sources passed it (event time), then the bounds."""
        if st["closed"] is None:
            return False
        changed = self._resumed(job, st, now)
        while True:
            k = st["closed"] + 1
            end = (k + 1) * self.w - 1
            idle = now - st["t_progress"]
            judged = self._l3_judged(st, k, end)
            if st["progress"] >= end and not self._awaited(st, end) and judged is not False:
                if judged is None:  # undeclared kernels: the old grace
                    t = st["passed"].setdefault(str(k), now)
                    changed = changed or t == now
                    if now - t < self.grace:
                        break
            elif st["progress"] >= end + _MAX_OPEN * self.w:
                metrics.WINDOWS.labels("funnel", "incomplete").inc()  # memory bound
            elif (st["buckets"] or st["fs"]["culprits"] or st["progress"] >= end) and (
                (idle >= self.idle and judged is not False) or idle >= self.l3_wait
            ):
                st["t_progress"] = now  # one window per idle period
            else:
                break
            await self._close(job, st, k)
            changed = True
        return changed

    def _l3_judged(self, st: FunnelJobState, k: int, end: int) -> bool | None:
        """Whether L3 judged window ``k`` (last step ``end``): True/False, or None when the
        job declares no kernel windows for it but L3 scopes of it are known (undecidable on
        event time: the caller falls back to the grace)."""
        need = int(st["l3n"].get(str(k), 0))
        done = sum(1 for w in st["l3"].values() if w >= end)
        if need:
            return done >= need
        if not st["l3"] or done == len(st["l3"]):
            return True
        return None

    @staticmethod
    def _awaited(st: FunnelJobState, end: int) -> bool:
        """Step findings up to step ``end`` announced by a progress message, not yet here."""
        return any(e <= end for e in st["expect"].values())

    async def _close(self, job: str, st: FunnelJobState, k: int) -> None:
        held = self.buckets.get(f"{job}|{k}") if st["buckets"].pop(str(k), None) else None
        if held is not None:
            del self.buckets[f"{job}|{k}"]
        findings = [finding_from_anomaly(f) for f in held or ()]
        st["passed"].pop(str(k), None)
        st["l3n"].pop(str(k), None)
        st["closed"] = k
        end = (k + 1) * self.w - 1
        st["expect"] = {i: e for i, e in st["expect"].items() if e > end}  # late now
        fs, out = funnel.step(
            funnel.FunnelState.from_dict(st["fs"]), findings, self.cfg, groups=self.groups
        )
        hosts = {int(r): h for r, h in (self.hosts.get(job) or {}).items()}
        for a in out.alerts if hosts else ():  # in place: the state's copy for the resolve too
            a.update(with_hosts(a, hosts))
        st["fs"] = fs.to_dict()
        if self.on_window is not None:
            self.on_window(k * self.w, end, out)
        # verdicts and alerts leave through the outbox, after the state that knows of them
        st["outbox"].extend(_outbox(self.incarnation, out, (k * self.w, end), time.time_ns()))


def _outbox(
    by: str, out: funnel.FunnelOutput, window: tuple[int, int], detected_ns: int
) -> Sequence[OutboxEntry]:
    """Outbox entries of one closed window (steps ``window``, inclusive): each verdict's
    ``anomaly`` record (level ``funnel``; ``detected_ns``: the close, processing time), then
    the alerts, each with its deterministic ``id``."""
    entries = []
    for v in out.verdicts:
        rec = v.to_anomaly(detected_ns=detected_ns)
        key = f"{rec['job']}/{rec['group_kind']}/{rec['group_id']}"
        entries.append(entry("anomalies", key, "anomaly", rec, by=by))
    for a in out.alerts:
        rec = {**a, "id": alert_id(a["dedup_key"], a["action"], *window)}
        entries.append(entry("alerts", rec["dedup_key"], "alert", rec, by=by))
    return entries
