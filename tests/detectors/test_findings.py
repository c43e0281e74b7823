"""Findings -> anomaly records; deterministic ids."""

from __future__ import annotations

import pytest

from argus.detectors.findings import Finding, anomaly_key, finding_id, to_anomaly
from argus.schemas.codec import Codec


def _f(**kw) -> Finding:
    base = dict(
        job="j",
        level="L3",
        kind="kernel_divergence",
        group_kind="dp",
        group_id="pp1.tp0",
        ranks=(4, 2),
        kernel="gemm",
        stream=7,
        window_start_step=10,
        window_end_step=19,
        window_start_ns=1,
        window_end_ns=2,
        score=3.0,
        threshold=1.0,
        evidence={"a": 1},
    )
    base.update(kw)
    return Finding(**base)


def test_id_depends_on_identity_not_on_scores() -> None:
    assert finding_id(_f()) == finding_id(_f(score=99.0, evidence={}))
    assert _f().ranks == (2, 4)
    for change in (
        {"ranks": (2,)},
        {"kernel": "x"},
        {"window_end_step": 20},
        {"level": "L2"},
        {"group_id": "pp0.tp0"},
        {"stream": 8},
        {"job": "k"},
    ):
        assert finding_id(_f(**change)) != finding_id(_f()), change


def test_anomaly_record_round_trips_the_wire_schema() -> None:
    rec = to_anomaly(_f(), detected_ns=123, persistence=2, confidence=0.7)
    c = Codec()
    back = c.decode_as("anomaly", c.encode("anomaly", rec))
    assert back == rec
    assert rec["evidence"] == {"a": "1"} and rec["ranks"] == [2, 4]
    assert anomaly_key(_f()) == "j/dp/pp1.tp0"


def test_bad_level_or_kind() -> None:
    with pytest.raises(ValueError, match="level"):
        _f(level="L9")
    with pytest.raises(ValueError, match="kind"):
        _f(kind="bogus")


def test_no_finding_ends_before_it_starts() -> None:
    """Issue 19: an anomaly whose window ends before it starts cannot be built, so no
    detector can emit one (the funnel used to send such an L1 finding to the DLQ)."""
    with pytest.raises(ValueError, match="ends before it starts"):
        _f(window_start_step=20, window_end_step=19)
    with pytest.raises(ValueError, match="ends before it starts"):
        _f(window_start_ns=5, window_end_ns=4)
    with pytest.raises(ValueError, match="ends before it starts"):
        _f().with_window(10, 19, 5, 4)
    _f(window_start_step=19, window_end_step=19, window_start_ns=4, window_end_ns=4)
