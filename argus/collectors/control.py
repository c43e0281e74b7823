"""Runtime control: commands on the compacted control topic, addressed to a job, a group or ranks.

A command (``control_command.avsc``) names an ``action`` on a ``channel``
(``phases | kernels | stacks | all``):

* ``enable`` / ``disable``: switch the channel;
* ``set_rate``: stacks: sampling rate in Hz; kernels: duty cycle in (0, 1];
* ``drill_down``: full detail until ``until_ns`` (kernel window every step, stacks at the
  drill-down rate), then back to normal by itself.

Addressing: ``job`` must match; a ``group_kind``/``group_id`` pair must match the rank's group
id (:func:`argus.collectors.topology.group_id`); a non-empty ``ranks`` list must contain the
rank. Keys are ``job/<target>/<channel>:<family>`` (family ``switch``, ``rate`` or ``drill``)
so that compaction keeps the newest command of each kind per target, and a collector that
starts later replays them in order.

:class:`ControlFollower` is the background consumer; it reads the whole topic from the
beginning without a consumer group (every collector must see every command) and calls back
on its own thread. Nothing here runs on the training thread.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from argus.collectors.priority import made_at_low_priority
from argus.schemas import Codec, DecodeError

__all__ = [
    "ACTIONS",
    "CHANNELS",
    "ControlFollower",
    "ControlState",
    "addresses",
    "command_key",
    "make_command",
    "parse_ranks",
]

log = logging.getLogger("argus.collectors.control")

CHANNELS = ("phases", "kernels", "stacks", "all")
ACTIONS = ("enable", "disable", "set_rate", "drill_down")
_MAX_RANKS = 1 << 20  # a longer rank list is a typo (and would fill memory)
_FAMILY = {"enable": "switch", "disable": "switch", "set_rate": "rate", "drill_down": "drill"}


def parse_ranks(text: str) -> tuple[int, ...]:
    """Ranks of a list like ``3,5,8-11`` (sorted, unique).

    Raises
    ------
    ValueError
        Naming the bad part: an empty part, a non-integer, a negative rank, a reversed
        range (``5-3``) or over 2**20 ranks. Never an empty result, which would address the whole job.
    """
    out: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            raise ValueError(
                f"rank list {text!r}: {part!r} is not a rank or a range LO-HI"
                " of ranks >= 0 (e.g. 3,5,8-11)"
            )
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo:
            raise ValueError(f"rank list {text!r}: range {part!r} is reversed (write {hi}-{lo})")
        if hi - lo >= _MAX_RANKS or len(out) + hi - lo >= _MAX_RANKS:
            raise ValueError(f"rank list {text!r}: more than {_MAX_RANKS} ranks")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def make_command(
    *,
    job: str,
    action: str,
    channel: str = "all",
    ranks: Sequence[int] = (),
    group_kind: str | None = None,
    group_id: str | None = None,
    value: float | None = None,
    until_ns: int | None = None,
    issued_by: str = "",
    now_ns: int | None = None,
) -> dict[str, Any]:
    """A validated ``control_command`` record.

    Raises
    ------
    ValueError
        Unknown action or channel, a group kind without id (or the reverse), a negative
        rank, a ``set_rate`` without a positive value (kernels: at most 1), or a
        ``drill_down`` without ``until_ns``. (``ranks`` empty addresses every rank: parse
        user input with :func:`parse_ranks`, which never returns an empty list.)
    """
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, got {action!r}")
    if channel not in CHANNELS:
        raise ValueError(f"channel must be one of {', '.join(CHANNELS)}, got {channel!r}")
    if (group_kind is None) != (group_id is None):
        raise ValueError("group_kind and group_id go together")
    if action == "set_rate":
        if value is None or not value > 0:
            raise ValueError("set_rate needs a positive value (Hz for stacks, duty for kernels)")
        if channel == "kernels" and value > 1:
            raise ValueError(f"the kernel duty cycle is a fraction in (0, 1], got {value}")
        if channel in ("phases", "all"):
            raise ValueError("set_rate applies to the kernels or stacks channel")
    if any(int(r) < 0 for r in ranks):
        raise ValueError(f"ranks must be >= 0, got {sorted(int(r) for r in ranks if r < 0)}")
    if action == "drill_down" and until_ns is None:
        raise ValueError("drill_down needs until_ns (ns since epoch)")
    return {
        "id": uuid.uuid4().hex,
        "job": job,
        "group_kind": group_kind,
        "group_id": group_id,
        "ranks": [int(r) for r in ranks],
        "action": action,
        "channel": channel,
        "value": None if value is None else float(value),
        "until_ns": until_ns,
        "issued_ns": time.time_ns() if now_ns is None else now_ns,
        "issued_by": issued_by,
    }


def command_key(cmd: Mapping[str, Any]) -> bytes:
    """Compaction key ``job/<target>/<channel>:<family>``."""
    if cmd.get("group_kind"):
        target = f"group={cmd['group_kind']}:{cmd['group_id']}"
    elif cmd.get("ranks"):
        target = "ranks=" + ",".join(str(r) for r in sorted(cmd["ranks"]))
    else:
        target = "all"
    if cmd.get("group_kind") and cmd.get("ranks"):
        target += ";ranks=" + ",".join(str(r) for r in sorted(cmd["ranks"]))
    return f"{cmd['job']}/{target}/{cmd['channel']}:{_FAMILY[cmd['action']]}".encode()


def addresses(cmd: Mapping[str, Any], *, job: str, rank: int, groups: Mapping[str, str]) -> bool:
    """Whether ``cmd`` is meant for ``rank`` of ``job`` whose group ids are ``groups``."""
    if cmd.get("job") != job:
        return False
    kind = cmd.get("group_kind")
    if kind and groups.get(kind) != cmd.get("group_id"):
        return False
    ranks = cmd.get("ranks") or []
    return not ranks or rank in ranks


@dataclass
class ControlState:
    """The effect of the commands applied so far, per channel.

    ``enabled[ch]`` is ``None`` until a command switches ``ch``; ``rate[ch]`` likewise;
    ``drill_until_ns`` is the end of the current drill-down (0: none).
    """

    enabled: dict[str, bool | None] = field(
        default_factory=lambda: {"phases": None, "kernels": None, "stacks": None}
    )
    rate: dict[str, float | None] = field(default_factory=lambda: {"kernels": None, "stacks": None})
    drill_until_ns: int = 0
    applied: int = 0

    def apply(self, cmd: Mapping[str, Any]) -> None:
        chans = ("phases", "kernels", "stacks") if cmd["channel"] == "all" else (cmd["channel"],)
        action = cmd["action"]
        for ch in chans:
            if action in ("enable", "disable"):
                self.enabled[ch] = action == "enable"
            elif action == "set_rate" and ch in self.rate and cmd.get("value"):
                self.rate[ch] = float(cmd["value"])
        if action == "drill_down" and cmd.get("until_ns"):
            self.drill_until_ns = int(cmd["until_ns"])
        self.applied += 1

    def is_on(self, channel: str, default: bool) -> bool:
        v = self.enabled.get(channel)
        return default if v is None else v

    def drilling(self, now_ns: int) -> bool:
        return now_ns < self.drill_until_ns


class ControlFollower:
    """Background consumer of the control topic.

    Parameters
    ----------
    kafka_config : mapping
        librdkafka settings (``bootstrap.servers`` at least).
    topic : str
        Full control topic name.
    on_command : callable
        Called with each decoded command record, in topic order, on the follower's thread.
    poll_s : float
        Poll timeout, seconds.
    """

    def __init__(
        self,
        kafka_config: Mapping[str, Any],
        topic: str,
        on_command: Callable[[dict[str, Any]], None],
        *,
        poll_s: float = 1.0,
    ) -> None:
        self.topic = topic
        self.errors = 0
        self.received = 0
        self._conf = {
            **kafka_config,
            "group.id": f"argus-collector-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "socket.connection.setup.timeout.ms": 10_000,
            "log_level": 2,
            # commands are rare: long-poll the broker instead of fetching twice a second
            "fetch.wait.max.ms": 2000,
        }
        self._on_command = on_command
        self._poll_s = poll_s
        self._codec = Codec()
        self._stop = threading.Event()
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="argus-control", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        try:  # librdkafka's threads low-priority; this one, which holds the GIL, not
            consumer = made_at_low_priority(lambda: Consumer(self._conf))
        except Exception as exc:
            self.errors += 1
            log.warning("argus collectors: control consumer failed to start: %r", exc)
            return
        assigned = False
        try:
            while not self._stop.is_set():
                if not assigned:
                    try:
                        md = consumer.list_topics(self.topic, timeout=5.0)
                        parts = md.topics[self.topic].partitions if self.topic in md.topics else {}
                        if md.topics.get(self.topic) is not None and md.topics[self.topic].error:
                            parts = {}
                        if parts:
                            consumer.assign(
                                [
                                    TopicPartition(self.topic, p, OFFSET_BEGINNING)
                                    for p in sorted(parts)
                                ]
                            )
                            assigned = True
                        else:
                            self._stop.wait(2.0)
                            continue
                    except Exception as exc:
                        self.errors += 1
                        if not self._warned:
                            self._warned = True
                            log.warning(
                                "argus collectors: control topic %s not reachable "
                                "(%r); runtime control waits for it",
                                self.topic,
                                exc,
                            )
                        self._stop.wait(2.0)
                        continue
                msg = consumer.poll(self._poll_s)
                if msg is None or msg.error():
                    continue
                try:
                    cmd = self._codec.decode_as("control_command", msg.value())
                except DecodeError as exc:
                    self.errors += 1
                    log.warning(
                        "argus collectors: ignoring a bad control record at %s[%d]@%d: %s",
                        msg.topic(),
                        msg.partition(),
                        msg.offset(),
                        exc,
                    )
                    continue
                self.received += 1
                try:
                    self._on_command(cmd)
                except Exception as exc:
                    self.errors += 1
                    log.warning("argus collectors: applying control command failed: %r", exc)
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    def close(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout=timeout_s)
