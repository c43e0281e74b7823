"""Hypothesis strategies of hostile input: valid records mutated in meaning or in bytes.

* :func:`nasty` - values of an Avro type biased to edges (-1, 0, 2**63 - 1, NaN, inf, empty,
  huge lengths), always encodable, so a mutated record still reaches the validators;
* :func:`field_mutants` - a good record with 1-3 top-level fields replaced by nasty values;
* :func:`byte_mutants` - a good encoding with bits flipped, cut short, a foreign or unknown
  fingerprint, bytes inserted or appended, or Confluent framing;
* :func:`agent_input` - all of the above and random bytes, as the bytes an agent consumes.

``FUZZ`` is the settings profile: ``ARGUS_FUZZ_EXAMPLES`` examples per target (200 in the
normal suite; ``make fuzz`` runs 10,000).
"""

from __future__ import annotations

import os
import time
from functools import cache
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from argus.detectors.findings import Finding, to_anomaly
from argus.schemas import Codec
from argus.schemas.arrays import pack
from argus.schemas.codec import SINGLE_OBJECT_MAGIC, load_schemas
from argus.sim.simulate import SimRun, simulate
from argus.summaries.summary_record import summarize_batch

EXAMPLES = int(os.environ.get("ARGUS_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

CODEC = Codec()
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
_EDGE = [-1, 0, 1, 2, 7, 255, 256, 65535, 2**31 - 1, -(2**31)]
_EDGE64 = [*_EDGE, 2**32, 2**53, 2**62, 2**63 - 1, -(2**63), 10**15, 1_780_000_000 * 10**9]


def nasty(schema: Any, named: dict[str, Any] | None = None, depth: int = 0) -> st.SearchStrategy:
    """Encodable values of a raw Avro schema, biased towards edge cases."""
    named = {} if named is None else named
    if isinstance(schema, str):
        prim: dict[str, st.SearchStrategy[Any]] = {
            "null": st.none(),
            "boolean": st.booleans(),
            "int": st.one_of(st.sampled_from(_EDGE), st.integers(*INT32)),
            "long": st.one_of(st.sampled_from(_EDGE64), st.integers(*INT64)),
            "float": st.floats(width=32),
            "double": st.floats(),  # NaN and infinities included
            "bytes": st.one_of(
                st.binary(max_size=64),
                st.lists(st.integers(*INT32), max_size=16).map(lambda v: pack(v, "int64")),
                st.lists(st.floats(width=32), max_size=16).map(lambda v: pack(v, "float32")),
                st.lists(st.integers(0, 2**32 - 1), max_size=16).map(lambda v: pack(v, "uint32")),
            ),
            "string": st.one_of(st.sampled_from(["", "/", "a/b", "x" * 300]), st.text(max_size=12)),
        }
        if schema in prim:
            return prim[schema]
        return named[schema.rsplit(".", 1)[-1]]
    if isinstance(schema, list):
        return st.one_of(*[nasty(s, named, depth) for s in schema])
    t = schema["type"]
    if t == "record":
        strat = st.fixed_dictionaries(
            {f["name"]: nasty(f["type"], named, depth + 1) for f in schema["fields"]}
        )
        named[schema["name"]] = strat
        return strat
    if t == "enum":
        named[schema["name"]] = st.sampled_from(schema["symbols"])
        return named[schema["name"]]
    if t == "array":
        return st.lists(nasty(schema["items"], named, depth + 1), max_size=4 if depth else 6)
    if t == "map":
        return st.dictionaries(
            st.text(max_size=6), nasty(schema["values"], named, depth + 1), max_size=3
        )
    return nasty(t, named, depth)


def _small_batch(b: dict[str, Any], n: int = 48) -> dict[str, Any]:
    out = dict(b)
    for col, dt in (
        ("name_idx", "<u4"),
        ("stream", "<u4"),
        ("start_ns", "<i8"),
        ("duration_ns", "<i8"),
    ):
        out[col] = np.frombuffer(b[col], dt)[:n].tobytes()
    return out


@cache
def good_records() -> dict[str, dict[str, Any]]:
    """One valid record of every type an agent consumes (simulator epoch and wall clock)."""
    run = SimRun.make("healthy", ranks=32, steps=1, seed=0)
    got: dict[str, dict[str, Any]] = {}
    for suffix, _key, rec in simulate(run):
        got.setdefault(suffix, rec)
    batch = _small_batch(got["raw.kernels"])
    now = time.time_ns()
    step = got["raw.steps"]
    finding = Finding(
        job=step["job"],
        level="L2",
        kind="straggler",
        group_kind="dp",
        group_id="pp0.tp0",
        ranks=(3,),
        phase="forward",
        window_start_step=0,
        window_end_step=3,
        window_start_ns=step["start_ns"],
        window_end_ns=step["end_ns"],
        score=4.5,
        threshold=3.0,
        observed=2.0,
        baseline=1.0,
        unit="ms",
    )
    return {
        "step_record": step,
        "kernel_batch": batch,
        "kernel_summary": summarize_batch(batch),
        "stack_batch": {
            "job": step["job"],
            "rank": 3,
            "pid": 99,
            "host": "node0",
            "window_start_ns": now - 10**10,
            "window_end_ns": now,
            "sample_rate_hz": 100.0,
            "samples": 1000,
            "errors": 0,
            "stacks": [
                {"stack": "MainThread;train (t.py:1);forward (m.py:9)", "count": 700},
                {"stack": "MainThread;train (t.py:1);step (o.py:3)", "count": 300},
            ],
        },
        "anomaly": to_anomaly(finding, detected_ns=now),
    }


def field_mutants(name: str) -> st.SearchStrategy[dict[str, Any]]:
    """The good ``name`` record with 1-3 top-level fields replaced by nasty values."""
    schema = load_schemas()[name].raw
    named: dict[str, Any] = {}
    nasty(schema, named)  # registers the named types for the field strategies
    by_field = {f["name"]: nasty(f["type"], named, 1) for f in schema["fields"]}
    base = good_records()[name]

    @st.composite
    def mutate(draw: st.DrawFn) -> dict[str, Any]:
        keys = draw(
            st.lists(st.sampled_from(sorted(by_field)), min_size=1, max_size=3, unique=True)
        )
        rec = dict(base)
        for k in keys:
            rec[k] = draw(by_field[k])
        return rec

    return mutate()


def byte_mutants(data: bytes) -> st.SearchStrategy[bytes]:
    """``data`` (a framed record) damaged in one of several ways."""
    n = len(data)
    fps = [s.fingerprint for s in load_schemas().values()]
    flips = st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 7)), min_size=1, max_size=8)

    def flip(ps: list[tuple[int, int]]) -> bytes:
        b = bytearray(data)
        for i, bit in ps:
            b[i] ^= 1 << bit
        return bytes(b)

    return st.one_of(
        flips.map(flip),
        st.integers(0, n - 1).map(lambda i: data[:i]),
        st.sampled_from(fps).map(lambda fp: SINGLE_OBJECT_MAGIC + fp + data[10:]),
        st.binary(min_size=8, max_size=8).map(lambda fp: SINGLE_OBJECT_MAGIC + fp + data[10:]),
        st.tuples(st.integers(0, n), st.binary(min_size=1, max_size=8)).map(
            lambda t: data[: t[0]] + t[1] + data[t[0] :]
        ),
        st.binary(min_size=1, max_size=16).map(lambda tail: data + tail),
        st.integers(0, 2**32 - 1).map(lambda sid: b"\x00" + sid.to_bytes(4, "big") + data[10:]),
    )


def _encode(name: str, rec: dict[str, Any]) -> bytes:
    return CODEC.encode(name, rec)


def agent_input(name: str) -> st.SearchStrategy[bytes]:
    """Bytes an agent consuming ``name`` records may see on its topic."""
    good = _encode(name, good_records()[name])
    other = sorted(n for n in good_records() if n != name)
    return st.one_of(
        field_mutants(name).map(lambda r: _encode(name, r)),
        byte_mutants(good),
        nasty(load_schemas()[name].raw).map(lambda r: _encode(name, r)),
        st.sampled_from(other).map(lambda o: _encode(o, good_records()[o])),  # wrong type
        st.binary(max_size=128),
    )
