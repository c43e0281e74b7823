"""Static consumer-group membership (KIP-345): a restarted worker has its partitions back at once.

With dynamic membership a SIGKILLed worker's member stays in its consumer group until the
broker's session timeout (faust's ``broker_session_timeout``, 60 s) expires; the restarted
worker's JoinGroup opens a rebalance that waits for that dead member, so its partitions (and
L1, L2, the funnel) stall for a minute or more. A member that joins with a
``group.instance.id`` the group already knows *replaces* the old member instead: the broker
hands it the old member's assignment without a rebalance (Kafka >= 2.3; aiokafka sends the id
with JoinGroup v5, faust-streaming 0.15 passes its ``consumer_group_instance_id`` setting).

The id must be stable across restarts of one worker and unique among the live members of a
group (a second process with the same id fences the first). :func:`resolve` gives each worker
process, unless told otherwise, ``<hostname>-w<slot>``: the lowest slot whose lock file
(``<state_dir>/worker-ids/<group>.<slot>.lock``, ``flock``) no live process holds. The kernel
frees a lock when its process dies, SIGKILL included, so a restarted worker takes the same slot
and id again, and two workers of one group on one host get distinct ones.

A static member does not leave its group on a clean stop either (aiokafka sends no LeaveGroup
with an instance id): a stopped worker's partitions would stay with it until the session
timeout, and a rolling update to pods of new names (a Kubernetes Deployment) would stall each
replaced pod's partitions for that long. :func:`install` therefore makes a clean stop send
LeaveGroup v3 naming the member and its instance id (KIP-345's way to remove a static member),
so a clean stop hands the partitions over at once, as with dynamic membership; only a crash
keeps the member, for the restarted process to take back.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from aiokafka.errors import KafkaError
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from argus.config import ConfigError

if TYPE_CHECKING:
    import faust

__all__ = ["AUTO", "OFF", "install", "leave", "resolve"]

log = logging.getLogger(__name__)

AUTO = "auto"  # <hostname>-w<slot>, a slot per live process of the group on this host
OFF = frozenset({"off", "none", "dynamic"})  # dynamic membership, as plain faust
MAX_SLOTS = 256
_VALID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")  # Kafka's legal characters, a short id
_HELD: list[IO[bytes]] = []  # slot locks held for the life of the process


def resolve(setting: str | None, group: str, state_dir: Path) -> str | None:
    """The ``group.instance.id`` for one worker process of consumer group ``group``.

    ``setting``: None or ``"off"``/``"none"``/``"dynamic"`` -> None (dynamic membership);
    ``"auto"`` -> ``<hostname>-w<slot>`` (a lock under ``state_dir`` held until the process
    exits); anything else is the id itself.

    Raises
    ------
    ConfigError
        An explicit id with characters Kafka does not allow (``[A-Za-z0-9._-]``, 1-200
        characters); ``auto`` with every one of the :data:`MAX_SLOTS` slots of ``group``
        taken, or with no lock file to be made under ``state_dir``.
    """
    if setting is None or setting.strip().lower() in OFF:
        return None
    setting = setting.strip()
    if setting.lower() != AUTO:
        if not _VALID.match(setting):
            raise ConfigError(
                f"worker instance id {setting!r}: use 1-200 of [A-Za-z0-9._-] "
                f"(or {AUTO!r}, or 'off' for dynamic membership)"
            )
        return setting
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())[:150] or "host"
    lock_dir = state_dir / "worker-ids"
    try:
        slot = _take_slot(group, lock_dir)
    except OSError as err:  # e.g. a read-only state dir
        raise ConfigError(
            f"worker instance id: cannot lock a slot under {lock_dir} ({err}); make the state "
            "dir writable (ARGUS_STATE_DIR) or give --instance-id"
        ) from err
    return f"{host}-w{slot}"


def _take_slot(group: str, lock_dir: Path) -> int:
    """Lock the lowest free slot of ``group`` in ``lock_dir`` for this process's lifetime."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", group)
    for slot in range(MAX_SLOTS):
        fd = os.open(lock_dir / f"{stem}.{slot}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fh = os.fdopen(fd, "r+b")  # non-inheritable: a child process does not keep the slot
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            continue
        _HELD.append(fh)
        return slot
    raise ConfigError(
        f"consumer group {group}: all {MAX_SLOTS} worker slots under {lock_dir} are taken; "
        "set --instance-id explicitly"
    )


# -- leaving on a clean stop ------------------------------------------------------------------
# aiokafka 0.14 knows LeaveGroup v0-v1 only (one member id, no instance id); v3 (Kafka >= 2.4)
# names members by (member id, instance id) and is how a static member is removed.


class _LeaveGroupResponseV3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(("member_id", String()), ("group_instance_id", String()), ("error_code", Int16)),
        ),
    )


