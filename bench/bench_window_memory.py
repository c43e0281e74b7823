"""Memory held by open windows at 1,024 ranks (issue 17): bytes of every role's state and
tables, as their faust changelogs would hold them.

The engine's roles (``argus.streams.memory._Engine``: the steps block and job tiers, the L3
windows, the funnel) run in memory over a simulated job (compute straggler, kernel batches
every step, compressed as the live compressor does). Every table write is sized as its
changelog record: the JSON key plus the compact JSON value (faust's ``json`` serializer);
the roles' per-key states (the agents' ``*-state`` tables) are sized the same way at sample
points (every ``--sample`` records and at each step's end). Two engines read the same records:

* **steady**: every rank reports every step and kernel window, in event order;
* **worst**: what the time model lets wait longest without closing incomplete. One rank per
  rank block (``steps_block_ranks``) stops after ``--stop-at`` (steps and kernels), so every
  block step waits until the peers' watermark passed it by ``lateness_steps`` (32) and the
  L3 scopes holding those ranks wait ``l3_lateness_windows`` (4) windows; one more L3 scope
  (none of its ranks stopped) delivers its kernel windows ``--scope-lag`` windows late
  (default ``l3_lateness_windows``), so the funnel's windows wait for it;
* **worst-l3** (``--cases worst-l3``): one rank of every L3 scope stops instead, so every
  scope holds its block of ``l3_windows`` windows plus ``l3_lateness_windows`` at once (and
  every block too when each holds one of those ranks).

Per role: the peak over the run (table writes are tracked exactly, states at the sample
points) and the steady level (mean over the second half of the run's samples), with the
tables making up the peak. Bounded lists that fill only over long jobs (L1 history 512 steps,
emitted and seen ids 512 each) are reported with their fill.

    .venv/bin/python bench/bench_window_memory.py                  # 1,024 ranks, 80 steps
    .venv/bin/python bench/bench_window_memory.py --cases worst-l3
    .venv/bin/python bench/bench_window_memory.py --ranks 256 --steps 48 --cases worst
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from argus.detectors.config import DetectorsConfig  # noqa: E402
from argus.routing import Routing, rank_of  # noqa: E402
from argus.sim.simulate import SimRun, simulate  # noqa: E402
from argus.streams.memory import _Engine, _MemoryCtx  # noqa: E402
from argus.streams.pipeline_config import PipelineConfig  # noqa: E402
from argus.summaries.summary_record import summarize_batch  # noqa: E402

ROLES = ("block tier", "job tier", "L3", "funnel")
TABLE_ROLE = {  # the roles' data tables (ctx.table names) -> role
    "steps-cells": "block tier",
    "steps-block-history": "block tier",
    "steps-block-windows": "block tier",
    "steps-history": "job tier",
    "steps-digests": "job tier",
    "steps-transfer": "job tier",
    "steps-hosts": "job tier",
    "steps-members": "block tier",
    "funnel-hosts": "funnel",
    "l3-names": "L3",
    "funnel-buckets": "funnel",
}
STATE_TABLE = {  # _Engine.state names -> (role, the live agent's state table)
    "blocks": ("block tier", "steps-blocks-state"),
    "steps": ("job tier", "steps-windows-state"),
    "l3": ("L3", "l3-windows-state"),
    "funnel": ("funnel", "funnel-windows-state"),
}


def _size(key: str, value: Any) -> int:
    """Bytes of one changelog record: JSON key + compact JSON value (faust's json codec)."""
    return len(json.dumps(key)) + len(json.dumps(value, separators=(",", ":")))


@dataclass
class _Account:
    """Running bytes per table, states per role (last sample), peaks per role."""

    tables: dict[str, int] = field(default_factory=dict)  # table -> bytes now
    entries: dict[str, int] = field(default_factory=dict)  # table -> entries now
    states: dict[str, int] = field(default_factory=dict)  # state table -> bytes (last sample)
    state_keys: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)  # role -> peak bytes
    at_peak: dict[str, dict[str, int]] = field(default_factory=dict)  # role -> tables at peak
    samples: list[dict[str, int]] = field(default_factory=list)  # role -> bytes, per sample
    written: Counter[str] = field(default_factory=Counter)  # table -> bytes of new entries
    added: Counter[str] = field(default_factory=Counter)  # table -> new entries
    largest: Counter[str] = field(default_factory=Counter)  # table -> largest entry (bytes)
    l3_cells: int = 0  # most L3 cells held at a sample (process memory, no changelog)

    def role_bytes(self, role: str) -> int:
        own = [t for t, r in TABLE_ROLE.items() if r == role]
        st = [s for _, (r, s) in STATE_TABLE.items() if r == role]
        return sum(self.tables.get(t, 0) for t in own) + sum(self.states.get(s, 0) for s in st)

    def note(self, role: str) -> None:
        n = self.role_bytes(role)
        if n > self.peak.get(role, -1):
            self.peak[role] = n
            self.at_peak[role] = {
                t: self.tables.get(t, 0) for t, r in TABLE_ROLE.items() if r == role
            } | {s: self.states.get(s, 0) for _, (r, s) in STATE_TABLE.items() if r == role}

    def write(self, table: str, delta: int, dentries: int) -> None:
        self.tables[table] = self.tables.get(table, 0) + delta
        self.entries[table] = self.entries.get(table, 0) + dentries
        if delta > 0:
            self.note(TABLE_ROLE.get(table, "other"))


