"""KRaft cluster ids: Kafka's format, and never a leading '-' (StorageTool would read an option)."""

from __future__ import annotations

import base64

from argus.kafka.local import _cluster_id


def test_cluster_ids_are_16_bytes_and_never_look_like_an_option() -> None:
    ids = [_cluster_id() for _ in range(5000)]  # ~1 in 64 raw draws starts with '-'
    assert not any(i.startswith("-") for i in ids)
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
