"""validate.Limits repeats the ``max_*`` defaults of PipelineConfig; they must not drift."""

from __future__ import annotations

from dataclasses import fields

from argus.streams.pipeline_config import PipelineConfig
from argus.streams.validate import Limits


def test_limits_defaults_are_the_pipeline_config_defaults() -> None:
    pcfg = PipelineConfig()
    assert {f.name for f in fields(Limits)} <= {f.name for f in fields(PipelineConfig)}
    assert Limits() == Limits.from_pipeline(pcfg)
