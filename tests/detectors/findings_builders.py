"""Finding builders shared by the funnel tests (one L2 straggler, one L3 divergence).

Windows ``w`` are ``(first step, last step)``; an L2 finding's event time is 100 ns a step.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from argus.detectors.findings import Finding


def l2(
    ranks: tuple[int, ...],
    group: tuple[str, str] = ("dp", "pp0"),
    *,
    phase: str = "mlp",
    role: str = "compute",
    w: tuple[int, int] = (0, 9),
    z: float = 8.0,
) -> Finding:
    """An L2 ``straggler`` finding of ``ranks`` in ``group`` (kind, id), robust z ``z``.

    ``role="compute"`` names the ranks as the bottleneck; another role (``late_arrival``)
    names none.
    """
    return Finding(
        job="j",
        level="L2",
        kind="straggler",
        group_kind=group[0],
        group_id=group[1],
        ranks=ranks,
        phase=phase,
        window_start_step=w[0],
        window_end_step=w[1],
        window_start_ns=w[0] * 100,
        window_end_ns=w[1] * 100 + 99,
        score=z,
        threshold=3.5,
        evidence={"role": role, "bottleneck": json.dumps(list(ranks) if role == "compute" else [])},
    )


def l3(
    ranks: tuple[int, ...],
    group: tuple[str, str] = ("dp", "pp0"),
    *,
    kernel: str = "gemm",
    collective: bool = False,
    members: Sequence[int] | None = None,
    w: tuple[int, int] = (0, 9),
) -> Finding:
    """An L3 finding on ``kernel``: ``kernel_divergence`` of ``ranks``, or with ``members``
    a ``group_divergence`` of that group (no rank named)."""
    ev = {"collective": str(collective).lower()}
    if members is not None:
        ev["members"] = json.dumps(list(members))
    return Finding(
        job="j",
        level="L3",
        kind="group_divergence" if members is not None else "kernel_divergence",
        group_kind=group[0],
        group_id=group[1],
        ranks=ranks,
        kernel=kernel,
        window_start_step=w[0],
        window_end_step=w[1],
        score=5e5,
        threshold=1e5,
        evidence=ev,
    )