class _SizedTable(MutableMapping[str, Any]):
    """A role's table (a dict) whose writes are sized as changelog records."""

    def __init__(self, name: str, acct: _Account) -> None:
        self.name, self.acct = name, acct
        self.data: dict[str, Any] = {}
        self.sizes: dict[str, int] = {}

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        n = _size(key, value)
        old = self.sizes.get(key)
        self.sizes[key] = n
        self.data[key] = value
        self.acct.write(self.name, n - (old or 0), 0 if old is not None else 1)
        self.acct.largest[self.name] = max(self.acct.largest[self.name], n)
        if old is None:
            self.acct.written[self.name] += n
            self.acct.added[self.name] += 1

    def __delitem__(self, key: str) -> None:
        del self.data[key]
        self.acct.write(self.name, -self.sizes.pop(key), -1)

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


class _SizedCtx(_MemoryCtx):
    acct: _Account

    def table(self, name: str) -> Any:
        t = self.tables.get(name)
        if t is None:
            if name not in TABLE_ROLE:
                raise KeyError(f"table {name!r}: add it to TABLE_ROLE (which role holds it)")
            t = self.tables[name] = _SizedTable(name, self.acct)  # type: ignore[assignment]
        return t


class _Case:
    """One engine over the records, with its accounting; ``stopped`` ranks send nothing from
    ``--stop-at`` on, the ``lagging`` scope's kernel windows come ``--scope-lag`` late."""

    def __init__(self, name: str, pcfg: PipelineConfig) -> None:
        self.name = name
        self.acct = _Account()
        ctx = _SizedCtx(DetectorsConfig(), pcfg)
        ctx.acct = self.acct
        self.ctx = ctx
        self.eng = _Engine(ctx, funnel=True)
        self.stopped: set[int] = set()
        self.lagging: str | None = None
        self.delayed: list[tuple[int, dict[str, Any]]] = []  # (release after window, summary)

    def sample(self) -> None:
        """Size every role state now; note the roles' peaks and one sample."""
        states: Counter[str] = Counter()
        keys: Counter[str] = Counter()
        for (name, key), st in self.eng.state.items():
            states[STATE_TABLE[name][1]] += _size(key, st)
            keys[STATE_TABLE[name][1]] += 1
        self.acct.states = dict(states)
        self.acct.state_keys = dict(keys)
        self.acct.l3_cells = max(self.acct.l3_cells, len(self.eng.l3.cells))
        for role in ROLES:
            self.acct.note(role)
        self.acct.samples.append({r: self.acct.role_bytes(r) for r in ROLES})

    async def release(self, upto: int) -> int:
        """Deliver the lagging scope's summaries due by window ``upto``; returns how many."""
        due = [rec for w, rec in self.delayed if w <= upto]
        self.delayed = [(w, rec) for w, rec in self.delayed if w > upto]
        for rec in due:
            await self.eng.summary(rec)
        return len(due)


