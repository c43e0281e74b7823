"""``argus control``: send runtime commands to running collectors."""

from __future__ import annotations

import time
from typing import Any

import click

from argus.cli import settings_from

_CHANNELS = click.Choice(["phases", "kernels", "stacks", "all"])


def _ranks(value: str | None) -> list[int]:
    """``--ranks`` parsed; None: every rank. A reversed or malformed list is an error, never
    an empty list (which would address the whole job)."""
    if value is None:
        return []
    from argus.collectors.control import parse_ranks

    try:
        return list(parse_ranks(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--ranks") from None


def _target_options(f: Any) -> Any:
    f = click.option("--ranks", default=None, help="only these ranks, e.g. 3,5,8-11")(f)
    f = click.option(
        "--group",
        default=None,
        help="only this parallelism group, KIND:ID as anomaly records name it "
        "(group_kind:group_id), e.g. 'dp:pp1.tp0'",
    )(f)
    f = click.option("--job", required=True, help="job name")(f)
    return f


def _send(
    ctx: click.Context,
    *,
    job: str,
    action: str,
    channel: str,
    ranks: str | None,
    group: str | None,
    value: float | None = None,
    until_ns: int | None = None,
) -> None:
    from confluent_kafka import Producer

    from argus.collectors.control import command_key, make_command
    from argus.schemas import Codec
    from argus.topics import topic_name

    gk = gid = None
    if group:
        gk, sep, gid = group.partition(":")
        if not sep or not gid:
            raise click.BadParameter(f"--group is KIND:ID, got {group!r}")
    try:
        cmd = make_command(
            job=job,
            action=action,
            channel=channel,
            ranks=_ranks(ranks),
            group_kind=gk,
            group_id=gid if gk else None,
            value=value,
            until_ns=until_ns,
            issued_by="argus control",
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    s = settings_from(ctx)
    topic = topic_name("control", s.topic_prefix)
    p = Producer(
        s.kafka_config(**{"enable.idempotence": True, "acks": "all", "message.timeout.ms": 15000})
    )
    errors: list[Any] = []
    p.produce(
        topic,
        Codec().encode("control_command", cmd),
        command_key(cmd),
        on_delivery=lambda err, _m: errors.append(err) if err else None,
    )
    left = p.flush(20)
    if left or errors:
        raise click.ClickException(
            f"command not delivered to {topic}: {errors[0] if errors else 'broker did not answer'}"
        )
    click.echo(f"sent {action} {channel} to {job} ({command_key(cmd).decode()}) id {cmd['id']}")


@click.group()
def control() -> None:
    """Send runtime commands to running collectors (no restart): switch channels, change rates,
    open a time-boxed full-detail window."""


@control.command()
@_target_options
@click.option("--channel", type=_CHANNELS, default="all", show_default=True)
@click.pass_context
def enable(
    ctx: click.Context, job: str, ranks: str | None, group: str | None, channel: str
) -> None:
    """Switch a channel on."""
    _send(ctx, job=job, action="enable", channel=channel, ranks=ranks, group=group)


@control.command()
@_target_options
@click.option("--channel", type=_CHANNELS, default="all", show_default=True)
@click.pass_context
def disable(
    ctx: click.Context, job: str, ranks: str | None, group: str | None, channel: str
) -> None:
    """Switch a channel off."""
    _send(ctx, job=job, action="disable", channel=channel, ranks=ranks, group=group)


@control.command("set-rate")
@_target_options
@click.option("--channel", type=click.Choice(["kernels", "stacks"]), required=True)
@click.option(
    "--value",
    type=float,
    required=True,
    help="stacks: dumps per second; kernels: duty cycle in (0, 1]",
)
@click.pass_context
def set_rate(
    ctx: click.Context, job: str, ranks: str | None, group: str | None, channel: str, value: float
) -> None:
    """Change the stacks sampling rate or the kernel duty cycle."""
    _send(ctx, job=job, action="set_rate", channel=channel, ranks=ranks, group=group, value=value)


@control.command("drill-down")
@_target_options
@click.option(
    "--seconds",
    type=float,
    default=60.0,
    show_default=True,
    help="length of the full-detail window",
)
@click.pass_context
def drill_down(
    ctx: click.Context, job: str, ranks: str | None, group: str | None, seconds: float
) -> None:
    """Full detail (kernel window every step, fast stack sampling) for a while, then back."""
    if not seconds > 0:
        raise click.BadParameter("--seconds must be > 0")
    _send(
        ctx,
        job=job,
        action="drill_down",
        channel="all",
        ranks=ranks,
        group=group,
        until_ns=time.time_ns() + int(seconds * 1e9),
    )
