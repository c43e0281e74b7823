"""``windows._replace`` (the index's in-place move of one value in a sorted list) leaves
the list a delete and an insort would."""

from __future__ import annotations

import bisect

from hypothesis import given
from hypothesis import strategies as st

from argus.streams.windows import _replace


@given(st.lists(st.integers(-5, 20), min_size=1, max_size=12), st.data())
def test_replace_as_delete_and_insort(values: list[int], data: st.DataObject) -> None:
    values.sort()
    old = data.draw(st.sampled_from(values))
    new = data.draw(st.integers(-8, 25))
    want = list(values)
    del want[bisect.bisect_left(want, old)]
    bisect.insort(want, new)
    _replace(values, old, new)
    assert values == want


def test_replace_tuples_in_place_and_not() -> None:
    v = [(1, "a"), (2, "b"), (5, "c")]
    _replace(v, (2, "b"), (3, "b"))  # stays between its neighbours: in place
    assert v == [(1, "a"), (3, "b"), (5, "c")]
    _replace(v, (1, "a"), (6, "a"))  # passes both
    assert v == [(3, "b"), (5, "c"), (6, "a")]
