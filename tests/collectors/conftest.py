"""Fixtures of the collector tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

import argus.collectors as ac
from argus.config import Settings


@pytest.fixture(autouse=True)
def _no_collector_left() -> Iterator[None]:
    """Every test starts and ends without a running collector."""
    ac.shutdown(timeout_s=1.0)
    yield
    ac.shutdown(timeout_s=0.5)


@pytest.fixture
def prefixed(kafka: Settings, topic_prefix: str, tmp_path) -> Settings:  # type: ignore[no-untyped-def]
    """Settings of the real broker with this test's topic prefix and a private state dir."""
    return dataclasses.replace(kafka, topic_prefix=topic_prefix, state_dir=tmp_path)


@pytest.fixture
def offline(settings: Settings, tmp_path) -> Settings:  # type: ignore[no-untyped-def]
    """Settings whose broker is a closed loopback port (nothing listens there)."""
    from tests.collectors.helpers import closed_port

    return dataclasses.replace(settings, bootstrap=f"127.0.0.1:{closed_port()}", state_dir=tmp_path)
