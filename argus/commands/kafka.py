"""``argus kafka`` and ``argus topics``."""

from __future__ import annotations

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
@click.pass_context
def up(ctx: click.Context, timeout_s: float) -> None:
    """Start the broker (idempotent) and wait until it answers."""
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
    st = broker.up(timeout_s=timeout_s)
    click.echo(
        f"kafka {broker.version} up: pid {st.pid}, bootstrap {st.bootstrap}, logs {broker.logs}"
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
