"""Topic administration over confluent-kafka's AdminClient."""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from argus.config import Settings
from argus.errors import ArgusError
from argus.kafka.security import checked_admin, list_topics
from argus.topics import TopicSpec, topic_specs

__all__ = ["TopicAdminError", "create_topics", "delete_topics", "ensure_topics"]


class TopicAdminError(ArgusError, RuntimeError):
    """A topic could not be created or deleted."""


def create_topics(
    settings: Settings,
    *,
    prefix: str | None = None,
    specs: Iterable[TopicSpec] | None = None,
    replication: int = 1,
    partitions: int | None = None,
    timeout_s: float = 30.0,
) -> dict[str, str]:
    """Create the argus topics that do not exist yet.

    Returns ``{topic: "created" | "exists"}``. ``partitions`` overrides every spec's count
    (tests use 1 to keep the broker light).
    """
    prefix = settings.topic_prefix if prefix is None else prefix
    wanted = topic_specs(prefix)
    if specs is not None:
        keep = {s.suffix for s in specs}
        wanted = {n: s for n, s in wanted.items() if s.suffix in keep}
    admin, errors = checked_admin(settings)  # a refused login raises KafkaAuthError at once
    existing = set(list_topics(admin, errors, settings, timeout_s).topics)
    result = {n: "exists" for n in wanted if n in existing}
    new = [
        NewTopic(
            n,
            num_partitions=partitions or s.partitions,
            replication_factor=replication,
            config=s.config(),
        )
        for n, s in wanted.items()
        if n not in existing
    ]
    result.update(_create(admin, new, timeout_s))
    return result


def _create(admin: AdminClient, new: list[NewTopic], timeout_s: float) -> dict[str, str]:
    """Create ``new``; ``{topic: "created" | "exists"}`` (another client was first)."""
    result: dict[str, str] = {}
    if not new:
        return result
    for name, fut in admin.create_topics(new, operation_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
            result[name] = "created"
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise TopicAdminError(f"creating {name}: {exc}") from exc
            result[name] = "exists"
    return result


def ensure_topics(
    settings: Settings,
    names: Iterable[str],
    *,
    partitions: int,
    replication: int = 1,
    config: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> dict[str, str]:
    """Create topics (with ``config``) that do not exist yet and wait until the cluster's
    metadata lists them; returns ``{topic: "created" | "exists"}``.

    The workers create their internal re-key topics and table changelogs so before faust
    starts: faust creates them itself at start, but a topic created while the consumer
    fetched its first metadata could stay missing there (``Ignoring missing topic``: a
    re-key topic never consumed) or listed with 0 partitions (every write to a table whose
    changelog it was failed ``PartitionsMismatch``); both seen on a 2-core host.

    Raises
    ------
    TopicAdminError
        A topic could not be created, or did not appear within ``timeout_s``.
    """
    names = list(dict.fromkeys(names))
    admin, errors = checked_admin(settings)
    existing = set(list_topics(admin, errors, settings, timeout_s).topics)
    result = {n: "exists" for n in names if n in existing}
    new = [
        NewTopic(n, num_partitions=partitions, replication_factor=replication, config=config or {})
        for n in names
    ]
    new = [t for t in new if t.topic not in existing]
    result.update(_create(admin, new, timeout_s))
    deadline = time.monotonic() + timeout_s
    while True:
        md = list_topics(admin, errors, settings, timeout_s).topics
        absent = [n for n in names if n not in md or md[n].error is not None]
        if not absent:
            return result
        if time.monotonic() > deadline:
            raise TopicAdminError(
                f"topics not in the cluster metadata after {timeout_s} s: {absent}"
            )
        time.sleep(0.2)


def partition_count(settings: Settings, name: str, *, timeout_s: float = 30.0) -> int | None:
    """Partitions of topic ``name`` in the cluster metadata, or None when it is not there."""
    admin, errors = checked_admin(settings)
    md = list_topics(admin, errors, settings, timeout_s).topics.get(name)
    if md is None or md.error is not None:
        return None
    return len(md.partitions)


def delete_prefixed(settings: Settings, prefix: str, *, timeout_s: float = 30.0) -> list[str]:
    """Delete every topic of a run's prefix: its wire topics, the workers' re-key topics
    (``<prefix>.internal.*``) and their table changelogs (``<prefix>-<roles>-*``, the app
    ids). Returns the names deleted."""
    admin = AdminClient(settings.kafka_config())
    names = [
        t
        for t in admin.list_topics(timeout=timeout_s).topics
        if t.startswith((f"{prefix}.", f"{prefix}-"))
    ]
    delete_topics(settings, names, timeout_s=timeout_s)
    return names


def delete_topics(settings: Settings, names: Iterable[str], *, timeout_s: float = 30.0) -> None:
    """Delete topics (tests clean up their own)."""
    names = list(names)
    if not names:
        return
    admin = AdminClient(settings.kafka_config())
    for name, fut in admin.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            fut.result(timeout=timeout_s)
        except KafkaException as exc:
            if "UNKNOWN_TOPIC" not in str(exc):
                raise TopicAdminError(f"deleting {name}: {exc}") from exc
