"""Settings from defaults, a TOML file and the environment."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
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


# -- one loader: unknown keys, one boolean parser, validation at load time -------------------
def test_unknown_key_in_the_file_names_key_section_file_and_known_keys(tmp_path: Path) -> None:
    f = tmp_path / "argus.toml"
    f.write_text("[streams]\nidle_close_secs = 30\n")
    with pytest.raises(ConfigError) as err:
        load_settings(f, env={})
    msg = str(err.value)
    assert "'idle_close_secs' in [streams]" in msg and str(f) in msg
    assert "known: " in msg and "idle_close_s" in msg and "lateness_steps" in msg
    f.write_text("[detectors.l2]\nzz = 3\n")
    with pytest.raises(ConfigError, match=r"'zz' in \[detectors\.l2\].*known: .*\bz\b"):
        load_settings(f, env={})


@pytest.mark.parametrize(
    ("var", "names"),
    [
        ("ARGUS_PAGERDUTY__EVENT_URL", r"'event_url' in \[pagerduty\]"),  # a typo'd key
        ("ARGUS_DETECTORS__L2__ZZ", r"'zz' in \[detectors\.l2\]"),
        ("ARGUS_DETECTORS__L9__Z", r"'l9' in \[detectors\]"),
        ("ARGUS_KAFKA__BOOTSTRAPP", r"'bootstrapp' in \[kafka\]"),
        ("ARGUS_KAFKA__SECURITY__USER", r"'user' in \[kafka\.security\]"),
        ("ARGUS_PAGERDUTYY__EVENTS_URL", r"unknown section 'pagerdutyy'"),  # a typo'd section
        ("ARGUS_STREAM__IDLE_CLOSE_S", r"unknown section 'stream'"),
    ],
)
def test_unknown_environment_variable_is_named(var: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names) as err:
        load_settings(env={var: "http://127.0.0.1:1/x"})
    assert f"from env {var}" in str(err.value) and "known: " in str(err.value)


_TRUE = ["1", "true", "TRUE", "yes", "Yes", "on", " ON "]
_FALSE = ["0", "false", "False", "no", "NO", "off", "Off"]
_BOOLS = [  # every boolean setting, in every section that has one
    ("ARGUS_COLLECTORS__PHASES", "collectors", ("phases",)),
    ("ARGUS_COLLECTORS__PUBLISH_TOPOLOGY", "collectors", ("publish_topology",)),
    ("ARGUS_DETECTORS__L2__LATE_ARRIVAL", "detectors", ("l2", "late_arrival")),
    ("ARGUS_DETECTORS__L3__MATCH_STREAM", "detectors", ("l3", "match_stream")),
    ("ARGUS_KAFKA__SECURITY__CHECK_HOSTNAME", "kafka", ("check_hostname",)),
]


def _bool_setting(env: dict[str, str], section: str, path: tuple[str, ...]) -> object:
    from argus.collectors.config import load_collector_config
    from argus.detectors.config import DetectorsConfig

    s = load_settings(env=env)
    obj: object
    if section == "collectors":
        obj = load_collector_config(s, {}, job="j")
    elif section == "detectors":
        obj = DetectorsConfig.from_settings(s.section("detectors"))
    else:
        obj = s.security
    for p in path:
        obj = getattr(obj, p)
    return obj


@pytest.mark.parametrize(("var", "section", "path"), _BOOLS)
def test_booleans_are_parsed_one_way_everywhere(
    var: str, section: str, path: tuple[str, ...]
) -> None:
    from argus.config import parse_bool

    for text in _TRUE:
        assert parse_bool(text, "k") is True
        assert _bool_setting({var: text}, section, path) is True, text
    for text in _FALSE:
        assert parse_bool(text, "k") is False
        assert _bool_setting({var: text}, section, path) is False, text
    key = ".".join((section, *path)) if section != "kafka" else "kafka.security.check_hostname"
    for text in ("maybe", "2", "y", "enabled", ""):
        with pytest.raises(ConfigError, match=re.escape(key) + " must be a boolean") as err:
            load_settings(env={var: text})
        assert f"from env {var}" in str(err.value)


def test_the_file_types_are_checked_too(tmp_path: Path) -> None:
    f = tmp_path / "argus.toml"
    for text, names in [
        ("[streams]\nlateness_steps = 2.5\n", "streams.lateness_steps must be an integer"),
        ("[streams]\nidle_close_s = true\n", "streams.idle_close_s must be a number"),
        ("[detectors.l2]\nlate_arrival = 2\n", "detectors.l2.late_arrival must be a boolean"),
        ("[detectors]\nl2 = 3\n", r"detectors\.l2 must be a table"),
        ("[topics]\nprefix = ['a']\n", "topics.prefix must be a string"),
    ]:
        f.write_text(text)
        with pytest.raises(ConfigError, match=names):
            load_settings(f, env={})


@pytest.mark.parametrize(
    ("env", "names"),
    [
        # the invariant of PipelineConfig.__post_init__, broken from the environment
        ({"ARGUS_STREAMS__IDLE_CLOSE_S": "200"}, "funnel_idle_s .* must exceed"),
        ({"ARGUS_STREAMS__REPLICATION": "0"}, "streams.replication must be > 0"),
        ({"ARGUS_DETECTORS__L1__WINDOW": "0"}, "window must be > 0"),
        ({"ARGUS_DETECTORS__ROUTING__FALLBACK__COMPUTE": "nope"}, "no such group kind"),
        ({"ARGUS_PAGERDUTY__EVENTS_URL": "ftp://x"}, "events_url must be http"),
        ({"ARGUS_COLLECTORS__KERNELS_BACKEND": "nvprof"}, "kernels_backend"),
        ({"ARGUS_STREAMS__STEPS_ROUTER_RUNTIME": "rust"}, "steps_router_runtime = 'rust'"),
    ],
)
def test_values_are_validated_when_the_settings_load(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names) as err:
        load_settings(env=env)
    assert f"from env {next(iter(env))}" in str(err.value)


def test_env_strings_convert_by_field_type() -> None:
    from argus.detectors.config import DetectorsConfig
    from argus.streams.pipeline_config import PipelineConfig

    s = load_settings(
        env={
            "ARGUS_STREAMS__IDLE_CLOSE_S": "8",
            "ARGUS_STREAMS__FUNNEL_IDLE_S": "10",
            "ARGUS_STREAMS__LATENESS_STEPS": "7",
            "ARGUS_DETECTORS__L3__SKIP_STREAM_KINDS": "p2p, comm",
            "ARGUS_DETECTORS__FUNNEL__LEVEL_WEIGHT__L1": "0.4",  # env names are lower case
        }
    )
    p = PipelineConfig.from_mapping(s.section("streams"))
    assert (p.idle_close_s, p.funnel_idle_s, p.lateness_steps) == (8.0, 10.0, 7)
    assert p.funnel_window_steps == PipelineConfig().funnel_window_steps  # defaults kept
    d = DetectorsConfig.from_settings(s.section("detectors"))
    assert d.l3.skip_stream_kinds == ("p2p", "comm")
    assert dict(d.funnel.level_weight) == {"L1": 0.4, "L2": 0.5, "L3": 0.5}


def test_short_names_win_over_the_long_form() -> None:
    env = {"ARGUS_TOPIC_PREFIX": "short", "ARGUS_TOPICS__PREFIX": "long"}
    assert load_settings(env=env).topic_prefix == "short"
    assert load_settings(env={"ARGUS_TOPICS__PREFIX": "long"}).topic_prefix == "long"


def test_a_secret_in_the_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "argus.toml"
    f.write_text('[pagerduty]\nrouting_key = "R0UTING"\n')
    with pytest.raises(ConfigError, match=r"pagerduty\.routing_key is a secret") as err:
        load_settings(f, env={})
    assert "R0UTING" not in str(err.value)


def test_lenient_mode_logs_and_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    """Training processes (argus.collectors.start) load leniently: nothing raises, each bad
    variable is one warning naming it, and its default applies."""
    from argus.collectors.config import load_collector_config

    env = {
        "ARGUS_JOB": "j",
        "ARGUS_COLLECTORS__KERNELS_PERIOD_STEPS": "often",
        "ARGUS_COLLECTORS__OVERHEAD_BUDGET": "0.02",
        "ARGUS_STREAMS__IDLE_CLOSE_S": "200",
        "ARGUS_PAGERDUTY__EVENT_URL": "http://x",
    }
    with caplog.at_level(logging.WARNING, logger="argus.config"):
        s = load_settings(env=env, lenient=True)
        cfg = load_collector_config(s, env)
    assert (cfg.kernels_period_steps, cfg.overhead_budget) == (50, 0.02)
    assert "idle_close_s" not in s.section("streams") and not s.section("pagerduty")
    lines = [r.getMessage() for r in caplog.records if r.name == "argus.config"]
    for var in env:
        if var not in ("ARGUS_JOB", "ARGUS_COLLECTORS__OVERHEAD_BUDGET"):
            assert sum(var in line for line in lines) == 1, (var, lines)
    assert any("using 50" in line for line in lines)
    with pytest.raises(ConfigError):  # the same environment, strictly: an error
        load_settings(env=env)


# -- argus config show -------------------------------------------------------------------
def _argus(*args: str, env: dict[str, str], timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "argus.cli", *args],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def test_config_show_prints_every_key_with_its_source(tmp_path: Path) -> None:
    f = tmp_path / "argus.toml"
    f.write_text("[streams]\nreplication = 2\n[detectors.l2]\nz = 4.0\n")
    env = {
        "HOME": str(tmp_path),
        "ARGUS_CONFIG": str(f),
        "ARGUS_STREAMS__INTERNAL_PARTITIONS": "8",
        "ARGUS_DETECTORS__L2__Z": "5",
    }
    r = _argus("config", "show", "--json", env=env)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)["settings"]
    assert shown["streams.replication"] == {"value": 2, "source": "file"}
    assert shown["streams.internal_partitions"] == {
        "value": 8,
        "source": "env ARGUS_STREAMS__INTERNAL_PARTITIONS",
    }
    assert shown["detectors.l2.z"] == {"value": 5.0, "source": "env ARGUS_DETECTORS__L2__Z"}
    assert shown["streams.idle_close_s"] == {"value": 120.0, "source": "default"}
    assert shown["kafka.port"] == {"value": 19092, "source": "default"}
    from argus.streams.pipeline_config import PipelineConfig

    for name in PipelineConfig.__dataclass_fields__:  # every key, not only the overrides
        assert f"streams.{name}" in shown
    text = _argus("config", "show", env=env)
    assert re.search(r"^streams\.replication +2 +file$", text.stdout, re.M), text.stdout


def test_config_show_rejects_what_a_worker_rejects(tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "ARGUS_STATE_DIR": str(tmp_path / "state"),
        "ARGUS_KAFKA_BOOTSTRAP": "127.0.0.1:9",  # never reached: the settings fail first
        "ARGUS_STREAMS__IDLE_CLOSE_S": "200",  # > funnel_idle_s (150): a worker refuses it
    }
    show = _argus("config", "show", env=env)
    worker = _argus("worker", "l1", env=env)
    assert show.returncode == worker.returncode == 2
    error = [line for line in show.stderr.splitlines() if line.startswith("Error:")]
    assert error and "ARGUS_STREAMS__IDLE_CLOSE_S" in error[0] and "funnel_idle_s" in error[0]
    assert error[0] in worker.stderr.splitlines()
    typo = _argus("config", "show", env={**env, "ARGUS_STREAMS__IDLE_CLOSE_S": "8",
                                         "ARGUS_PAGERDUTY__EVENT_URL": "http://x"})  # fmt: skip
    assert typo.returncode == 2 and "ARGUS_PAGERDUTY__EVENT_URL" in typo.stderr


def test_the_security_table_checked_is_the_one_parsed() -> None:
    from argus.config import _fields, _SecurityTable
    from argus.kafka.security import SECURITY_KEYS

    assert set(_fields(_SecurityTable)) == set(SECURITY_KEYS)


def test_one_range_check_names_the_key() -> None:
    from dataclasses import dataclass

    from argus.config import POSITIVE, Range, check_ranges
    from argus.errors import DetectorConfigError

    @dataclass
    class C:
        a: float = 1.0
        b: int = 3

    ranges = {"a": POSITIVE, "b": Range(ge=1, le=255)}
    check_ranges(C(), "sec", ranges)
    check_ranges(C(a=float("inf"), b=255), "sec", ranges)
    for bad, msg in [
        (C(a=0.0), r"^sec\.a must be > 0, got 0\.0$"),
        (C(a=float("nan")), r"^sec\.a must be > 0, got nan$"),  # NaN is in no range
        (C(b=256), r"^sec\.b must be in \[1, 255\], got 256$"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            check_ranges(bad, "sec", ranges)
    with pytest.raises(DetectorConfigError):
        check_ranges(C(b=0), "sec", ranges, error=DetectorConfigError)
    shown = [Range(ge=0), Range(lt=1), Range(gt=0, lt=1), Range(gt=0, le=1), Range()]
    assert [str(r) for r in shown] == [">= 0", "< 1", "in (0, 1)", "in (0, 1]", "any value"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ARGUS_KAFKA_PORT": "0"}, "kafka.port must be in [1, 65535], got 0"),
        ({"ARGUS_STREAMS__METRICS_PORT": "70000"}, "streams.metrics_port must be in [0, 65535]"),
        ({"ARGUS_STREAMS__MAX_SKEW_S": "-1"}, "streams.max_skew_s must be >= 0, got -1.0"),
        (
            {"ARGUS_COLLECTORS__OVERHEAD_BUDGET": "1"},
            "collectors.overhead_budget must be in (0, 1)",
        ),
        ({"ARGUS_COLLECTORS__STACKS_RATE_HZ": "0"}, "collectors.stacks_rate_hz must be > 0"),
        ({"ARGUS_PAGERDUTY__RATE_LIMIT_EVENTS": "0"}, "pagerduty.rate_limit_events must be >= 1"),
        ({"ARGUS_PAGERDUTY__MAX_ATTEMPTS": "-1"}, "pagerduty.max_attempts must be >= 0, got -1"),
    ],
)
def test_sections_share_the_range_message(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_settings(env=env)
