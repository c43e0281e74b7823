"""Shared fixtures. Integration tests use the real local broker (`argus kafka up`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from argus.config import Settings, load_settings


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings()


@pytest.fixture(scope="session")
def kafka(settings: Settings) -> Settings:
    """A running broker: the configured cluster, or the local one (started if needed)."""
    from argus.kafka.local import LocalBroker

    st = LocalBroker(settings).up()
    assert st.running, f"Kafka is not reachable at {st.bootstrap}"
    return settings


@pytest.fixture
def topic_prefix(kafka: Settings) -> Iterator[str]:
    """A fresh topic prefix per test, its topics created with one partition, deleted after."""
    from argus.kafka.admin import create_topics, delete_prefixed, delete_topics

    prefix = f"t{uuid.uuid4().hex[:10]}.argus"
    created = create_topics(kafka, prefix=prefix, partitions=1)
    yield prefix
    delete_topics(kafka, created)
    delete_prefixed(kafka, prefix)  # and the workers' re-key and changelog topics
