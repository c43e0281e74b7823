"""Detector config: defaults, overrides (file and env strings), typed errors."""

from __future__ import annotations

import pytest

from argus.detectors.config import DetectorsConfig, L1Config, L3Config
from argus.errors import DetectorConfigError


def test_defaults() -> None:
    c = DetectorsConfig()
    assert c.l1.spike_ratio == 2.0 and c.l3.iqr_alpha == 3.0 and c.l2.z == 3.5


def test_overrides_coerce_env_strings() -> None:
    c = DetectorsConfig.from_settings(
        {
            "l1": {"window": "12", "spike_ratio": "3"},
            "l3": {"iqr_alpha": 2, "match_stream": "false", "skip_stream_kinds": "p2p,comm"},
            "funnel": {"level_weight": {"L1": "0.5"}},
        }
    )
    assert c.l1.window == 12 and c.l1.spike_ratio == 3.0
    assert c.l3.iqr_alpha == 2.0 and c.l3.match_stream is False
    assert c.l3.skip_stream_kinds == ("p2p", "comm")
    assert c.funnel.level_weight["L1"] == 0.5 and c.funnel.level_weight["L2"] == 0.5


@pytest.mark.parametrize(
    "section",
    [
        {"l9": {}},
        {"l1": {"windw": 3}},
        {"l1": {"window": "abc"}},
        {"l1": {"window": 0}},
        {"l1": "x"},
        {"l3": {"iqr_alpha": -1}},
        {"l2": {"late_arrival": "maybe"}},
    ],
)
def test_bad_values_raise_naming_the_key(section: dict) -> None:
    with pytest.raises(DetectorConfigError):
        DetectorsConfig.from_settings(section)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"l1": {"window": 0}}, r"detectors\.l1\.window must be > 0, got 0"),
        ({"l2": {"alpha": 1}}, r"detectors\.l2\.alpha must be in \(0, 1\), got 1\.0"),
        ({"l2": {"z": "nan"}}, r"detectors\.l2\.z must be > 0, got nan"),  # NaN in no range
        ({"l3": {"min_ranks": 1}}, r"detectors\.l3\.min_ranks must be >= 2, got 1"),
        ({"funnel": {"trigger_confidence": 0}}, r"detectors\.funnel\.trigger_confidence"),
    ],
)
def test_ranges_read_as_in_every_section(section: dict, message: str) -> None:
    """The ranges go through argus.config.check_ranges: one message, the dotted key."""
    with pytest.raises(DetectorConfigError, match=message):
        DetectorsConfig.from_settings(section)


def test_frozen() -> None:
    with pytest.raises(AttributeError):
        L1Config().window = 3  # type: ignore[misc]
    assert L3Config(n_probs=16).n_probs == 16
