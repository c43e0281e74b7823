"""The Megatron timer mapping against megatron-core's real ``Timers`` class, in process (no
broker: the collector's producer points at a closed port)."""

from __future__ import annotations

import pytest
import torch

import argus.collectors as ac
from argus.config import Settings


def test_megatron_timers_map_to_phases_and_steps(
    offline: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    timers_mod = pytest.importorskip("megatron.core.timers")
    if not torch.cuda.is_available():  # Timer.start/stop synchronise the GPU
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    from argus.collectors.integrations.megatron import MEGATRON_PHASES, instrument_timers

    timers = timers_mod.Timers(log_level=1, log_option="minmax")
    instrument_timers(
        timers,
        job="mg-unit",
        settings=offline,
        kernels=False,
        control=False,
        publish_topology=False,
        stacks=False,
    )
    col = ac.active()
    assert col is not None and col.in_step and col.step_index == 0
    assert isinstance(timers, timers_mod.Timers)  # still the framework's class (a subclass)
    for name in ("forward-compute", "backward-compute", "all-grads-sync"):
        t = timers(name, log_level=1)
        t.start()
        torch.randn(64, 64) @ torch.randn(64, 64)
        t.stop()
    timers("interval-time", log_level=0).start()  # not mapped: the framework's own timer
    assert type(timers("interval-time")) is timers_mod.Timer
    timers("forward-recv", log_level=2).start()  # above the log level: Megatron's dummy
    timers("forward-recv").stop()
    got = {(n, k) for n, k, *_ in col.items}
    assert got == {
        MEGATRON_PHASES[n] for n in ("forward-compute", "backward-compute", "all-grads-sync")
    } | {("pp_recv_forward", "p2p")}
    # Megatron's own accounting is untouched
    assert timers("forward-compute").elapsed(reset=False) > 0
    timers("optimizer", log_level=1).start()
    timers("optimizer").stop()  # auto_step: closes step 0, opens step 1
    assert col.steps_emitted == 1 and col.step_index == 1 and col.items == []
    assert col.errors == 0
    ac.shutdown(timeout_s=0.5)
    assert col.steps_emitted == 1  # the step open after the last iteration is dropped
