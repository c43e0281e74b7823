"""Group-wide detection as it was before :func:`argus.detectors.groupwide.detect_stats`
screened its classes (commit 9f5e677, verbatim but for the imports and the helpers'
module prefix): :func:`~argus.detectors.groupwide._slow` on every host and every group of
every class. The reference that ``test_groupwide_screen.py`` holds the screened version to."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from argus.detectors.findings import Finding
from argus.detectors.groupwide import (
    GroupStat,
    GroupwideConfig,
    _across_stages,
    _finding,
    _slow,
    _split_ties,
    _stages,
    _touching,
    _Verdict,
    _wait_classes,
    _Window,
)


def detect_stats(
    job: str,
    steps: np.ndarray,
    stats: Sequence[GroupStat],
    iter_ns: float,
    span_ns: tuple[int, int],
    hosts: Mapping[int, str] | None = None,
    cfg: GroupwideConfig | None = None,
) -> list[Finding]:
    """:func:`detect` on transfer times already reduced (:func:`group_stats`): ``steps`` (S,),
    every ``stats[i].t_ns`` (S,), ``iter_ns`` the window's median iteration time and
    ``span_ns`` its (start, end) ns. The stream's job tier calls it with the stats its rank
    blocks reduced, so no worker needs every group's raw window."""
    cfg = cfg or GroupwideConfig()
    start_ns, end_ns = span_ns
    if steps.size == 0:
        return []
    hosts = dict(hosts or {})

    def host(r: int) -> str:
        return hosts.get(r) or f"node{r // cfg.gpus_per_host}"

    classes: dict[tuple[str, str, int, int | None], list[GroupStat]] = {}
    for g in stats:
        classes.setdefault(g.cls, []).append(g)
    hosts_in = {id(g): {host(r) for r in g.members} for g in stats}
    inter = [g for g in stats if len(hosts_in[id(g)]) > 1]
    waits = _wait_classes(classes, cfg)
    # a pipeline group's summed receives are mostly waits: its ranks' receives replace them
    rx = {(g.group_kind, g.phase) for g in stats if g.rank is not None}
    waits |= {k for k, gs in classes.items() if gs[0].rank is None and k[:2] in rx}
    # --- hosts: slow in every informative class --------------------------------------------
    evidence: dict[str, list[tuple[GroupStat, _Verdict]]] = {}
    touched: dict[str, list[tuple[str, str, int, int | None]]] = {}  # host -> its classes
    for key, members in classes.items():
        if key not in waits:
            for hh in set().union(*(hosts_in[id(g)] for g in members if len(hosts_in[id(g)]) > 1)):
                touched.setdefault(hh, []).append(key)
    for h in sorted({host(r) for g in inter for r in g.members}):
        ev: list[tuple[GroupStat, _Verdict]] = []
        failed = collective = False
        for key in touched.get(h, ()):
            members = classes[key]
            mine, rest = _touching(members, h, hosts_in)
            if not mine or len(rest) < cfg.min_groups:
                continue
            rx_class = mine[0].rank is not None  # receives identify; collectives must matter
            v = _slow(
                [g.t_ns for g in mine],
                [u.t_ns for u in rest],
                iter_ns,
                replace(cfg, min_abs_ms=0.0, min_step_share=0.0) if rx_class else cfg,
                mine[0].weight,
            )
            if not v.slow:
                # clearly not slow: under half the least slowdown it looks for; else a class
                # too noisy to tell (an all-to-all's summed micro-batches hold waits). Links
                # it only sends on count when slow: whether a sender's NIC shows in its
                # receiver's time depends on the transport (and on how a workload models it)
                sends = rx_class and host(mine[0].members[0]) != h
                if not sends and math.log(v.ratio) < 0.5 * math.log(cfg.min_ratio):
                    failed = True
                    break
                continue
            collective = collective or not rx_class
            ev += [(g, v) for g in mine]
        if ev and not failed and not collective:
            # only its pipeline receives tell it apart (tp 8: its collectives are those of
            # its whole stage): its collectives must then be slow against the other stages'
            more = _across_stages(h, stats, hosts_in, iter_ns, cfg)
            failed = not more
            ev += more
        if ev and not failed:
            evidence[h] = ev
    named = _split_ties(evidence, stats, hosts_in, iter_ns, cfg)
    win = _Window(job, start_ns, end_ns, steps, iter_ns, cfg, host)
    out = [_finding(win, "host", h, evidence[h]) for h in sorted(named)]
    # --- groups: slow against the rest of their class, not explained by a named host -------
    gcfg = replace(cfg, min_ratio=cfg.group_ratio, z=cfg.group_z)
    for members in classes.values():
        if len(members) - 1 < cfg.min_groups or members[0].rank is not None:
            continue
        for g in members:
            if hosts_in[id(g)] & named:
                continue
            v = _slow([g.t_ns], [u.t_ns for u in members if u is not g], iter_ns, gcfg)
            if v.slow:
                out.append(_finding(win, g.group_kind, g.group_id, [(g, v)]))
    out += _stages(win, stats, hosts_in, named)
    out.sort(key=lambda f: (f.group_kind, f.group_id, f.phase or ""))
    return out
