"""Static group membership ids (argus.streams.static_membership): stable across a restart,
distinct for live workers of one group, invalid ids refused; and the faust setting that
carries them to aiokafka's JoinGroup. On the broker: tests/pipeline/test_rejoin.py."""

from __future__ import annotations

import inspect
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from faust.transport.drivers import aiokafka as faust_aiokafka

from argus.config import ConfigError, load_settings
from argus.streams import static_membership
from argus.streams.app import build_app

_HOLD = """
import sys, time
from pathlib import Path
from argus.streams.static_membership import resolve
print(resolve("auto", sys.argv[1], Path(sys.argv[2])), flush=True)
time.sleep(60)
"""


def _holder(group: str, state_dir: Path) -> tuple[subprocess.Popen[str], str]:
    """A child process holding a slot of ``group``; returns it and its id."""
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLD, group, str(state_dir)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    return p, p.stdout.readline().strip()


def test_auto_ids_are_distinct_while_held_and_reused_after_sigkill(tmp_path: Path) -> None:
    first, id0 = _holder("p-l1-l2", tmp_path)
    second, id1 = _holder("p-l1-l2", tmp_path)
    other, id_other = _holder("p-l3", tmp_path)  # another group: its own slots
    try:
        assert id0.endswith("-w0") and id1.endswith("-w1") and id_other.endswith("-w0")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        again, id_again = _holder("p-l1-l2", tmp_path)  # the restarted worker
        again.kill()
        again.wait(10)
        assert id_again == id0
    finally:
        for p in (first, second, other):
            p.kill()
            p.wait(10)


def test_explicit_off_and_invalid_ids(tmp_path: Path) -> None:
    assert static_membership.resolve("steps-a.1", "g", tmp_path) == "steps-a.1"
    for off in (None, "off", "none", "dynamic", " OFF "):
        assert static_membership.resolve(off, "g", tmp_path) is None
    for bad in ("has space", "a/b", "", "x" * 201):
        with pytest.raises(ConfigError, match="instance id"):
            static_membership.resolve(bad, "g", tmp_path)
    (tmp_path / "file").write_text("")  # a state dir that cannot hold the lock files
    with pytest.raises(ConfigError, match="cannot lock a slot under"):
        static_membership.resolve("auto", "g", tmp_path / "file")


def test_build_app_sets_the_consumer_group_instance_id(tmp_path: Path) -> None:
    settings = load_settings(env={"ARGUS_STATE_DIR": str(tmp_path)})
    app, _ = build_app(settings, ["l1"], instance_id="host-a")
    assert app.conf.consumer_group_instance_id == "host-a"
    thread: Any = app.consumer._thread  # type: ignore[attr-defined]
    assert thread._argus_static_leave  # leaves its group on a clean stop (LeaveGroup v3)
    app, _ = build_app(settings, ["l1"])  # in-process apps: dynamic unless asked
    assert app.conf.consumer_group_instance_id is None
    assert not getattr(app.consumer._thread, "_argus_static_leave", False)  # aiokafka leaves
    app, _ = build_app(settings, ["l1"], instance_id="auto")
    assert app.conf.consumer_group_instance_id.endswith("-w0")
    # faust-streaming's aiokafka driver hands the setting to AIOKafkaConsumer: an upgrade
    # that stops doing so fails here, not as a slow rejoin
    src = inspect.getsource(faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer)
    assert "group_instance_id=conf.consumer_group_instance_id" in src
