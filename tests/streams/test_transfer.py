"""Group-wide faults through the engine's steps roles: each rank block reduces its own groups'
collectives to transfer times, the job tier compares every group of a kind per funnel window
(:mod:`argus.streams.roles.transfer`), whatever the block size."""

from __future__ import annotations

from typing import Any

import pytest

from argus.sim.simulate import SimRun, simulate
from argus.streams.memory import replay_stream
from argus.streams.pipeline_config import PipelineConfig


def _transfer(scenario: str, block_ranks: int) -> tuple[Any, list[tuple[str, str, int]]]:
    run = SimRun.make(scenario, ranks=64, steps=30, seed=3, kernels=False)
    recs = [r for t, _k, r in simulate(run) if t == "raw.steps"]
    res = replay_stream(recs, pcfg=PipelineConfig(steps_block_ranks=block_ranks))
    return run.truth, sorted(
        (a["group_kind"], a["group_id"], a["window_end_step"])
        for a in res.anomalies
        if a["evidence"].get("role") == "transfer"
    )


@pytest.mark.parametrize("block_ranks", [64, 24])
def test_a_slow_link_names_its_group_from_the_steps_alone(block_ranks: int) -> None:
    """``link-degradation``: one EDP group's expert-gradient collective 6x slower, every
    member equally (no rank stands out, L2 is blind; before, only L3's kernels named it)."""
    truth, found = _transfer("link-degradation", block_ranks)
    assert truth.group is not None
    assert found == [(*truth.group, 19), (*truth.group, 29)]  # every window after onset 7


def test_a_healthy_job_names_no_group() -> None:
    assert _transfer("healthy", 16)[1] == []


@pytest.mark.parametrize("block_ranks", [64, 24])
def test_a_slow_nic_its_pipeline_hides_names_its_host(block_ranks: int) -> None:
    """``mega-slow-nic`` on tp 8 x pp 4 x dp 4: the node's DP groups are all of its stage's
    and its pipelines' summed receives are bubbles; the blocks' receive rows (each rank's
    shortest receive a step) tell its links apart, so the host is named, not its stage
    (before: ``dp/pp<stage>``)."""
    run = SimRun.make("mega-slow-nic", layout="dp=4,tp=8,pp=4", steps=30, seed=3, kernels=False)
    recs = [r for t, _k, r in simulate(run) if t == "raw.steps"]
    res = replay_stream(recs, pcfg=PipelineConfig(steps_block_ranks=block_ranks))
    found = sorted(
        (a["group_kind"], a["group_id"], a["window_end_step"])
        for a in res.anomalies
        if a["evidence"].get("role") == "transfer"
    )
    host = run.truth.host
    assert host is not None and run.truth.onset_step == 7
    assert found == [("host", host, 19), ("host", host, 29)]
    members = {
        a["evidence"]["members"] for a in res.anomalies if a["evidence"].get("role") == "transfer"
    }
    assert members == {str(list(run.truth.ranks)).replace(" ", " ")}


def test_group_members_travel_once_and_rows_after_them_use_the_kept_ones() -> None:
    """A block's group rows carry their members only with its hosts (first digest, then
    every 64 steps); the job tier keeps them (``steps-members``) and judges rows without
    them the same as rows with them; a group whose members it never learned is left out."""
    from argus.detectors.config import DetectorsConfig
    from argus.detectors.inputs import group_windows
    from argus.routing import Routing
    from argus.streams.memory import _MemoryCtx
    from argus.streams.roles.transfer import TransferWindows, transfer_rows

    run = SimRun.make("mega-slow-nic", layout="dp=4,tp=8,pp=4", steps=20, seed=3, kernels=False)
    recs = [r for t, _k, r in simulate(run) if t == "raw.steps"]
    job = recs[0]["job"]

    def judge(full_every: int | None) -> list[tuple[str, str, str]]:
        ctx = _MemoryCtx(DetectorsConfig(), PipelineConfig())
        tw = TransferWindows(ctx)  # type: ignore[arg-type]
        tw.keep_hosts(job, {str(r["rank"]): r["host"] for r in recs if r["step"] == 0})
        found = []
        for s in range(20):
            rs = [r for r in recs if r["step"] == s]
            full = full_every is not None and s % full_every == 0
            rows = transfer_rows(group_windows(rs, Routing.default()), rs, members=full)
            if full:
                assert all(m for k, _g, _p, m, _t in rows)
            else:
                assert all(m == [] for k, _g, _p, m, _t in rows if not k.endswith(">rx"))
            tw.keep(job, s, "b0", rows)
            found += tw.closed(job, s, 1e9, (0, 1), 1)
        return [(f.group_kind, f.group_id, f.evidence["members"]) for f in found]

    host = run.truth.host
    with_members = judge(1)
    assert [k[:2] for k in with_members] == [("host", host)]  # steps 10-19 (onset 5)
    assert judge(64) == with_members
    # never learned: the collectives are left out, the receives alone name no host
    assert all(k[0] != "host" for k in judge(None))


