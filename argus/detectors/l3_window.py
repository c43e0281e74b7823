"""L3 over one window of kernel summaries: (kernel, stream) x comparison group -> findings.

Input is, per rank, its cluster summaries (``argus.streams.kde.Summary``) by
``(kernel name, stream id)`` for the window (several summaries of the same key, e.g. one per
step, are merged into one mixture). For every **scope group** (default kind ``dp``: ranks
doing the same work, i.e. DP replicas at the same PP stage / TP rank / CP rank) and every
``(kernel, stream)`` the quantile matrix is built with
:func:`argus.streams.lognormal.quantile_matrix` and

* ranks are scored within the scope group (:func:`argus.detectors.l3.score_ranks`) ->
  ``kernel_divergence`` findings naming ranks;
* the scope group's ranks are partitioned by each **partition kind** (default ``edp`` and
  ``ep``) and the parts compared with each other (:func:`argus.detectors.l3.compare_groups`)
  -> ``group_divergence`` findings naming a group (paper case 2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from argus.detectors.config import L3Config
from argus.detectors.findings import Finding
from argus.detectors.l3 import compare_groups, score_ranks
from argus.detectors.routing import Routing

__all__ = ["RankKernels", "detect_window", "merge_summaries"]

KernelKey = tuple[str, int]  # (kernel name, stream id)


@dataclass(frozen=True)
class RankKernels:
    """One rank's kernel summaries in a window.

    Attributes
    ----------
    rank : int
    coords : mapping
        The rank's ``Coords`` record.
    summaries : mapping (kernel name, stream id) -> Summary
    stream_kinds : mapping stream id -> str
        ``compute`` | ``comm`` | ``p2p`` | ``unknown`` (from ``kernel_batch.streams``).
    """

    rank: int
    coords: Mapping[str, Any]
    summaries: Mapping[KernelKey, Any] = field(default_factory=dict)
    stream_kinds: Mapping[int, str] = field(default_factory=dict)


def merge_summaries(parts: Sequence[Any]) -> Any:
    """One mixture Summary from several Summaries of the same group (counts add up).

    All parts must share their quantile levels (they come from one summary method).
    """
    from argus.streams.kde import Summary

    if len(parts) == 1:
        return parts[0]
    lv = parts[0].quantile_levels
    return Summary(
        lv,
        np.concatenate([p.counts for p in parts]),
        np.concatenate([p.quantiles_ns for p in parts], axis=0),
        parts[0].method,
        int(sum(p.rejected for p in parts)),
    )


def detect_window(
    job: str,
    ranks: Sequence[RankKernels],
    *,
    window: tuple[int, int, int, int],
    cfg: L3Config | None = None,
    routing: Routing | None = None,
    scope_kind: str = "dp",
    partition_kinds: Sequence[str] = ("edp", "ep"),
) -> list[Finding]:
    """L3 findings of one window.

    Parameters
    ----------
    job : str
    ranks : sequence of RankKernels
    window : (start_step, end_step, start_ns, end_ns)
    cfg : L3Config
    routing : Routing
    scope_kind : str
        Group kind whose ranks are compared with each other.
    partition_kinds : sequence of str
        Group kinds whose groups (inside one scope group) are compared with each other.

    Returns
    -------
    list of Finding
        ``kernel_divergence`` (ranks named; score = the worst named rank's W1, ns) and
        ``group_divergence`` (``ranks`` empty, the group in ``group_kind``/``group_id``;
        evidence ``members`` lists its ranks).
    """
    from argus.streams.lognormal import default_probs, quantile_matrix

    cfg = cfg or L3Config()
    routing = routing or Routing.default()
    probs = default_probs(cfg.n_probs)
    ws, we, wsn, wen = window
    scopes: dict[str, list[RankKernels]] = {}
    for rk in ranks:
        scopes.setdefault(routing.group_for_kind(rk.coords, scope_kind), []).append(rk)
    out: list[Finding] = []
    for sid in sorted(scopes):
        members = sorted(scopes[sid], key=lambda x: x.rank)
        keys: dict[KernelKey, list[int]] = {}
        for i, rk in enumerate(members):
            for key in rk.summaries:
                k = key if cfg.match_stream else (key[0], -1)
                keys.setdefault(k, []).append(i)
        for k in list(keys):  # too few events for a distribution: not judged
            keys[k] = [
                i
                for i in dict.fromkeys(keys[k])
                if _lookup(members[i], k, cfg.match_stream).n >= cfg.min_events
            ]
        for key in sorted(keys):
            rows = keys[key]
            if len(rows) < 2:
                continue
            kinds = {members[i].stream_kinds.get(key[1]) for i in rows[:8]}
            if kinds & set(cfg.skip_stream_kinds):
                continue
            sums = [_lookup(members[i], key, cfg.match_stream) for i in rows]
            q = quantile_matrix(sums, probs)
            rank_ids = np.array([members[i].rank for i in rows], dtype=np.int64)
            stream = None if key[1] < 0 else int(key[1])
            comm = _is_comm(key, [members[i] for i in rows])
            kcfg = replace(cfg, min_rel_w1=cfg.min_rel_w1_comm) if comm else cfg
            res = score_ranks(q, kcfg)
            if res.flagged.any():
                named = np.flatnonzero(res.flagged)
                worst = named[np.nanargmax(res.scores[named])]
                out.append(
                    Finding(
                        job=job,
                        level="L3",
                        kind="kernel_divergence",
                        group_kind=scope_kind,
                        group_id=sid,
                        ranks=tuple(int(r) for r in rank_ids[named]),
                        kernel=key[0],
                        stream=stream,
                        window_start_step=ws,
                        window_end_step=we,
                        window_start_ns=wsn,
                        window_end_ns=wen,
                        score=float(res.scores[worst]),
                        threshold=res.threshold,
                        baseline=res.scale / 1e3,
                        observed=float(np.nanmean(q[worst])) / 1e3,
                        unit="us",
                        evidence={
                            "w1_ns": json.dumps(
                                {
                                    str(int(rank_ids[i])): round(float(res.scores[i]), 1)
                                    for i in named[:64]
                                }
                            ),
                            "fence_ns": f"{res.fence:.1f}",
                            "median_w1_ns": f"{res.median_score:.1f}",
                            "n_ranks": str(res.n_valid),
                            "collective": str(comm).lower(),
                        },
                    )
                )
            for part in partition_kinds:
                labels = [routing.group_for_kind(members[i].coords, part) for i in rows]
                if len(set(labels)) < cfg.min_groups:
                    continue
                cmp = compare_groups(q, labels, kcfg)
                lab = np.asarray(labels, dtype=object)
                for gi in np.flatnonzero(cmp.flagged):
                    gid = str(cmp.labels[gi])
                    intra = (
                        float(np.nanmedian(cmp.within)) if np.isfinite(cmp.within).any() else 0.0
                    )
                    out.append(
                        Finding(
                            job=job,
                            level="L3",
                            kind="group_divergence",
                            group_kind=part,
                            group_id=gid,
                            ranks=(),
                            kernel=key[0],
                            stream=stream,
                            window_start_step=ws,
                            window_end_step=we,
                            window_start_ns=wsn,
                            window_end_ns=wen,
                            score=float(cmp.scores[gi]),
                            threshold=cmp.threshold,
                            baseline=float(cmp.reference.mean()) / 1e3,
                            observed=float(cmp.references[gi].mean()) / 1e3,
                            unit="us",
                            evidence={
                                "members": json.dumps([int(r) for r in rank_ids[lab == gid]]),
                                "scope": f"{scope_kind}/{sid}",
                                "collective": str(comm).lower(),
                                "n_groups": str(len(cmp.labels)),
                                "intra_w1_ns": f"{intra:.1f}",
                                "inter_w1_ns": f"{float(cmp.scores[gi]):.1f}",
                                "block_ratio": f"{float(cmp.scores[gi]) / intra:.1f}"
                                if intra > 0
                                else "inf",
                            },
                        )
                    )
    return out


def _is_comm(key: KernelKey, ranks: Sequence[RankKernels]) -> bool:
    """Collective kernel: its stream is comm/p2p on some rank, or its name says NCCL."""
    if any(rk.stream_kinds.get(key[1]) in ("comm", "p2p") for rk in ranks[:8]):
        return True
    return "nccl" in key[0].lower()


def _lookup(rk: RankKernels, key: KernelKey, match_stream: bool) -> Any:
    if match_stream:
        return rk.summaries[key]
    parts = [s for (name, _st), s in rk.summaries.items() if name == key[0]]
    return merge_summaries(parts)