def _plan(run: SimRun, cases: dict[str, _Case], pcfg: PipelineConfig) -> int:
    """Set each case's stopped ranks and lagging scope; returns the number of L3 scopes.

    ``worst``: the rank in the middle of each rank block (layout positions) and one scope
    none of whose ranks stopped; ``worst-l3``: the middle rank of each L3 scope (the scopes'
    windows all wait ``l3_lateness_windows``; the blocks too, when each holds one)."""
    routing = Routing.from_config(DetectorsConfig().routing)
    lay = run.layout
    by_pos = {rank_of(lay.coords(r)): r for r in range(lay.world)}
    blk = pcfg.steps_block_ranks
    scope = {r: routing.group_for_kind(lay.coords(r), "dp") for r in range(lay.world)}
    members: dict[str, list[int]] = {}
    for r in sorted(range(lay.world), key=lambda r: rank_of(lay.coords(r))):
        members.setdefault(scope[r], []).append(r)
    for c in cases.values():
        if c.name == "worst":
            c.stopped = {
                by_pos[min(b * blk + blk // 2, lay.world - 1)] for b in range(-(-lay.world // blk))
            }
            hit = {scope[r] for r in c.stopped}
            c.lagging = next((g for g in members if g not in hit), None)
        elif c.name == "worst-l3":
            c.stopped = {rs[len(rs) // 2] for rs in members.values()}
        elif c.name != "steady":
            raise SystemExit(f"--cases: unknown case {c.name!r} (steady, worst, worst-l3)")
    return len(members)


async def _drive(
    run: SimRun, cases: dict[str, _Case], *, stop_at: int, scope_lag: int, every: int
) -> None:
    """Feed the simulated records to each case in event order (module doc)."""
    n = 0
    current = -1

    def tick(k: int = 1) -> None:
        nonlocal n
        for _ in range(k):
            n += 1
            if n % every == 0:
                for c in cases.values():
                    c.sample()

    for suffix, _key, rec in simulate(run):
        if suffix == "raw.steps":
            step = int(rec["step"])
            if step != current:  # the previous step's records and kernel windows are in
                for c in cases.values():
                    tick(await c.release(current))
                    c.sample()
                current = step
            for c in cases.values():
                if not (step >= stop_at and int(rec["rank"]) in c.stopped):
                    await c.eng.step(rec)
        else:
            summ = summarize_batch(rec)
            r, w = int(summ["rank"]), int(summ["window_id"])
            for c in cases.values():
                if w >= stop_at and r in c.stopped:
                    continue
                if (
                    c.lagging is not None
                    and c.eng.routing.group_for_kind(summ["coords"], "dp") == c.lagging
                ):
                    c.delayed.append((w + scope_lag, summ))
                    continue
                await c.eng.summary(summ)
        tick()
    for c in cases.values():
        await c.release(current + scope_lag)
        c.sample()


def _kb(n: float) -> str:
    return f"{n / 1024:,.0f} KiB" if n < 10 * 1024**2 else f"{n / 1024**2:,.1f} MiB"


def _report(c: _Case, ranks: int) -> None:
    a = c.acct
    pcfg = c.ctx.pcfg
    half = a.samples[len(a.samples) // 2 :]
    print(f"\n  {c.name}: role | peak | steady (mean, 2nd half) | per rank at peak | peak made of")
    total_peak = 0
    for role in ROLES:
        peak = a.peak.get(role, 0)
        total_peak += peak
        steady = sum(s[role] for s in half) / max(1, len(half))
        parts = ", ".join(f"{t} {_kb(v)}" for t, v in sorted(a.at_peak.get(role, {}).items()) if v)
        print(
            f"    {role:10s} | {_kb(peak):>10s} | {_kb(steady):>10s} | {peak / ranks:8,.0f} B | {parts}"
        )
    print(f"    {'all':10s} | {_kb(total_peak):>10s} (sum of the roles' peaks)")
    f = Counter((x["level"], x["kind"]) for x in c.ctx.anomalies if x.get("level") != "funnel")
    trig = [x for x in c.ctx.alerts if x["action"] == "trigger"]
    print(
        f"    findings {dict(sorted(f.items()))}; verdicts"
        f" {sum(1 for x in c.ctx.anomalies if x.get('level') == 'funnel')}; triggers {len(trig)};"
        f" funnel windows closed {len(c.eng.windows)}; late items {len(c.ctx.rejected)}"
    )
    fill = []
    for (name, key), st in c.eng.state.items():
        if name == "funnel":
            fill.append(f"funnel seen ids {len(st.get('seen', []))}/512 ({key})")
    hist = c.ctx.tables.get("steps-history")
    for key in hist or ():
        h = hist[key]  # type: ignore[index]
        fill.append(f"L1 rows {len(h.get('rows', []))}/512, emitted ids {len(h['emitted'])}/512")
    print(f"    bounded lists: {'; '.join(fill)}")
    cell = a.written["steps-cells"] / max(1, a.added["steps-cells"])
    print(
        f"    mean entry: step record cell {cell:,.0f} B;"
        f" ceilings (every rank's cells held as long as the time model allows): blocks"
        f" {ranks} x {pcfg.lateness_steps + 1} steps = {_kb(ranks * (pcfg.lateness_steps + 1) * cell)},"
        f" L3 cells (process memory, not changelogged) at most {a.l3_cells:,} summaries at a"
        f" sample, bound {ranks} x {pcfg.l3_windows + pcfg.l3_lateness_windows} windows;"
        f" funnel: largest window's findings {_kb(a.largest['funnel-buckets'])}, x 64 open"
        f" windows (its memory bound) = {_kb(64 * a.largest['funnel-buckets'])}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--cases", default="steady,worst", help="of steady, worst, worst-l3")
    ap.add_argument("--stop-at", type=int, default=8, help="step from which one rank a block stops")
    ap.add_argument(
        "--scope-lag", type=int, default=None, help="windows (default l3_lateness_windows)"
    )
    ap.add_argument("--sample", type=int, default=256, help="records between state samples")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    pcfg = PipelineConfig()
    lag = pcfg.l3_lateness_windows if args.scope_lag is None else args.scope_lag
    cases = {n: _Case(n, pcfg) for n in args.cases.split(",")}
    run = SimRun.make("compute-straggler", ranks=args.ranks, steps=args.steps, seed=args.seed)
    t0 = time.perf_counter()
    scopes = _plan(run, cases, pcfg)
    asyncio.run(_drive(run, cases, stop_at=args.stop_at, scope_lag=lag, every=args.sample))
    print(
        f"window memory: {run.layout.world} ranks ({run.layout}), {args.steps} steps, compute"
        f" straggler, kernels every step; lateness_steps {pcfg.lateness_steps}, job tier"
        f" {2 * pcfg.lateness_steps + 1}, l3_lateness_windows {pcfg.l3_lateness_windows},"
        f" blocks of {pcfg.steps_block_ranks} ranks, {scopes} L3 scopes;"
        f" {time.perf_counter() - t0:.0f} s"
    )
    for c in cases.values():
        if c.stopped:
            late = f"; scope {c.lagging} {lag} windows late" if c.lagging else ""
            print(f"  {c.name}: ranks {sorted(c.stopped)} stopped from step {args.stop_at}{late}")
    for c in cases.values():
        _report(c, run.layout.world)


if __name__ == "__main__":
    main()
