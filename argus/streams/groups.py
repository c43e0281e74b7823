"""The stream workers' roles and the consumer groups they read in (no faust, no Kafka).

A faust worker's group is its app id, ``<prefix>-<roles>`` (``<prefix>-all`` for every role).
The compressor's own loop (``streams.compressor_runtime = "kafka"``,
:mod:`argus.streams.compressor_loop`) reads in ``<prefix>-compressor`` whatever roles share
its process; the faust app of the other roles keeps the id of the whole role set, so their
committed offsets stay theirs across the switch of runtimes.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ROLES", "app_id", "loop_group", "worker_groups"]

ROLES = ("compressor", "l1", "l2", "l3", "funnel", "stacks")


def app_id(prefix: str, roles: Iterable[str]) -> str:
    """The faust app id (consumer group) of a worker running ``roles``."""
    chosen = sorted(set(roles))
    return f"{prefix}-{'-'.join(chosen) if len(chosen) < len(ROLES) else 'all'}"


def loop_group(prefix: str) -> str:
    """The compressor loop's consumer group: ``<prefix>-compressor``."""
    return f"{prefix}-compressor"


def worker_groups(prefix: str, roles: Iterable[str], runtime: str = "kafka") -> list[str]:
    """Every consumer group a worker running ``roles`` (``all`` allowed) reads in, with the
    compressor on ``runtime`` (``kafka`` or ``faust``)."""
    chosen = set(ROLES) if "all" in roles else set(roles)
    if "compressor" not in chosen or runtime != "kafka":
        return [app_id(prefix, chosen)]
    rest = chosen - {"compressor"}
    loop = loop_group(prefix)
    return [loop] if not rest else [app_id(prefix, chosen), loop]
