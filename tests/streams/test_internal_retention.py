"""The workers' re-key topics are created with ``streams.internal_retention_s`` (24 h by
default, not the broker's 7 days: docs/deploy.md, "Brokers and disks"); the table changelogs
(compacted state) and the wire topics keep theirs. On the real broker."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from argus.config import ConfigError, Settings
from argus.streams.app import ROLES, build_app
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.worker_topics import (
    REKEY_SEGMENT_MS_MAX,
    ensure_worker_topics,
    rekey_config,
    worker_topics,
)
from argus.topics import topic_specs


def _configs(settings: Settings, names: list[str]) -> dict[str, dict[str, tuple[str, int]]]:
    """``{topic: {config: (value, source)}}`` from the broker."""
    admin = AdminClient(settings.kafka_config())
    res = [ConfigResource("topic", n) for n in names]
    out = {}
    for r, fut in admin.describe_configs(res, request_timeout=30).items():
        cfg = fut.result(timeout=30)
        out[r.name] = {k: (str(v.value), int(v.source)) for k, v in cfg.items()}
    return out


def test_rekey_config_and_range() -> None:
    assert PipelineConfig().internal_retention_s == 86_400.0
    assert rekey_config(PipelineConfig(internal_retention_s=1.5)) == {
        "cleanup.policy": "delete",
        "retention.ms": "1500",
        "segment.ms": "1500",
    }
    # a day's retention rolls hourly segments: a quiet partition's records leave within ~25 h
    assert rekey_config(PipelineConfig())["segment.ms"] == str(REKEY_SEGMENT_MS_MAX)
    with pytest.raises(ConfigError):
        PipelineConfig(internal_retention_s=0)


def test_worker_creates_rekey_topics_with_retention(
    kafka: Settings, topic_prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = dataclasses.replace(kafka, topic_prefix=topic_prefix, state_dir=tmp_path)
    pcfg = PipelineConfig(internal_partitions=1, internal_retention_s=3 * 3600)
    _app, ctx = build_app(s, ROLES, pcfg=pcfg, instance_id="off")
    (rekey, _), (changelogs, _) = worker_topics(ctx)
    assert {n.removeprefix(f"{topic_prefix}.internal.") for n in rekey} == {
        "steps-by-block",
        "steps-by-job",
        "l3-scopes",
        "funnel-jobs",
        "stacks",
    }
    assert changelogs and not set(changelogs) & set(rekey)
    # faust, should it create them itself, asks for the same retention
    assert {ctx.internal[k].retention for k in ctx.internal} == {3 * 3600}

    created = ensure_worker_topics(s, ctx)
    assert set(created) == {*rekey, *changelogs} and set(created.values()) == {"created"}
    raw = list(topic_specs(topic_prefix))
    got = _configs(s, [*rekey, *changelogs, *raw])
    for n in rekey:
        assert got[n]["retention.ms"][0] == str(3 * 3600 * 1000), n
        assert got[n]["cleanup.policy"][0] == "delete", n
        assert got[n]["segment.ms"][0] == str(3_600_000), n
    dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    for n in changelogs:  # compacted state: no retention of ours
        assert got[n]["cleanup.policy"][0] == "compact", n
        assert got[n]["retention.ms"][1] != dynamic, n
        assert got[n]["retention.ms"][0] != str(3 * 3600 * 1000), n
    for n, spec in topic_specs(topic_prefix).items():  # the wire topics keep argus/topics.py's
        assert got[n]["retention.ms"][0] == str(spec.retention_ms), n

    # a worker with another setting finds them: it warns, and changes nothing
    pcfg2 = dataclasses.replace(pcfg, internal_retention_s=6 * 3600)
    _app2, ctx2 = build_app(s, ROLES, pcfg=pcfg2, instance_id="off")
    with caplog.at_level(logging.WARNING, logger="argus.streams"):
        again = ensure_worker_topics(s, ctx2)
    assert set(again.values()) == {"exists"}
    warned = [r.getMessage() for r in caplog.records if "keeps retention.ms" in r.getMessage()]
    assert len(warned) == len(rekey) and all(str(6 * 3600 * 1000) in w for w in warned)
    assert _configs(s, rekey)[rekey[0]]["retention.ms"][0] == str(3 * 3600 * 1000)