@pytest.mark.parametrize(
    ("scenario", "layout"),
    [
        ("mega-slow-nic", "dp=4,tp=4,pp=4"),
        ("link-degradation", "dp=4,ep=2,tp=2,pp=2"),
        ("mega-rank-stops", "dp=4,tp=2,pp=4"),
    ],
)
def test_batch_rows_are_the_windows_rows(scenario: str, layout: str) -> None:
    """The steps roles reduce batches (:func:`batch_rows`, one call per batch and phase):
    the same rows, in the same order, as :func:`transfer_rows` of the batches' groups one
    window at a time (and :func:`batch_columns`, their columns, the same key lists for the
    same batches), also where ranks lack a phase (NaN among a group's ranks), a step is
    missing ranks, or the batches are of several steps (the windows' path)."""
    import random

    import numpy as np

    from argus.detectors.columnar import Topology, group_batches
    from argus.routing import Routing
    from argus.streams.roles.transfer import batch_columns, batch_rows, columns, transfer_rows

    run = SimRun.make(scenario, layout=layout, steps=6, seed=3, kernels=False)
    recs = [r for t, _k, r in simulate(run) if t == "raw.steps"]
    rnd = random.Random(5)
    for r in recs:  # some ranks lose a phase or the whole record
        if rnd.random() < 0.1:
            r["phases"] = [p for p in r["phases"] if rnd.random() < 0.7]
    recs = [r for r in recs if rnd.random() < 0.95]
    topo = Topology(Routing.default())
    job = recs[0]["job"]
    gaps = 0  # groups with ranks lacking a collective or p2p phase
    for s in [[0], [1], [4], [2, 3]]:
        rs = [r for r in recs if r["step"] in s]
        batches = group_batches(rs, topo, job=job)
        wins = sorted((w for b in batches for w in b.windows()), key=lambda w: w.group_id)
        wins.sort(key=lambda w: w.group_kind)
        for members in (True, False):
            rows = batch_rows(batches, rs, members=members)
            assert rows == transfer_rows(wins, rs, members=members)
            cols = batch_columns(batches, rs, members=members)
            assert cols == columns(rows)
            again = batch_columns(batches, rs, members=members)  # the same shape: its lists
            assert again == cols
            if len(s) == 1:  # (batches of several steps take the rows' path)
                assert all(again[c] is cols[c] for c in "kgp")  # type: ignore[literal-required]
        gaps += sum(
            int(np.isnan(b.durations_ns[..., j]).any(axis=(1, 2)).sum())
            for b in batches
            for j, sk in enumerate(b.stream_kinds)
            if sk in ("comm", "p2p")
        )
    assert rows and gaps


