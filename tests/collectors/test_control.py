"""Runtime control: addressing, validation, and commands applied by a running collector."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
from click.testing import CliRunner

import argus.collectors as ac
from argus.collectors.control import ControlState, addresses, command_key, make_command
from argus.config import Settings


def test_addressing_by_job_group_and_ranks() -> None:
    groups = {"dp": "dp:cp0.ep0.pp1.tp0", "tp": "tp:cp0.dp3.ep0.pp1"}
    base = {"job": "j", "group_kind": None, "group_id": None, "ranks": []}
    assert addresses(base, job="j", rank=5, groups=groups)
    assert not addresses({**base, "job": "other"}, job="j", rank=5, groups=groups)
    assert addresses({**base, "ranks": [4, 5]}, job="j", rank=5, groups=groups)
    assert not addresses({**base, "ranks": [4]}, job="j", rank=5, groups=groups)
    g = {**base, "group_kind": "dp", "group_id": "dp:cp0.ep0.pp1.tp0"}
    assert addresses(g, job="j", rank=5, groups=groups)
    assert not addresses({**g, "group_id": "dp:cp0.ep0.pp0.tp0"}, job="j", rank=5, groups=groups)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"action": "explode"}, "action"),
        ({"action": "enable", "channel": "gpu"}, "channel"),
        ({"action": "set_rate", "channel": "kernels", "value": 2.0}, "duty cycle"),
        ({"action": "set_rate", "channel": "stacks"}, "positive value"),
        ({"action": "set_rate", "channel": "all", "value": 1.0}, "kernels or stacks"),
        ({"action": "drill_down"}, "until_ns"),
        ({"action": "enable", "group_kind": "dp"}, "go together"),
    ],
)
def test_bad_commands_are_rejected(kw: dict, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        make_command(job="j", **kw)


def test_keys_separate_switch_rate_and_drill() -> None:
    dis = make_command(job="j", action="disable", channel="kernels", ranks=[3, 1])
    en = make_command(job="j", action="enable", channel="kernels", ranks=[1, 3])
    rate = make_command(job="j", action="set_rate", channel="kernels", value=0.5)
    assert command_key(dis) == command_key(en) == b"j/ranks=1,3/kernels:switch"
    assert command_key(rate) == b"j/all/kernels:rate"
    from argus.schemas import Codec

    assert Codec().decode_as("control_command", Codec().encode("control_command", dis)) == dis


def test_state_applies_in_order() -> None:
    st = ControlState()
    st.apply(make_command(job="j", action="disable", channel="all"))
    st.apply(make_command(job="j", action="enable", channel="stacks"))
    st.apply(make_command(job="j", action="set_rate", channel="stacks", value=4.0))
    st.apply(make_command(job="j", action="drill_down", until_ns=time.time_ns() + 10**10))
    assert st.is_on("phases", True) is False and st.is_on("stacks", False) is True
    assert st.rate["stacks"] == 4.0 and st.drilling(time.time_ns())
    assert not st.drilling(time.time_ns() + 2 * 10**10)


def _wait(cond: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.kafka
def test_running_collector_follows_cli_commands(
    prefixed: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from argus.cli import cli

    monkeypatch.setenv("ARGUS_TOPIC_PREFIX", prefixed.topic_prefix)
    col = ac.start(
        job="cj",
        settings=prefixed,
        kernels_backend="cpu_ops",
        kernels_period_steps=50,
        publish_topology=False,
        rank=0,
        world_size=2,
    )
    assert col.kernels_on and col.phases_on
    run = CliRunner()

    def send(*args: str) -> None:
        res = run.invoke(cli, ["control", *args])
        assert res.exit_code == 0, res.output

    send("disable", "--job", "cj", "--channel", "kernels")
    assert _wait(lambda: not col.kernels_on), "disable was not applied"
    assert col.phases_on
    send("set-rate", "--job", "cj", "--ranks", "1", "--channel", "kernels", "--value", "0.5")
    send("set-rate", "--job", "cj", "--ranks", "0", "--channel", "kernels", "--value", "0.25")
    assert _wait(lambda: col.period == 4), f"rate not applied, period {col.period}"
    send("enable", "--job", "cj", "--channel", "kernels")
    assert _wait(lambda: col.kernels_on)
    send("drill-down", "--job", "cj", "--ranks", "0", "--seconds", "30")
    assert _wait(lambda: col._period_now() == 1), "drill-down not applied"
    # a command for another job changes nothing
    send("disable", "--job", "someone-else", "--channel", "all")
    time.sleep(1.0)
    assert col.kernels_on and col.phases_on
    # groups are named as the detectors name them in anomaly records (pure DP: "all")
    assert col._groups["dp"] == "all"
    send("disable", "--job", "cj", "--group", "tp:pp9", "--channel", "phases")
    send("disable", "--job", "cj", "--group", "dp:all", "--channel", "phases")
    assert _wait(lambda: not col.phases_on), "group-addressed command not applied"
    assert col.kernels_on
    bad = run.invoke(
        cli, ["control", "set-rate", "--job", "cj", "--channel", "kernels", "--value", "3"]
    )
    assert bad.exit_code != 0 and "duty cycle" in bad.output


def test_group_ids_match_the_detectors_naming() -> None:
    from argus.collectors.runtime import _pipeline_group_ids
    from argus.collectors.topology import Layout, layout_coords
    from argus.config import load_settings
    from argus.routing import Routing

    coords = layout_coords(Layout(dp=2, tp=2, pp=2), 5)
    ids = _pipeline_group_ids(load_settings(env={}), coords)
    r = Routing.default()
    assert ids["dp"] == r.group_for_kind(coords, "dp") == "pp1.tp1"
    assert ids["tp"] == "pp1.dp0"


# -- rank lists (issue 20: `--ranks 5-3` was accepted as [], i.e. the whole job) ------------


def test_parse_ranks_accepts_lists_and_ranges() -> None:
    from argus.collectors.control import parse_ranks

    assert parse_ranks("3,5,8-11") == (3, 5, 8, 9, 10, 11)
    assert parse_ranks(" 7 , 2-2,7") == (2, 7)


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("5-3", "range '5-3' is reversed (write 3-5)"),
        ("", "'' is not a rank"),
        ("3,,4", "'' is not a rank"),
        ("-3", "'-3' is not a rank"),
        ("3--5", "'3--5' is not a rank"),
        ("a-b", "'a-b' is not a rank"),
        ("1-2-3", "'1-2-3' is not a rank"),
        ("0-99999999", "more than"),
    ],
)
def test_parse_ranks_rejects_reversed_and_malformed(text: str, msg: str) -> None:
    from argus.collectors.control import parse_ranks

    with pytest.raises(ValueError, match=re.escape(msg)):
        parse_ranks(text)


@pytest.mark.parametrize("ranks", ["5-3", "", "x"])
def test_cli_rejects_a_bad_rank_list_before_sending(ranks: str) -> None:
    """No broker is reachable here: a bad list must fail on the flag, not address the job."""
    from argus.cli import cli

    res = CliRunner().invoke(
        cli,
        ["control", "disable", "--job", "J", "--ranks", ranks],
        env={"ARGUS_KAFKA_BOOTSTRAP": "127.0.0.1:1"},
    )
    assert res.exit_code == 2, res.output
    assert "--ranks" in res.output and "rank list" in res.output


def test_make_command_rejects_negative_ranks() -> None:
    with pytest.raises(ValueError, match="ranks must be >= 0"):
        make_command(job="j", action="disable", ranks=[-1])
