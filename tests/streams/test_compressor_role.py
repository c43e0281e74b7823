"""The compressor role without Kafka (:mod:`argus.streams.roles.compressor`): what it takes,
holds, makes and refuses. The faust agent over it is tested on the real broker
(``test_compressor_batch.py``, ``test_split_window_restart.py``, ``test_l3_routing.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from argus.errors import DecodeError, DetectorInputError
from argus.routing import Routing
from argus.schemas import Codec
from argus.schemas.kernel_parts import PartError, batch_size_bytes, split_batch
from argus.sim.layout import Layout
from argus.streams import synth
from argus.streams.limits import Limits
from argus.streams.pipeline_config import PipelineConfig
from argus.streams.roles.compressor import Compressor
from argus.streams.roles.l3 import route_summary
from argus.streams.validate import Checker, InputError
from argus.summaries.summary_record import SummarizedBatches

CODEC = Codec()


class Holder:
    """Records holds and releases (a token: any hashable)."""

    def __init__(self) -> None:
        self.held: list[Any] = []

    def hold(self, token: Any) -> None:
        self.held.append(token)

    def release(self, token: Any) -> None:
        self.held.remove(token)


def _role(holder: Holder, *, route_required: bool = False) -> Compressor:
    return Compressor(
        CODEC,
        Checker(Limits.from_pipeline(PipelineConfig())),
        Routing(),
        holder,
        fidelity_every=16,
        route_required=route_required,
    )


def _batches(n: int, window: int = 3, events: int = 400) -> list[dict[str, Any]]:
    lay, rng, mix = Layout.for_ranks(16), np.random.default_rng(5), synth.default_mix(0)
    return [
        synth.kernel_batch(
            rng, mix, job="j", rank=r, window_id=window, n_events=events, coords=lay.coords(r)
        )
        for r in range(n)
    ]


def test_a_poll_makes_what_summarize_makes_one_window_at_a_time() -> None:
    holder = Holder()
    role = _role(holder)
    batches = _batches(4)
    taken = []
    for i, b in enumerate(batches):
        t, given_up = role.take(CODEC.encode("kernel_batch", b), token=i, part=i % 2)
        assert t is not None and not given_up and t.events == 400
        taken.append(t)
    made = role.summarize(taken)
    assert [m.taken.token for m in made] == [0, 1, 2, 3] and not holder.held
    for i, (m, b) in enumerate(zip(made, batches, strict=True)):
        assert m.error is None and m.key == f"j/{i}".encode()
        alone, _ = SummarizedBatches([b]).encoded(0, CODEC, announced=set())
        assert m.value == alone  # first window of each rank: every name announced
        decoded = CODEC.decode_as("kernel_summary", m.value)
        assert m.items == route_summary(decoded, m.value, Routing(), part=i % 2)


def test_bad_bytes_and_bad_records_raise_with_their_reason() -> None:
    role = _role(Holder())
    with pytest.raises(DecodeError) as e:
        role.take(b"\x00\x01garbage", token=0, part=0)
    assert e.value.reason == "unknown-schema-id"
    bad = dict(_batches(1)[0], window_end_ns=0)  # ends before it starts
    with pytest.raises(InputError) as e2:
        role.take(CODEC.encode("kernel_batch", bad), token=1, part=0)
    assert e2.value.reason == "bad-duration"


def test_split_window_parts_held_until_the_last_one() -> None:
    holder = Holder()
    role = _role(holder)
    whole = _batches(1, events=3000)[0]
    parts = split_batch(whole, batch_size_bytes(whole) // 3)
    assert len(parts) >= 3
    for k, p in enumerate(parts[:-1]):
        t, _ = role.take(CODEC.encode("kernel_batch", p), token=("p", k), part=0)
        assert t is None
    assert holder.held == [("p", k) for k in range(len(parts) - 1)]
    t, _ = role.take(CODEC.encode("kernel_batch", parts[-1]), token=("p", len(parts) - 1), part=0)
    assert t is not None and t.columns is None and t.events == 3000
    assert sorted(role.parts.take_released()) == [("p", k) for k in range(len(parts))]
    (made,) = role.summarize([t])
    alone, _ = SummarizedBatches([whole]).encoded(0, CODEC, announced=set())
    assert made.value == alone


def test_a_bad_part_is_released_when_it_raises() -> None:
    holder = Holder()
    role = _role(holder)
    parts = split_batch(_batches(1, events=3000)[0], 30_000)
    role.take(CODEC.encode("kernel_batch", parts[0]), token="a", part=0)
    wrong = dict(parts[1], parts=len(parts) + 1)  # disagrees with the first part
    with pytest.raises(PartError, match="parts"):
        role.take(CODEC.encode("kernel_batch", wrong), token="b", part=0)
    assert holder.held == ["a"]


class _NoScope(Routing):
    def scope_of(self, coords: Any, kind: str) -> tuple[str, int]:
        raise DetectorInputError("coords name no scope")


@pytest.mark.parametrize("required", [False, True])
def test_a_summary_without_scope(required: bool) -> None:
    role = _role(Holder(), route_required=required)
    role.routing = _NoScope()
    t, _ = role.take(CODEC.encode("kernel_batch", _batches(1)[0]), token=0, part=0)
    assert t is not None
    (made,) = role.summarize([t])
    if required:  # L3 reads only what compressors routed: the raw record to the DLQ
        assert isinstance(made.error, DetectorInputError) and not made.value
        # the names it would have announced come with the rank's next window
        role.routing = Routing()
        nxt = dict(_batches(1, window=4)[0])
        t2, _ = role.take(CODEC.encode("kernel_batch", nxt), token=1, part=0)
        assert t2 is not None
        (made2,) = role.summarize([t2])
        assert CODEC.decode_as("kernel_summary", made2.value)["kernel_names"]
    else:  # L3's router reads the unmarked summary and sends it to the DLQ itself
        assert made.error is None and made.value and made.items == []