def _reference_stats(rows: Any, n: int, members: dict[str, list[int]]) -> list[Any]:
    """``transfer._stats`` and ``groupwide.receive_stats`` of ``3c2f990``, row by row."""
    import numpy as np

    from argus.detectors.groupwide import GroupStat, stage_of

    by: dict[Any, Any] = {}
    rx: dict[int, list[Any]] = {}
    for i, rs in rows:
        for kind, gid, phase, mem, t in rs:
            if kind.endswith(">rx"):
                if t is not None:
                    rx.setdefault(i, []).append((kind[:-3], gid, phase, *mem, t))
                continue
            key = (kind, gid, phase)
            if key not in by:
                m = mem or members.get(f"{kind}|{gid}") or []
                if not m:
                    continue
                by[key] = (tuple(int(r) for r in m), np.full(n, np.nan))
            if t is not None:
                by[key][1][i] = t
    out = [GroupStat(k, g, p, m, stage_of(g), t) for (k, g, p), (m, t) in sorted(by.items())]
    at: dict[Any, int] = {}
    stages: dict[str, set[int]] = {}
    first: dict[Any, int] = {}
    for _i, rs in sorted(rx.items()):
        for kind, gid, phase, rank, stage, _e, _ns in rs:
            at[(kind, gid, stage)] = rank
            stages.setdefault(kind, set()).add(stage)
            first.setdefault((kind, gid, phase, rank), stage)
    has: dict[Any, set[int]] = {}
    for (kind, _gid, phase, _rank), stage in first.items():
        has.setdefault((kind, phase), set()).add(stage)
    sides = {}
    for (kind, phase), here in has.items():
        lo, hi = min(stages[kind]), max(stages[kind])
        if lo != hi and lo not in here and hi in here:
            sides[(kind, phase)] = -1
        elif lo != hi and hi not in here and lo in here:
            sides[(kind, phase)] = 1
    rbys: dict[Any, Any] = {}
    for i, rs in sorted(rx.items()):
        for kind, gid, phase, rank, stage, entries, ns in rs:
            if (kind, phase) in sides:
                v = rbys.setdefault((kind, gid, phase, rank), (stage, [], np.full(n, np.nan)))
                v[1].append(entries)
                v[2][i] = ns
    for (kind, gid, phase, rank), (stage, cnt, t) in sorted(rbys.items(), key=lambda kv: kv[0]):
        sender = at.get((kind, gid, stage + sides[(kind, phase)]))
        if sender is not None:
            r, w = int(rank), float(np.median(cnt))
            out.append(GroupStat(kind, gid, phase, (r, int(sender)), int(stage), t, r, w))
    return out


@pytest.mark.parametrize("seed", range(200))
def test_window_stats_read_as_columns_are_the_rows_one_by_one(seed: int) -> None:
    """The job tier reads each part's rows as columns (:func:`transfer._stats`: a part's
    receive rows as its tail or mixed in, times None, members missing or from the kept ones,
    a rank's stage changing, receives with and without a direction): the same stats, float
    for float, as the rows read one by one (``3c2f990``'s code)."""
    import random

    import numpy as np

    from argus.streams.roles.transfer import _stats

    rnd = random.Random(seed)
    n = rnd.randint(1, 5)
    rows = []
    for i in rnd.sample(range(n), rnd.randint(0, n)) * rnd.choice([1, 2]):
        grp = [
            (
                rnd.choice(["dp", "tp"]),
                f"x{rnd.randrange(3)}",
                rnd.choice(["ar", "ag"]),
                rnd.choice([[], [1, 2], [3]]),
                rnd.choice([None, 1.0, float(rnd.randint(1, 9))]),
            )
            for _ in range(rnd.randint(0, 6))
        ]
        rx = []
        for _ in range(rnd.randint(0, 12)):
            stage = rnd.randrange(rnd.randint(1, 4))
            rx.append(
                (
                    rnd.choice(["pp>rx", "pp2>rx"]),
                    f"g{rnd.randrange(3)}",
                    rnd.choice(["a", "b", "c"]),
                    [rnd.randrange(8), stage, rnd.randint(1, 4)],
                    rnd.choice([None, 1.0, 2.5, float(rnd.randint(1, 99))]),
                )
            )
        part = grp + rx
        if rnd.random() < 0.5:
            rnd.shuffle(part)
        rows.append((i, part))
    members = {"dp|x0": [5, 6]} if rnd.random() < 0.5 else {}
    got, want = _stats(rows, n, members), _reference_stats(rows, n, members)
    assert [
        (g.group_kind, g.group_id, g.phase, g.members, g.stage, g.rank, g.weight) for g in got
    ] == [(g.group_kind, g.group_id, g.phase, g.members, g.stage, g.rank, g.weight) for g in want]
    assert all(
        np.array_equal(a.t_ns, b.t_ns, equal_nan=True) for a, b in zip(got, want, strict=True)
    )


