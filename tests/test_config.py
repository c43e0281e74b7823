"""Settings from defaults, a TOML file and the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus.config import ConfigError, load_settings


def test_defaults_use_the_local_broker() -> None:
    s = load_settings(env={})
    assert s.local_broker and s.bootstrap_servers == "127.0.0.1:19092"
    assert s.topic_prefix == "argus"


def test_file_then_environment_wins(tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    f.write_text(
        '[kafka]\nport = 29092\nbootstrap = "k1:9092"\n[kafka.client]\n"security.protocol" = "SSL"\n'
        "[detectors.l2]\nz = 2.5\n"
    )
    s = load_settings(
        f,
        env={
            "ARGUS_KAFKA_BOOTSTRAP": "k2:9092",
            "ARGUS_DETECTORS__L2__Z": "3",
            "ARGUS_KAFKA__CLIENT__SASL_MECHANISM": "SCRAM-SHA-512",
        },
    )
    assert s.bootstrap_servers == "k2:9092" and not s.local_broker
    assert s.kafka_port == 29092
    assert s.section("detectors")["l2"]["z"] == "3"
    assert s.kafka_config()["security.protocol"] == "SSL"
    assert s.kafka_config()["sasl.mechanism"] == "SCRAM-SHA-512"


@pytest.mark.parametrize(
    ("text", "env", "match"),
    [
        ("[kafka\n", {}, "not valid TOML"),
        ("[kafka]\nport = 'x'\n", {}, "kafka.port must be an integer"),
        ("", {"ARGUS_KAFKA_PORT": "1", "ARGUS_KAFKA_CONTROLLER_PORT": "1"}, "must differ"),
    ],
)
def test_bad_configuration_is_one_clear_error(
    tmp_path: Path, text: str, env: dict, match: str
) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_settings(f, env=env)


def test_missing_named_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", env={})
