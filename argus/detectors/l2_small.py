"""Small comparison groups (3-4 ranks) are judged over a longer L2 window (issue 18).

L2's materiality gate ``min_effect`` asks a rank's excess (its mean log ratio to the step
median over the window's steps) to be 2.5 robust sigmas of the phase's per-step log ratios:
over the live 4-step window that is ~4 standard errors, and it keeps the rank that drew the
slowest steps of a jittered phase from being named. In a group of 4 ranks sharing a loaded
host that noise is +-50 % per step, and a rank slowed 2-3x in its ``mlp`` sat at 1.4-2.4
sigmas in most 4-step windows: a live CPU demo named its slowed rank in one window of 120
steps and never paged it. Over 16 steps the same standard error is reached at 2.5 x
sqrt(4/16) = 1.25 sigmas (:func:`small_config`), and the persistence test has 16 steps to
say "slowest every time": on 7 recorded live 4-rank runs (loads 2-5) the slowed rank was
named in 7-12 of 12 funnel windows (4-7 over 4 steps) and no healthy rank in any (the
4-step window at ``min_effect`` 1.5 named healthy ranks twice).

A group is *small* when it has 3 to :data:`SMALL_GROUP_RANKS` ranks and a compute or host
phase (pipeline chains of 4 with only p2p phases keep the 4-step window, as do pairs, whose
rule is their own: :mod:`argus.detectors.l2`). Groups of 16 and more (the DP groups of a
Megatron layout) are unchanged. The funnel still asks a small group's rank to be named in
two funnel windows (:mod:`argus.detectors.funnel.state`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from argus.detectors.columnar import GroupBatch
from argus.detectors.config import L2Config
from argus.routing import COLLECTIVE_STREAM_KINDS

__all__ = ["SMALL_GROUP_RANKS", "is_small", "small_config", "split_small"]

SMALL_GROUP_RANKS = 4
"""The most ranks a group judged over the long window has (at least 3)."""


def is_small(b: GroupBatch) -> bool:
    """The batch's groups have 3 to :data:`SMALL_GROUP_RANKS` ranks and a non-collective phase."""
    return 3 <= b.ranks.shape[1] <= SMALL_GROUP_RANKS and any(
        sk not in COLLECTIVE_STREAM_KINDS for sk in b.stream_kinds
    )


def split_small(
    per_step: Sequence[Sequence[GroupBatch]],
) -> tuple[list[list[GroupBatch]], list[list[GroupBatch]]]:
    """Each step's batches as ``(small, the others)`` (:func:`is_small`), steps in order."""
    small = [[b for b in bs if is_small(b)] for bs in per_step]
    rest = [[b for b in bs if not is_small(b)] for bs in per_step]
    return small, rest


def small_config(cfg: L2Config, steps: int, base_steps: int) -> L2Config:
    """``cfg`` for a window of ``steps`` steps: ``min_effect`` scaled by
    ``sqrt(base_steps / steps)`` when the window is longer than ``base_steps`` (the live L2
    window, which ``min_effect`` is stated for), i.e. the same number of standard errors."""
    if steps <= base_steps:
        return cfg
    return dataclasses.replace(cfg, min_effect=cfg.min_effect * math.sqrt(base_steps / steps))