@pytest.mark.parametrize("seed", range(80))
def test_kept_columns_sharing_their_keys_give_the_rows_stats(seed: int) -> None:
    """Parts sent as columns or as rows (a block from before columns) and kept by the job
    tier (:meth:`TransferWindows.keep`: a part's key columns equal to its previous step's are
    kept as those very lists, and :func:`transfer._stats` finds their places once): the same
    stats, float for float, as the rows read one by one (``3c2f990``'s code), whether a
    part's keys repeat, change, or come as rows."""
    import random

    import numpy as np

    from argus.detectors.config import DetectorsConfig
    from argus.streams.memory import _MemoryCtx
    from argus.streams.roles.transfer import TransferWindows, _stats, columns

    rnd = random.Random(seed)
    n = rnd.randint(2, 6)
    tw = TransferWindows(_MemoryCtx(DetectorsConfig(), PipelineConfig()))
    keys: dict[str, tuple[list[Any], list[Any]]] = {}
    sent: list[tuple[int, str, list[Any]]] = []
    for i in range(n):
        for part in ("b0", "b1", "job"):
            if rnd.random() < 0.15:
                continue
            if part not in keys or rnd.random() < 0.2:  # new keys: a changed group or rank
                grp = [
                    (rnd.choice(["dp", "tp"]), f"x{g}", ph, rnd.choice([[], [g, 9]]))
                    for g in rnd.sample(range(5), rnd.randint(0, 4))
                    for ph in ("ar", "ag")[: rnd.randint(1, 2)]
                ]
                rx = [
                    (rnd.choice(["pp>rx", "pp2>rx"]), f"g{r % 2}", ph, r, rnd.randrange(3))
                    for r in rnd.sample(range(8), rnd.randint(0, 6))
                    for ph in rnd.sample(["a", "b", "c"], rnd.randint(1, 2))
                ]
                keys[part] = (grp, rx)
            grp, rx = keys[part]
            rows = [
                (k, g, p, m if rnd.random() < 0.3 else [], rnd.choice([None, 1.0, 3.5]))
                for k, g, p, m in grp
            ] + [
                (k, g, p, [r, s, rnd.randint(1, 3)], rnd.choice([None, 2.0, float(r + 1)]))
                for k, g, p, r, s in rx
            ]
            tw.keep("j", i, part, columns(rows) if rnd.random() < 0.8 else rows)
            if rows:
                sent.append((i, part, rows))
    kept = [(i, tw.table[f"j|{i}|{part}"]) for i, part, _ in sent]
    members = {"dp|x0": [5, 6]} if rnd.random() < 0.5 else {}
    got = _stats(kept, n, members)
    want = _reference_stats([(i, rows) for i, _, rows in sent], n, members)
    assert [
        (g.group_kind, g.group_id, g.phase, g.members, g.stage, g.rank, g.weight) for g in got
    ] == [(g.group_kind, g.group_id, g.phase, g.members, g.stage, g.rank, g.weight) for g in want]
    assert all(
        np.array_equal(a.t_ns, b.t_ns, equal_nan=True) for a, b in zip(got, want, strict=True)
    )


def test_a_part_s_keys_are_kept_once_across_steps() -> None:
    """A part's key columns equal to its previous step's are kept as those lists (the window
    holds them once); a changed column is kept as it came."""
    from argus.detectors.config import DetectorsConfig
    from argus.streams.memory import _MemoryCtx
    from argus.streams.roles.transfer import TransferWindows, columns

    tw = TransferWindows(_MemoryCtx(DetectorsConfig(), PipelineConfig()))
    rows = [("dp", "x0", "ar", [1, 2], 1.0), ("pp>rx", "g0", "a", [1, 0, 2], 3.0)]
    tw.keep("j", 0, "b0", columns(rows))
    tw.keep("j", 1, "b0", [("dp", "x0", "ar", [], 2.0), ("pp>rx", "g0", "a", [1, 0, 3], 4.0)])
    a, b = tw.table["j|0|b0"], tw.table["j|1|b0"]
    assert a["k"] is b["k"] and a["g"] is b["g"] and a["p"] is b["p"]
    assert all(x is y for x, y in zip(a["rx"][:5], b["rx"][:5], strict=True))
    assert b["t"] == [2.0] and "m" not in b and tw.members["j"] == {"dp|x0": [1, 2]}
    tw.keep("j", 2, "b0", columns([("dp", "x1", "ar", [], 4.0)]))
    c = tw.table["j|2|b0"]
    assert c["k"] is b["k"] and c["g"] == ["x1"] and c["g"] is not b["g"]
