"""``argus kafka`` and ``argus topics``."""

from __future__ import annotations

import shlex

import click

from argus.cli import settings_from


@click.group()
def kafka() -> None:
    """Run a local Apache Kafka broker (no Docker): jars from Maven Central, KRaft, loopback.

    When ARGUS_KAFKA_BOOTSTRAP names an existing cluster, nothing is started or stopped.
    """


@kafka.command()
@click.option(
    "--timeout", "timeout_s", default=90.0, show_default=True, help="seconds to wait for the broker"
)
@click.option(
    "--secure/--plaintext",
    default=None,
    help="format a new broker with a SASL_SSL listener (SCRAM-SHA-512, generated CA, ACLs "
    "applied) or PLAINTEXT; default: as formatted before (PLAINTEXT when new)",
)
@click.option(
    "--brokers",
    type=click.IntRange(1, 9),
    default=None,
    help="format a new KRaft cluster of this many brokers (3: replication factor 3, "
    "min.insync.replicas 2); default: as formatted before (1 when new)",
)
@click.pass_context
def up(ctx: click.Context, timeout_s: float, secure: bool | None, brokers: int | None) -> None:
    """Start the broker(s) (idempotent) and wait until they answer."""
    from argus.kafka.local import LocalBroker

    s = settings_from(ctx)
    broker = LocalBroker(s)
    if not s.local_broker:
        st = broker.status()
        click.echo(
            f"using existing cluster {s.bootstrap} ({'reachable' if st.running else 'NOT reachable'})"
        )
        return
    if not (broker.libs / ".complete").exists():
        click.echo(
            f"resolving Apache Kafka {broker.version} jars with Maven into {broker.libs} (once) ..."
        )
    st = broker.up(timeout_s=timeout_s, secure=secure, brokers=brokers)
    click.echo(
        f"kafka {broker.version} up: pid {st.pid}, bootstrap {st.bootstrap}, logs {broker.logs}"
    )
    if broker.brokers > 1:
        click.echo(
            f"{broker.brokers} brokers (replication factor {min(broker.brokers, 3)}, "
            f"min.insync.replicas {max(1, min(broker.brokers, 3) - 1)}): create the topics with "
            f"`argus topics create --replication {min(broker.brokers, 3)}` and give workers "
            f"ARGUS_STREAMS__REPLICATION={min(broker.brokers, 3)}; clients may bootstrap from "
            f"every node: ARGUS_KAFKA_BOOTSTRAP={st.bootstrap}"
        )
    if broker.secure:
        from argus.kafka.acls import acl_rules, apply_acls

        n = apply_acls(broker.client_settings("admin"), acl_rules(s.topic_prefix))
        click.echo(
            f"SASL_SSL (SCRAM-SHA-512), CA {broker.ca_file}; {n} ACLs for prefix "
            f"{s.topic_prefix!r} applied. Client settings: `argus kafka env --user admin`"
        )


@kafka.command()
@click.pass_context
def down(ctx: click.Context) -> None:
    """Stop the broker that `argus kafka up` started (only that process)."""
    from argus.kafka.local import LocalBroker

    stopped = LocalBroker(settings_from(ctx)).down()
    click.echo("kafka stopped" if stopped else "no argus-managed broker was running")


@kafka.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """Say whether the broker runs; exit 1 when it does not."""
    from argus.kafka.local import LocalBroker

    st = LocalBroker(settings_from(ctx)).status()
    click.echo(f"{'running' if st.running else 'stopped'}: {st.bootstrap} pid={st.pid} {st.detail}")
    ctx.exit(0 if st.running else 1)


@kafka.command("env")
@click.option(
    "--user",
    default="admin",
    show_default=True,
    help="SCRAM user: admin, collector, worker, ops, pagerduty",
)
@click.pass_context
def env_(ctx: click.Context, user: str) -> None:
    """Print the ARGUS_KAFKA_* variables of a client of the secure local broker (eval-able;
    the password stays in its file)."""
    from argus.kafka.local import LocalBroker

    broker = LocalBroker(settings_from(ctx))
    if not broker.secure:
        raise click.UsageError("the local broker is not secure (`argus kafka up --secure`)")
    for k, v in broker.client_env(user).items():
        click.echo(f"export {k}={shlex.quote(v)}")


@kafka.command()
@click.option("--script", is_flag=True, help="print kafka-acls.sh commands instead of applying")
@click.option("--dry-run", is_flag=True, help="print the rules, apply nothing")
@click.option(
    "--user",
    "users",
    multiple=True,
    metavar="ROLE=NAME",
    help="SASL user of a role when it is not the role's name (repeatable)",
)
@click.pass_context
def acls(ctx: click.Context, script: bool, dry_run: bool, users: tuple[str, ...]) -> None:
    """Apply the ACL layout (docs/security.md) for the configured topic prefix.

    Needs an identity allowed to alter ACLs (the configured user, e.g. admin).
    """
    from argus.kafka.acls import ROLES, acl_rules, apply_acls, kafka_acls_script

    s = settings_from(ctx)
    names: dict[str, str] = {}
    for u in users:
        role, _, name = u.partition("=")
        if role not in ROLES or not name:
            raise click.BadParameter(
                f"{u!r}: want ROLE=NAME with ROLE in {ROLES}", param_hint="--user"
            )
        names[role] = name
    rules = acl_rules(s.topic_prefix, names)
    if script:
        click.echo(kafka_acls_script(rules, s.bootstrap_servers), nl=False)
        return
    if dry_run:
        for r in rules:
            click.echo(
                f"ALLOW {r.principal:16s} {r.operation:16s} {r.resource} {r.pattern} {r.name}"
            )
        return
    n = apply_acls(s, rules)
    click.echo(f"{n} ACL bindings applied for prefix {s.topic_prefix!r}")


@kafka.command()
@click.confirmation_option(prompt="Delete all local broker data?")
@click.pass_context
def reset(ctx: click.Context) -> None:
    """Stop the local broker and delete its data."""
    from argus.kafka.local import LocalBroker

    LocalBroker(settings_from(ctx)).reset()
    click.echo("local broker stopped and data deleted")


@click.group()
def topics() -> None:
    """Create or list the argus topics (names, partitions, retention from argus.topics)."""


@topics.command("create")
@click.option("--partitions", type=int, default=None, help="override every topic's partition count")
@click.option("--replication", type=int, default=1, show_default=True)
@click.pass_context
def topics_create(ctx: click.Context, partitions: int | None, replication: int) -> None:
    """Create every argus topic that does not exist yet."""
    from argus.kafka.admin import create_topics

    res = create_topics(settings_from(ctx), partitions=partitions, replication=replication)
    for name, what in sorted(res.items()):
        click.echo(f"{what:8s} {name}")


@topics.command("list")
@click.pass_context
def topics_list(ctx: click.Context) -> None:
    """Show the topic table (spec, not the cluster)."""
    from argus.topics import topic_specs

    s = settings_from(ctx)
    for name, spec in topic_specs(s.topic_prefix).items():
        ret = "forever" if spec.retention_ms < 0 else f"{spec.retention_ms / 3_600_000:g} h"
        click.echo(
            f"{name:28s} {spec.record:16s} p={spec.partitions:<3d} retention={ret:8s}"
            f"{' compact' if spec.compact else ''}  {spec.doc}"
        )
