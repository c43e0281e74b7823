"""Configuration: bad arguments are one clear error at start; bad file or environment values
log and fall back (never stop a training job); never a crash mid-run."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import argus.collectors as ac
from argus.collectors.config import CollectorConfig, load_collector_config
from argus.collectors.errors import CollectorConfigError
from argus.config import load_settings


def _settings(env: dict[str, str]):  # type: ignore[no-untyped-def]
    return load_settings(env=env, lenient=True)  # as start() loads them in a training process


def test_defaults_and_env_override() -> None:
    env = {
        "ARGUS_JOB": "j1",
        "ARGUS_COLLECTORS__KERNELS_PERIOD_STEPS": "100",
        "ARGUS_COLLECTORS__KERNELS": "off",
    }
    cfg = load_collector_config(_settings(env), env)
    assert cfg.job == "j1"
    assert cfg.kernels_period_steps == 100
    assert cfg.kernels is False
    assert cfg.overhead_budget == 0.01


def test_arguments_win_over_environment() -> None:
    env = {"ARGUS_JOB": "from-env", "ARGUS_COLLECTORS__OVERHEAD_BUDGET": "0.02"}
    cfg = load_collector_config(_settings(env), env, job="from-arg", overhead_budget=0.005)
    assert (cfg.job, cfg.overhead_budget) == ("from-arg", 0.005)


@pytest.mark.parametrize(
    ("env", "kwargs", "names"),
    [
        ({}, {}, "collectors.job is not set"),
        ({"ARGUS_JOB": "a/b"}, {}, "collectors.job .*from env ARGUS_JOB"),
        ({"ARGUS_JOB": "j"}, {"kernels_backend": "nvprof"}, "kernels_backend"),
        ({"ARGUS_JOB": "j"}, {"overhead_budget": 1.5}, "overhead_budget"),
        ({"ARGUS_JOB": "j"}, {"max_queue_records": 0}, "max_queue_records"),
        ({"ARGUS_JOB": "j"}, {"kernels_period_steps": "often"}, "kernels_period_steps"),
        ({"ARGUS_JOB": "j"}, {"phases": "maybe"}, "collectors.phases must be a boolean"),
        (
            {"ARGUS_JOB": "j"},
            {"kernels_active_steps": 9, "kernels_period_steps": 3},
            "kernels_active_steps",
        ),
        (
            {"ARGUS_JOB": "j"},
            {"kernel_rate": 3},
            "unknown key 'kernel_rate' in \\[collectors\\] \\(from a start\\(\\) argument\\)",
        ),
    ],
)
def test_bad_arguments_name_the_key(env: dict[str, str], kwargs: dict, names: str) -> None:
    with pytest.raises(CollectorConfigError, match=names):
        load_collector_config(_settings(env), env, **kwargs)


@pytest.mark.parametrize(
    ("var", "value", "key", "default"),
    [
        ("ARGUS_COLLECTORS__KERNELS_PERIOD_STEPS", "often", "kernels_period_steps", 50),
        ("ARGUS_COLLECTORS__DELIVERY_INTERVAL_MS", "0", "delivery_interval_ms", 1000),
        ("ARGUS_COLLECTORS__PHASES", "maybe", "phases", True),
        ("ARGUS_COLLECTORS__KERNELS_ACTIVE_STEPS", "80", "kernels_active_steps", 1),
        ("ARGUS_COLLECTORS__KERNEL_RATE", "3", "kernel_rate", None),
        ("ARGUS_COLLECTOR__KERNELS", "off", "collector", None),
    ],
)
def test_bad_environment_logs_and_falls_back(
    caplog: pytest.LogCaptureFixture, var: str, value: str, key: str, default: object
) -> None:
    """Inside a training process a bad variable is a warning naming it, and its default."""
    env = {"ARGUS_JOB": "j", "ARGUS_COLLECTORS__KERNELS": "off", var: value}
    with caplog.at_level(logging.WARNING, logger="argus.config"):
        cfg = load_collector_config(_settings(env), env)
    assert cfg.job == "j" and cfg.kernels is False  # the good variable still applies
    if default is not None:
        assert getattr(cfg, key) == default
    else:
        assert cfg == CollectorConfig(job="j", kernels=False)
    logged = [r.getMessage() for r in caplog.records if r.name == "argus.config"]
    assert len(logged) == 1 and var in logged[0] and key in logged[0], logged


def test_bad_file_value_falls_back_too(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    f = tmp_path / "argus.toml"
    f.write_text("[collectors]\nkernels_period_steps = -3\noverhead_budget = 0.02\n")
    env = {"ARGUS_JOB": "j"}
    with caplog.at_level(logging.WARNING, logger="argus.config"):
        cfg = load_collector_config(load_settings(f, env=env, lenient=True), env)
    assert (cfg.kernels_period_steps, cfg.overhead_budget) == (50, 0.02)
    assert any(
        "collectors.kernels_period_steps must be > 0" in r.getMessage() and str(f) in r.getMessage()
        for r in caplog.records
    )


def test_start_falls_back_on_a_bad_variable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The whole start() path: settings loaded leniently from the environment."""
    from tests.collectors.helpers import closed_port

    env = {
        "ARGUS_JOB": "j",
        "ARGUS_STATE_DIR": str(tmp_path),
        "ARGUS_KAFKA_BOOTSTRAP": f"127.0.0.1:{closed_port()}",
        "ARGUS_COLLECTORS__MESSAGE_TIMEOUT_MS": "-5",
        "ARGUS_STREAMS__IDLE_CLOSE_S": "soon",  # not the collectors' section: logged too
    }
    with caplog.at_level(logging.WARNING, logger="argus.config"):
        col = ac.start(env=env, kernels=False, stacks=False, control=False, publish_topology=False)
    assert col is ac.active() and col.cfg.message_timeout_ms == 30_000
    logged = " ".join(r.getMessage() for r in caplog.records if r.name == "argus.config")
    assert "ARGUS_COLLECTORS__MESSAGE_TIMEOUT_MS" in logged
    assert "ARGUS_STREAMS__IDLE_CLOSE_S" in logged


def test_start_raises_once_and_leaves_nothing_running(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {"ARGUS_JOB": "j", "ARGUS_STATE_DIR": str(tmp_path)}
    with pytest.raises(CollectorConfigError, match="message_timeout_ms"):
        ac.start(env=env, message_timeout_ms=-5)
    assert ac.active() is None
    # the API stays a harmless no-op afterwards
    with ac.step(), ac.phase("x"):
        pass


def test_bad_topology_is_a_config_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {"ARGUS_JOB": "j", "RANK": "5", "WORLD_SIZE": "4", "ARGUS_STATE_DIR": str(tmp_path)}
    with pytest.raises(CollectorConfigError, match="rank 5 is outside world size 4"):
        ac.start(env=env)
    assert ac.active() is None
