"""The ACL table of docs/security.md, call by call, on the real secure broker.

For prefix ``acl`` (its own topics and ACLs, so the other security tests' topics see none of
this test's records), the admin applies :func:`argus.kafka.acls.acl_rules` and creates the
topics. Then, for every role and every wire topic, three calls, each expected to succeed
exactly when the table grants the operation (with Kafka's implication: READ or WRITE grant
DESCRIBE): metadata (DESCRIBE), produce (WRITE), fetch (READ). For every group grant the role
commits an offset in such a group (READ) and another role cannot; the worker creates its own
internal and app-id topics and reads their configs (CREATE, DESCRIBE_CONFIGS), others cannot;
only the worker describes its groups. A mismatch names the role, the call and the resource.
The broker also holds the layout of prefix ``argus`` (applied by ``up --secure``), so the
expectations are both tables together: with the default prefix the worker's group grant
``argus-`` also covers the CLI's hyphenated groups (the documented caveat; this test sees it).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from argus.config import Settings
from argus.kafka.acls import ROLES, AclRule, acl_rules, apply_acls
from argus.kafka.admin import create_topics
from argus.topics import topic_specs
from tests.security.conftest import SecureBroker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PREFIX = "acl"
IMPLIED = {"DESCRIBE": {"READ", "WRITE", "DELETE", "ALTER"}, "DESCRIBE_CONFIGS": {"ALTER_CONFIGS"}}
DENIED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
}


def allowed(rules: list[AclRule], user: str, resource: str, name: str, op: str) -> bool:
    """What the table grants ``user`` (literal or prefixed names, implied operations)."""
    return any(
        r.user == user
        and r.resource == resource
        and (r.name == name if r.pattern == "literal" else name.startswith(r.name))
        and (r.operation == op or r.operation in IMPLIED.get(op, ()))
        for r in rules
    )


def _code(exc: BaseException | None) -> Any:
    err = exc.args[0] if exc is not None and exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def _describe(s: Settings, topics: list[str]) -> dict[str, bool]:
    admin = AdminClient(s.kafka_config())
    out = {}
    for t in topics:
        md = admin.list_topics(topic=t, timeout=20).topics[t]
        assert md.error is None or md.error.code() in DENIED, (t, md.error)
        out[t] = md.error is None
    return out


def _write(s: Settings, topics: list[str]) -> dict[str, bool]:
    got: dict[str, KafkaError | None] = {}
    p = Producer(s.kafka_config(**{"message.timeout.ms": 15_000}))

    def report(t: str) -> Any:
        return lambda err, _msg: got.__setitem__(t, err)

    for t in topics:
        p.produce(t, b"acl-probe", key=b"acl-probe", on_delivery=report(t))  # jobs: compacted
    p.flush(30)
    assert set(got) == set(topics), got
    for t, e in got.items():
        assert e is None or e.code() in DENIED, (t, e)
    return {t: e is None for t, e in got.items()}


def _read(s: Settings, group: str, visible: dict[str, bool]) -> dict[str, bool]:
    """Fetch partition 0 of each visible topic from the start: True once the fetch reached its
    end. A topic the client may not even describe cannot be read (READ implies DESCRIBE) and
    gives no fetch answer at all, so it is denied without one."""
    topics = [t for t, ok in visible.items() if ok]
    out: dict[str, bool] = {t: False for t, ok in visible.items() if not ok}
    c = Consumer(
        s.kafka_config(
            **{"group.id": group, "enable.partition.eof": True, "enable.auto.commit": False}
        )
    )
    try:
        c.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
        deadline = time.monotonic() + 60
        while len(out) < len(visible) and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            err, t = m.error(), m.topic()
            if err is None or t not in topics or t in out:
                continue
            if err.code() == KafkaError._PARTITION_EOF:
                out[t] = True
            else:
                assert err.code() in DENIED, (t, err)
                out[t] = False
    finally:
        c.close()
    assert set(out) == set(visible), f"no answer for {set(visible) - set(out)}"
    return out


def _commit(s: Settings, group: str, topic: str) -> bool:
    """Commit an offset of ``topic`` in ``group`` (OffsetCommit through the admin API, which
    fails at once when FindCoordinator is refused): True when it succeeded, False when denied."""
    admin = AdminClient(s.kafka_config())
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])
    fut = admin.alter_consumer_group_offsets([req], request_timeout=30)[group]
    try:
        res = fut.result(40)
    except KafkaException as exc:
        assert _code(exc) in DENIED, (group, topic, exc)
        return False
    errs = [tp.error for tp in res.topic_partitions if tp.error is not None]
    assert all(e.code() in DENIED for e in errs), (group, topic, errs)
    return not errs


def _groups(role: str) -> list[str]:
    """One group id inside each of the table's group grants of ``role``."""
    x = uuid.uuid4().hex[:6]
    return {
        "collector": [f"argus-collector-{x}"],
        "worker": [f"{PREFIX}-{x}"],
        "ops": [f"argus-replay-{x}", f"argus-watch-{x}", f"{PREFIX}.ops-{x}"],
        "pagerduty": [f"{PREFIX}.pagerduty"],
    }[role]


