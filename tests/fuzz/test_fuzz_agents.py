"""Fuzz each agent's input path: a result, or an ArgusError with a reason code; nothing else.

The reason is what the DLQ record carries (``Ctx.dlq``), so it must be a known code.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given

from argus.errors import ArgusError
from argus.schemas.kernel_parts import PART_REASONS
from argus.streams.validate import REASONS, Checker, Limits

from . import paths
from .strategies import FUZZ, agent_input, good_records
from .test_fuzz_codec import DECODE_REASONS

KNOWN = (
    DECODE_REASONS
    | set(REASONS)
    | set(PART_REASONS)
    | {"bad-column", "bad-name-index", "bad-summary"}
)


def outcome(name: str, raw: bytes) -> Any:
    chk = Checker(Limits(), clock_ns=time.time_ns)
    try:
        return paths.PATHS[name](raw, chk)
    except ArgusError as exc:
        reason = getattr(exc, "reason", None)
        assert reason in KNOWN, f"{type(exc).__name__} without a known reason: {exc!r}"
        return exc


@pytest.mark.parametrize("name", sorted(paths.PATHS))
def test_good_records_pass(name: str) -> None:
    from .strategies import CODEC

    got = outcome(name, CODEC.encode(name, good_records()[name]))
    assert not isinstance(got, Exception), got


@FUZZ
@given(agent_input("step_record"))
def test_steps_router(raw: bytes) -> None:
    outcome("step_record", raw)


@FUZZ
@given(agent_input("kernel_batch"))
def test_compressor(raw: bytes) -> None:
    outcome("kernel_batch", raw)


@FUZZ
@given(agent_input("kernel_summary"))
def test_l3_router(raw: bytes) -> None:
    outcome("kernel_summary", raw)


@FUZZ
@given(agent_input("stack_batch"))
def test_stacks_router(raw: bytes) -> None:
    outcome("stack_batch", raw)


@FUZZ
@given(agent_input("anomaly"))
def test_funnel_router(raw: bytes) -> None:
    outcome("anomaly", raw)
