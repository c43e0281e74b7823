"""``groupwide.detect_stats`` screens each class with one sort (issue 21) and runs ``_slow``
only on the groups and hosts that may be slow: the same findings, float for float, as the
per-group loop it replaced (``groupwide_reference``), on the synthetic jobs of
``test_groupwide`` and on perturbed ones (missing steps, groups and hosts slowed around the
gates, gates loosened so that many verdicts sit near them)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from argus.collectors.topology import Layout
from argus.detectors import groupwide
from tests.detectors import groupwide_reference
from tests.detectors.test_groupwide import DENSE, MOE, MOE_OPS, _hosts, _no_p2p, job, receives

pytestmark = pytest.mark.filterwarnings("ignore:All-NaN slice")  # a step nobody has

SMALL = Layout(tp=2, pp=4, dp=8)
SMALL_MOE = Layout(tp=2, ep=4, dp=4, pp=2)
LOOSE = groupwide.GroupwideConfig(
    min_ratio=1.05,
    z=2.0,
    min_abs_ms=0.0,
    min_step_share=0.0,
    group_ratio=1.1,
    group_z=2.0,
    stage_ratio=1.1,
)
CONFIGS = [
    groupwide.GroupwideConfig(),
    LOOSE,
    dataclasses.replace(LOOSE, min_steps=1),
    dataclasses.replace(LOOSE, min_steps=7, min_groups=2),
]


def _stats(windows, records=()) -> tuple[np.ndarray, list[groupwide.GroupStat], float]:
    """:func:`groupwide.detect`'s inputs to ``detect_stats``."""
    steps, stats, iter_ns = groupwide.group_stats(windows)
    per_step: dict[int, list] = {}
    for rec in records:
        per_step.setdefault(int(rec["step"]), []).append(rec)
    rows = [(int(s), groupwide.receive_rows(rs)) for s, rs in sorted(per_step.items())]
    return steps, [*stats, *groupwide.receive_stats(rows, len(steps))], iter_ns


def _perturb(stats, rng: np.random.Generator, hosts: dict[int, str]) -> list[groupwide.GroupStat]:
    """Some values missing (NaN), a few zero, some groups slower in some steps (1-3x, around
    the gates), one host's groups slower in most steps."""
    slow_host = hosts[int(rng.integers(len(hosts)))]
    out = []
    for g in stats:
        t = g.t_ns.copy()
        t[rng.random(t.size) < 0.08] = np.nan
        t[rng.random(t.size) < 0.01] = 0.0
        if rng.random() < 0.1:
            some = rng.random(t.size) < rng.uniform(0.3, 0.9)
            t[some] *= rng.uniform(1.0, 3.0)
        if any(hosts[r] == slow_host for r in g.members if r in hosts):
            t[rng.random(t.size) < 0.8] *= rng.uniform(1.0, 1.6)
        out.append(dataclasses.replace(g, t_ns=t))
    if rng.random() < 0.3 and out:  # a step nobody has
        j = int(rng.integers(out[0].t_ns.size))
        for g in out:
            g.t_ns[j] = np.nan
    return out


def _both(steps, stats, iter_ns, hosts, cfg) -> tuple[list, list]:
    args = ("j", steps, stats, iter_ns, (0, 10**10), hosts, cfg)
    return groupwide.detect_stats(*args), groupwide_reference.detect_stats(*args)


def _equal(got, ref) -> None:
    """Every field, floats to the bit (repr round-trips them)."""
    assert [repr(f) for f in got] == [repr(f) for f in ref]


@pytest.mark.parametrize(
    "case",
    [
        {},
        {"slow_host": "h20"},
        {"slow_host": "h50", "p2p_nic": False},
        {"slow_group": ("dp", "pp1.tp3", 2.5)},
        {"hiccups": (2, 3)},
        {"checkpoint": 4},
        {"straggler": 162},
    ],
)
def test_screened_findings_equal_the_per_group_loop_dense(case: dict) -> None:
    steps, stats, iter_ns = _stats(job(DENSE, seed=3, **case))
    for cfg in CONFIGS[:2]:
        got, ref = _both(steps, stats, iter_ns, _hosts(DENSE), cfg)
        _equal(got, ref)


def test_screened_findings_equal_the_per_group_loop_with_receives() -> None:
    ws = _no_p2p(job(MOE, MOE_OPS, slow_host="h9", seed=1, p2p_nic=False))
    steps, stats, iter_ns = _stats(ws, receives(MOE, slow_host="h9", seed=1))
    got, ref = _both(steps, stats, iter_ns, _hosts(MOE), groupwide.GroupwideConfig())
    assert [(f.group_kind, f.group_id) for f in got] == [("host", "h9")]
    _equal(got, ref)


def test_screened_findings_equal_the_per_group_loop_perturbed() -> None:
    found = 0
    for seed in range(24):
        rng = np.random.default_rng([seed, 21])
        lay = SMALL if seed % 2 else SMALL_MOE
        ops = MOE_OPS if lay is SMALL_MOE else None
        kw = {"ops": ops} if ops else {}
        slow = {"slow_group": ("tp", "dp1.pp2", 2.2)} if seed % 3 == 0 else {}
        ws = job(lay, seed=seed, cv=float(rng.uniform(0.02, 0.3)), **kw, **slow)
        recs = receives(lay, seed=seed) if seed % 4 == 1 else ()
        steps, stats, iter_ns = _stats(ws, recs)
        hosts = _hosts(lay)
        stats = _perturb(stats, rng, hosts)
        for cfg in CONFIGS:
            got, ref = _both(steps, stats, iter_ns, hosts, cfg)
            _equal(got, ref)
            found += len(ref)
    assert found > 50  # the gates were reached: the comparison is not of empty lists


def test_the_screen_leaves_out_the_groups_and_hosts_of_a_healthy_job() -> None:
    _steps, stats, _it = _stats(job(DENSE, seed=5))
    classes: dict = {}
    for g in stats:
        classes.setdefault(g.cls, []).append(g)
    cfg = groupwide.GroupwideConfig()
    gcfg = dataclasses.replace(cfg, min_ratio=cfg.group_ratio)
    kept = sum(
        int(groupwide._may_be_slow(np.vstack([g.t_ns for g in gs]), gcfg).sum())
        for gs in classes.values()
    )
    assert kept == 0
    hosts_in = {id(g): {f"h{r // 8}" for r in g.members} for g in stats}
    touched: dict = {}
    for key, gs in classes.items():
        for g in gs:
            for h in hosts_in[id(g)] if len(hosts_in[id(g)]) > 1 else ():
                if key not in touched.setdefault(h, []):
                    touched[h].append(key)
    assert groupwide._hosts_may_be_slow(classes, touched, hosts_in, cfg) == set()