@pytest.fixture(scope="module")
def table(secure_broker: SecureBroker) -> list[AclRule]:
    rules = acl_rules(PREFIX)
    admin = secure_broker.settings("admin")
    apply_acls(admin, rules)
    # what the broker holds: `up --secure` applied the layout of prefix argus too. Its worker
    # group prefix `argus-` also matches the CLI's `argus-collector-`, `argus-replay-` and
    # `argus-watch-` groups (the caveat docs/security.md names); the expectations include it
    rules = acl_rules("argus") + rules
    create_topics(admin, prefix=PREFIX, partitions=1)
    # the first group use creates __consumer_offsets: wait for it, as admin, before judging
    deadline = time.monotonic() + 120
    while True:
        try:
            if _commit(admin, f"{PREFIX}-warm-up", f"{PREFIX}.raw.steps"):
                break
        except (AssertionError, KafkaException):
            pass
        assert time.monotonic() < deadline, "no group coordinator within 120 s"
        time.sleep(1)
    return rules


def test_every_role_may_do_exactly_what_the_table_says_on_each_topic(
    secure_broker: SecureBroker, table: list[AclRule]
) -> None:
    topics = sorted(topic_specs(PREFIX))
    wrong: list[str] = []
    for role in ROLES:
        s = secure_broker.settings(role)
        visible = _describe(s, topics)
        for op, got in (
            ("DESCRIBE", visible),
            ("WRITE", _write(s, topics)),
            ("READ", _read(s, _groups(role)[0], visible)),
        ):
            for t in topics:
                want = allowed(table, role, "topic", t, op)
                if got[t] != want:
                    wrong.append(f"{role} {op} {t}: {'allowed' if got[t] else 'denied'}")
    assert not wrong, "\n".join(wrong)


def _describe_configs(admin: AdminClient, res: ConfigResource) -> BaseException | None:
    """``describe_configs`` of a topic just created: the error, or None. The broker answers
    ``UNKNOWN_TOPIC_OR_PART`` until its metadata holds the new topic (KRaft applies a
    creation asynchronously): asked again for up to 10 s, as any client would."""
    deadline = time.monotonic() + 10
    while True:
        exc = admin.describe_configs([res])[res].exception(30)
        if _code(exc) != KafkaError.UNKNOWN_TOPIC_OR_PART or time.monotonic() > deadline:
            return exc
        time.sleep(0.2)


def test_groups_topic_creation_and_configs_call_by_call(
    secure_broker: SecureBroker, table: list[AclRule]
) -> None:
    readable = {  # a topic each role may read, to commit an offset of
        "collector": f"{PREFIX}.control",
        "worker": f"{PREFIX}.raw.steps",
        "ops": f"{PREFIX}.alerts",
        "pagerduty": f"{PREFIX}.alerts",
    }
    wrong: list[str] = []
    for role in ROLES:
        s = secure_broker.settings(role)
        for other in ROLES:  # its own groups, and every other role's
            for g in _groups(other):
                want = allowed(table, role, "group", g, "READ")
                assert want or other != role, (role, g)
                if _commit(s, g, readable[role]) != want:
                    wrong.append(f"{role} commit in group {g}: expected {want}")
        admin = AdminClient(s.kafka_config())
        for name in (f"{PREFIX}.internal.probe-{role}", f"{PREFIX}-probe-{role}"):
            fut = admin.create_topics([NewTopic(name, 1, 1)], request_timeout=20)[name]
            exc = fut.exception(30)
            ok = exc is None
            assert ok or _code(exc) in DENIED, (role, name, exc)
            if ok != allowed(table, role, "topic", name, "CREATE"):
                wrong.append(f"{role} create {name}: {'allowed' if ok else 'denied'}")
            if ok:
                res = ConfigResource(ResourceType.TOPIC, name)
                cfg_exc = _describe_configs(admin, res)
                if (cfg_exc is None) != allowed(table, role, "topic", name, "DESCRIBE_CONFIGS"):
                    wrong.append(f"{role} describe configs of {name}: {cfg_exc}")
        g = _groups("worker")[0]
        desc = admin.describe_consumer_groups([g], request_timeout=20)[g].exception(30)
        if (desc is None) != allowed(table, role, "group", g, "DESCRIBE"):
            wrong.append(f"{role} describe group {g}: {desc}")
    assert not wrong, "\n".join(wrong)
