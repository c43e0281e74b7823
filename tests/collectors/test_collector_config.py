"""Configuration: one clear error at start, never a crash mid-run."""

from __future__ import annotations

import pytest

import argus.collectors as ac
from argus.collectors.config import load_collector_config
from argus.collectors.errors import CollectorConfigError
from argus.config import load_settings


def _settings(env: dict[str, str]):  # type: ignore[no-untyped-def]
    return load_settings(env=env)


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
        ({"ARGUS_JOB": "a/b"}, {}, "collectors.job"),
        (
            {"ARGUS_JOB": "j", "ARGUS_COLLECTORS__KERNELS_PERIOD_STEPS": "often"},
            {},
            "kernels_period_steps",
        ),
        ({"ARGUS_JOB": "j"}, {"kernels_backend": "nvprof"}, "kernels_backend"),
        ({"ARGUS_JOB": "j"}, {"overhead_budget": 1.5}, "overhead_budget"),
        ({"ARGUS_JOB": "j"}, {"max_queue_records": 0}, "max_queue_records"),
        (
            {"ARGUS_JOB": "j", "ARGUS_COLLECTORS__DELIVERY_INTERVAL_MS": "0"},
            {},
            "delivery_interval_ms",
        ),
        (
            {"ARGUS_JOB": "j"},
            {"kernels_active_steps": 9, "kernels_period_steps": 3},
            "kernels_active_steps",
        ),
        ({"ARGUS_JOB": "j", "ARGUS_COLLECTORS__PHASES": "maybe"}, {}, "collectors.phases"),
        ({"ARGUS_JOB": "j"}, {"kernel_rate": 3}, "unknown collectors setting 'kernel_rate'"),
    ],
)
def test_bad_configuration_names_the_key(env: dict[str, str], kwargs: dict, names: str) -> None:
    with pytest.raises(CollectorConfigError, match=names.replace(".", r"\.").replace("'", "'")):
        load_collector_config(_settings(env), env, **kwargs)


def test_start_raises_once_and_leaves_nothing_running(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {
        "ARGUS_JOB": "j",
        "ARGUS_STATE_DIR": str(tmp_path),
        "ARGUS_COLLECTORS__MESSAGE_TIMEOUT_MS": "-5",
    }
    with pytest.raises(CollectorConfigError, match="message_timeout_ms"):
        ac.start(env=env)
    assert ac.active() is None
    # the API stays a harmless no-op afterwards
    with ac.step(), ac.phase("x"):
        pass


def test_bad_topology_is_a_config_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {"ARGUS_JOB": "j", "RANK": "5", "WORLD_SIZE": "4", "ARGUS_STATE_DIR": str(tmp_path)}
    with pytest.raises(CollectorConfigError, match="rank 5 is outside world size 4"):
        ac.start(env=env)
    assert ac.active() is None
