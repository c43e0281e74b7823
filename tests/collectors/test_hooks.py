"""Automatic phases for plain PyTorch: forward/backward/optimizer, module phases, DDP all-reduce."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

import argus.collectors as ac  # noqa: E402
from argus.config import Settings  # noqa: E402


def _names(col) -> list[str]:  # type: ignore[no-untyped-def]
    return [it[0] for it in col.items]


def _model():  # type: ignore[no-untyped-def]
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_model_optimizer_and_module_phases(offline: Settings) -> None:
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    col = ac.start(
        job="hooks",
        settings=offline,
        model=m,
        optimizer=opt,
        phases={"mlp": [m[0], m[2]]},
        auto_step=False,
        kernels=False,
        control=False,
        publish_topology=False,
    )
    ac.step_begin(0)
    m(torch.randn(4, 16)).sum().backward()
    opt.step()
    names = _names(col)
    assert names.count("mlp") == 2
    assert {"forward", "backward", "optimizer"} <= set(names)
    spans = {it[0]: it[4] - it[3] for it in col.items}
    assert all(v >= 0 for v in spans.values())
    ac.step_end()
    assert col.steps_emitted == 1 and col.errors == 0


def test_auto_step_closes_a_step_per_optimizer_step(offline: Settings) -> None:
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    col = ac.start(
        job="hooks",
        settings=offline,
        model=m,
        optimizer=opt,
        kernels=False,
        control=False,
        publish_topology=False,
    )
    for _ in range(3):
        m(torch.randn(4, 16)).sum().backward()
        opt.step()
    assert col.steps_emitted == 3 and col.step_index == 3


def test_hooks_are_inert_when_phases_are_switched_off(offline: Settings) -> None:
    m = _model()
    col = ac.start(
        job="hooks", settings=offline, model=m, kernels=False, control=False, publish_topology=False
    )
    col.set_channels(phases=False)
    ac.step_begin(0)
    m(torch.randn(4, 16)).sum().backward()
    assert col.items == []


def test_ddp_comm_hook_times_the_allreduce(offline: Settings) -> None:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    from tests.collectors.helpers import closed_port

    os.environ["MASTER_PORT"] = str(closed_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        m = _model()
        ddp = torch.nn.parallel.DistributedDataParallel(m)
        col = ac.start(
            job="hooks",
            settings=offline,
            model=ddp,
            ddp=ddp,
            kernels=False,
            control=False,
            publish_topology=False,
        )
        ac.step_begin(0)
        ddp(torch.randn(4, 16)).sum().backward()
        items = [it for it in col.items if it[0] == "dp_allreduce"]
        assert items and all(it[1] == "comm" and it[2] == "span" for it in items)
        assert all(it[4] >= it[3] for it in items)
        # gradients are still averaged correctly through the wrapped hook
        assert all(p.grad is not None for p in m.parameters())
        assert col.errors == 0
    finally:
        ac.shutdown(timeout_s=0.5)
        dist.destroy_process_group()


def test_phase_and_steps_are_noops_without_start() -> None:
    assert ac.active() is None
    with ac.step(), ac.phase("x"):
        pass
    ac.step_end()  # no open step, no collector: nothing happens

    @ac.phase("y")
    def f(a: int) -> int:
        return a + 1

    assert f(1) == 2


def test_forked_child_is_inert(offline: Settings) -> None:
    col = ac.start(
        job="hooks", settings=offline, kernels=False, control=False, publish_topology=False
    )
    pid = os.fork()
    if pid == 0:
        try:
            with ac.step(), ac.phase("child"):
                pass
            # the parent's collector, still referenced here, stays closed (the at-fork hook,
            # not a pid check on the step path) and queues nothing
            emitted = col.steps_emitted
            col.step_begin()
            col.step_end()
            inert = col._closed and col.steps_emitted == emitted and not col.producer._queue
            os._exit(0 if ac.active() is None and inert else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ac.active() is col


@pytest.mark.kafka
def test_autorun_needs_no_code_change(prefixed: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    from argus.topics import topic_name
    from tests.collectors.helpers import consume

    script = tmp_path / "plain_train.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(8, 1)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(5):\n"
        "    m(torch.randn(4, 8)).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n"
    )
    env = {
        **os.environ,
        "ARGUS_JOB": "autorun-test",
        "ARGUS_TOPIC_PREFIX": prefixed.topic_prefix,
        "ARGUS_STATE_DIR": str(tmp_path),
        "ARGUS_COLLECTORS__KERNELS": "false",
    }
    r = subprocess.run(
        [sys.executable, "-m", "argus.collectors.autorun", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    recs = consume(prefixed, topic_name("raw.steps", prefixed.topic_prefix), 5)
    assert [rec["step"] for _, rec in recs] == [0, 1, 2, 3, 4]
    assert not consume(prefixed, topic_name("raw.steps", prefixed.topic_prefix), 6, timeout_s=3)[5:]
    assert all(rec["phases"][0]["name"] == "optimizer" for _, rec in recs)