class _LeaveGroupRequestV3(RequestStruct):
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = _LeaveGroupResponseV3
    SCHEMA = Schema(
        ("group", String()),
        ("members", Array(("member_id", String()), ("group_instance_id", String()))),
    )


class StaticLeaveGroupRequest(Request[_LeaveGroupRequestV3]):
    """LeaveGroup v3 for one static member: ``(member_id, group_instance_id)``."""

    API_KEY = 13

    def __init__(self, group: str, member_id: str, instance_id: str) -> None:
        self._group, self._member_id, self._instance_id = group, member_id, instance_id

    def build(self, request_struct_class: type[_LeaveGroupRequestV3]) -> _LeaveGroupRequestV3:
        return request_struct_class(self._group, [(self._member_id, self._instance_id)])


async def leave_static(coordinator: Any) -> None:
    """Send LeaveGroup v3 for ``coordinator``'s static member (aiokafka's
    ``GroupCoordinator``), then forget the generation, as aiokafka's own leave does. A failed
    request is logged: the member then leaves when its session times out."""
    instance_id = getattr(coordinator, "_group_instance_id", None)
    if coordinator.generation > 0 and coordinator.member_id and instance_id:
        request = StaticLeaveGroupRequest(coordinator.group_id, coordinator.member_id, instance_id)
        try:
            resp = await coordinator._send_req(request)
        except (KafkaError, NotImplementedError) as err:  # NotImplemented: broker < 2.4
            log.warning(
                "group %s: LeaveGroup of %s failed: %s", coordinator.group_id, instance_id, err
            )
        else:
            codes = [resp.error_code, *(m[2] for m in resp.members)]
            if any(codes):
                log.warning(
                    "group %s: LeaveGroup of %s: error codes %s",
                    coordinator.group_id,
                    instance_id,
                    codes,
                )
            else:
                log.info("group %s: static member %s left", coordinator.group_id, instance_id)
    coordinator.reset_generation()


def leave(settings: Any, group: str, member_id: str, instance_id: str) -> None:
    """Remove static member ``instance_id`` (``member_id``) from consumer group ``group``:
    LeaveGroup v3 to the group's coordinator, on a client of its own. For librdkafka's
    consumer (the compressor's loop, :mod:`argus.streams.compressor_loop`), which sends no
    LeaveGroup as a static member either; call it after the consumer closed (its last commit
    made). A failure is logged: the member then leaves when its session times out."""
    import asyncio

    from aiokafka.client import AIOKafkaClient, CoordinationType

    async def run() -> None:
        client = AIOKafkaClient(
            bootstrap_servers=settings.bootstrap_servers,
            client_id=f"{group}-leave",
            **settings.security.aiokafka_kwargs(),
        )
        try:
            await client.bootstrap()
            node = await client.coordinator_lookup(CoordinationType.GROUP, group)
            resp = await client.send(node, StaticLeaveGroupRequest(group, member_id, instance_id))
        finally:
            await client.close()
        codes = [resp.error_code, *(m[2] for m in resp.members)]
        if any(codes):
            log.warning("group %s: LeaveGroup of %s: error codes %s", group, instance_id, codes)
        else:
            log.info("group %s: static member %s left", group, instance_id)

    try:
        asyncio.run(asyncio.wait_for(run(), 15.0))
    except Exception as err:  # broker gone, < 2.4, refused: the session timeout removes it
        log.warning("group %s: LeaveGroup of %s failed: %s", group, instance_id, err)


def install(app: faust.App) -> None:
    """Make ``app``'s consumer leave its group on a clean stop although it is a static member
    (no-op with dynamic membership, where aiokafka leaves by itself). Call once, after the
    app is configured; a SIGKILL runs none of this, so the member stays for the restart."""
    if not app.conf.consumer_group_instance_id:
        return
    thread: Any = app.consumer._thread  # type: ignore[attr-defined]
    if getattr(thread, "_argus_static_leave", False):
        return
    create = thread._create_worker_consumer

    def create_worker_consumer(transport: Any) -> Any:
        consumer = create(transport)
        stop = consumer.stop

        async def stop_and_leave() -> None:
            coordinator = getattr(consumer, "_coordinator", None)
            if coordinator is not None:  # called by coordinator.close(), after its last commit

                async def maybe_leave_group() -> None:
                    await leave_static(coordinator)

                coordinator._maybe_leave_group = maybe_leave_group
            await stop()

        consumer.stop = stop_and_leave
        return consumer

    thread._create_worker_consumer = create_worker_consumer
    thread._argus_static_leave = True
