"""The stream workers' roles and the consumer groups they read in (no faust, no Kafka).

A faust worker's group is its app id, ``<prefix>-<roles>`` (``<prefix>-all`` for every role).
The compressor's own loop (``streams.compressor_runtime = "kafka"``,
:mod:`argus.streams.compressor_loop`) reads in ``<prefix>-compressor`` whatever roles share
its process; the faust app of the other roles keeps the id of the whole role set, so their
committed offsets stay theirs across the switch of runtimes. The steps router's loop
(``streams.steps_router_runtime = "kafka"``, the default; :mod:`argus.streams.steps_router_loop`)
reads ``raw.steps`` in ``<prefix>-steps-router`` the same way.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ROLES", "app_id", "loop_group", "steps_router_group", "worker_groups"]

ROLES = ("compressor", "l1", "l2", "l3", "funnel", "stacks")


def app_id(prefix: str, roles: Iterable[str]) -> str:
    """The faust app id (consumer group) of a worker running ``roles``."""
    chosen = sorted(set(roles))
    return f"{prefix}-{'-'.join(chosen) if len(chosen) < len(ROLES) else 'all'}"


def loop_group(prefix: str) -> str:
    """The compressor loop's consumer group: ``<prefix>-compressor``."""
    return f"{prefix}-compressor"


def steps_router_group(prefix: str) -> str:
    """The steps router loop's consumer group: ``<prefix>-steps-router``."""
    return f"{prefix}-steps-router"


def worker_groups(
    prefix: str, roles: Iterable[str], runtime: str = "kafka", steps_router: str = "kafka"
) -> list[str]:
    """Every consumer group a worker running ``roles`` (``all`` allowed) reads in, with the
    compressor on ``runtime`` and the steps router on ``steps_router`` (``kafka`` or
    ``faust``)."""
    chosen = set(ROLES) if "all" in roles else set(roles)
    if "compressor" not in chosen or runtime != "kafka":
        out = [app_id(prefix, chosen)]
    else:
        rest = chosen - {"compressor"}
        loop = loop_group(prefix)
        out = [loop] if not rest else [app_id(prefix, chosen), loop]
    if steps_router == "kafka" and chosen & {"l1", "l2"}:
        out.append(steps_router_group(prefix))
    return out
