"""The funnel: L1 windows, L2 ranks/phases and L3 kernels joined into one verdict per culprit.

Two pure steps:

1. :func:`join` - one window's findings -> :class:`Culprit` objects. Findings that name
   ranks (L2 stragglers, L3 kernel divergences) are joined when their rank sets overlap;
   group-level findings (L3 group divergence) are culprits of their own, keyed by group;
   L1 windows are attached to the culprits whose window they overlap, and become a
   job-level culprit when nothing else explains them.
2. :func:`step` - ``(state, findings of the next window) -> (state, output)``: counts how
   many consecutive windows each culprit repeated (**persistence**), computes a
   **confidence**, and emits ``alert`` records (``alert.avsc``): ``trigger`` when a culprit's
   confidence first reaches ``trigger_confidence`` or its levels or severity change (a
   culprit whose only evidence is one rank waiting longer in a collective never pages: that is
   a victim's symptom; nor does one whose only evidence is waiting of peers of a compute
   straggler of this or the previous window), ``resolve`` after
   ``resolve_after`` windows without it.

:class:`FunnelState` is a frozen value holding everything the stream funnel agent must keep
between windows (one per job); it is small (one entry per open culprit) and JSON-able via
:meth:`FunnelState.to_dict` / :meth:`FunnelState.from_dict` for a faust table.

Confidence (ours; the paper gives none)
---------------------------------------
Each finding contributes ``c = w + (1 - w) * 0.5 * (1 - 1/margin)`` with ``w`` the level's
weight (``FunnelConfig.level_weight``) and ``margin = score / threshold``; levels combine as
independent evidence ``1 - prod(1 - c_level)``; persistence ``p`` sharpens it to
``1 - (1 - c) ** (1 + (p - 1) / 2)``.

Modules: :mod:`~argus.detectors.funnel.join` (findings -> culprits, waiting attached to its
cause), :mod:`~argus.detectors.funnel.state` (persistence, confidence, triggers and resolves),
:mod:`~argus.detectors.funnel.render` (verdict -> anomaly and alert records, summary text).
"""

from argus.detectors.funnel.join import Culprit, join
from argus.detectors.funnel.render import Verdict, summary
from argus.detectors.funnel.state import (
    CulpritState,
    FunnelOutput,
    FunnelState,
    confidence_of,
    step,
)

__all__ = [
    "Culprit",
    "CulpritState",
    "FunnelOutput",
    "FunnelState",
    "Verdict",
    "confidence_of",
    "join",
    "step",
    "summary",
]
