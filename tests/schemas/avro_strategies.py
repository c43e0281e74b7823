"""Hypothesis strategies that generate values for any argus Avro schema."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def for_schema(schema: Any, named: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """A strategy of valid values for a raw (JSON) Avro schema."""
    named = {} if named is None else named
    if isinstance(schema, str):
        prim = {
            "null": st.none(),
            "boolean": st.booleans(),
            "int": st.integers(*INT32),
            "long": st.integers(*INT64),
            "float": st.floats(width=32, allow_nan=False),
            "double": st.floats(allow_nan=False),  # inf included; NaN != NaN breaks equality
            "bytes": st.binary(max_size=64),
            "string": st.text(max_size=24),
        }
        if schema in prim:
            return prim[schema]
        return named[schema.rsplit(".", 1)[-1]]
    if isinstance(schema, list):
        return st.one_of(*[for_schema(s, named) for s in schema])
    t = schema["type"]
    if t == "record":
        fields = {}
        for f in schema["fields"]:
            fields[f["name"]] = for_schema(f["type"], named)
        strat = st.fixed_dictionaries(fields)
        named[schema["name"]] = strat
        return strat
    if t == "enum":
        strat = st.sampled_from(schema["symbols"])
        named[schema["name"]] = strat
        return strat
    if t == "array":
        return st.lists(for_schema(schema["items"], named), max_size=4)
    if t == "map":
        return st.dictionaries(st.text(max_size=8), for_schema(schema["values"], named), max_size=4)
    return for_schema(t, named)


def sample(schema: Any, rnd: Any, named: dict[str, Any] | None = None) -> Any:
    """One deterministic pseudo-random value for a raw Avro schema (``rnd``: random.Random)."""
    named = {} if named is None else named
    if isinstance(schema, str):
        gen = {
            "null": lambda: None,
            "boolean": lambda: rnd.random() < 0.5,
            "int": lambda: rnd.randint(*INT32),
            "long": lambda: rnd.randint(*INT64),
            "double": lambda: rnd.choice([0.0, -1.5, 1e300, float("inf"), rnd.random()]),
            "bytes": lambda: rnd.randbytes(rnd.randint(0, 32)),
            "string": lambda: rnd.choice(["", "ncclDevKernel_AllReduce", "ж/ü", "x" * 200]),
        }
        if schema in gen:
            return gen[schema]()
        return sample(named[schema.rsplit(".", 1)[-1]], rnd, named)
    if isinstance(schema, list):
        return sample(rnd.choice(schema), rnd, named)
    t = schema["type"]
    if t == "record":
        named[schema["name"]] = schema
        return {f["name"]: sample(f["type"], rnd, named) for f in schema["fields"]}
    if t == "enum":
        named[schema["name"]] = schema
        return rnd.choice(schema["symbols"])
    if t == "array":
        return [sample(schema["items"], rnd, named) for _ in range(rnd.randint(0, 3))]
    if t == "map":
        return {f"k{i}": sample(schema["values"], rnd, named) for i in range(rnd.randint(0, 3))}
    return sample(t, rnd, named)
