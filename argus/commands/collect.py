"""``argus collect``: collector sidecars (``argus collect stacks``)."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import click

from argus.cli import settings_from


@click.group()
def collect() -> None:
    """Collector sidecars that run next to training processes."""


def _rank_from_environ(pid: int) -> int:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return -1
    for kv in raw:
        if kv.startswith(b"RANK="):
            try:
                return int(kv[5:])
            except ValueError:
                return -1
    return -1


def _parse_pid(spec: str) -> tuple[int, int | None]:
    pid_s, _, rank_s = spec.partition(":")
    try:
        return int(pid_s), (int(rank_s) if rank_s else None)
    except ValueError:
        raise click.BadParameter(f"expected PID or PID:RANK, got {spec!r}") from None


@collect.command()
@click.option(
    "--job",
    default=None,
    help="only processes of this job (registry); also the job name for --pid targets",
)
@click.option(
    "--pid",
    "pids",
    multiple=True,
    help="sample this process (PID or PID:RANK); "
    "repeatable. Default: every collector-registered process on this host",
)
@click.option(
    "--rate-hz",
    type=float,
    default=None,
    help="dumps per second per process (default: collectors.stacks_rate_hz, 1.0)",
)
@click.option(
    "--window-s",
    type=float,
    default=None,
    help="window per stack_batch record, s (default: collectors.stacks_window_s, 10)",
)
@click.option("--duration-s", type=float, default=None, help="stop after this many seconds")
@click.option(
    "--method",
    type=click.Choice(["record", "dump"]),
    default="record",
    show_default=True,
    help="record: one py-spy record per process per window "
    "(cheap, >= 1 Hz); dump: one py-spy dump per sample (any rate, ~20 ms CPU each)",
)
@click.option("--no-control", is_flag=True, help="do not follow runtime control commands")
@click.pass_context
def stacks(
    ctx: click.Context,
    job: str | None,
    pids: tuple[str, ...],
    rate_hz: float | None,
    window_s: float | None,
    duration_s: float | None,
    method: str,
    no_control: bool,
) -> None:
    """Sample Python stacks of training processes with py-spy (non-blocking) and publish
    collapsed stacks with counts per window to the raw stacks topic."""
    from argus.collectors.config import load_collector_config
    from argus.collectors.control import ControlFollower, ControlState, addresses
    from argus.collectors.producer import RecordProducer
    from argus.collectors.registry import list_processes
    from argus.collectors.stacks import StackSampler, Target, find_py_spy
    from argus.topics import topic_name

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    s = settings_from(ctx)
    cfg = load_collector_config(
        s, job=job or "_sidecar", stacks_rate_hz=rate_hz, stacks_window_s=window_s
    )
    if find_py_spy() is None:
        raise click.ClickException("py-spy is not installed (pip install py-spy)")
    host = os.uname().nodename
    explicit = [_parse_pid(p) for p in pids]
    groups_of: dict[int, dict[str, str]] = {}

    def targets() -> list[Target]:
        if explicit:
            return [
                Target(
                    pid,
                    job or "unknown",
                    rank if rank is not None else _rank_from_environ(pid),
                    host,
                )
                for pid, rank in explicit
            ]
        out = []
        for e in list_processes(s.state_dir, job):
            groups_of[e.pid] = dict(e.groups)
            out.append(Target(e.pid, e.job, e.rank, e.host))
        return out

    commands: list[dict[str, Any]] = []
    states: dict[int, tuple[int, ControlState]] = {}

    def rate_for(t: Target) -> float:
        n, st = states.get(t.pid, (0, ControlState()))
        for cmd in commands[n:]:
            if addresses(cmd, job=t.job, rank=t.rank, groups=groups_of.get(t.pid, {})):
                st.apply(cmd)
        states[t.pid] = (len(commands), st)
        if not st.is_on("stacks", True):
            return 0.0
        if st.drilling(time.time_ns()):
            return cfg.stacks_drill_rate_hz
        return st.rate["stacks"] or cfg.stacks_rate_hz

    producer = RecordProducer(
        s.kafka_config(),
        max_records=cfg.max_queue_records,
        max_bytes=cfg.max_queue_bytes,
        message_timeout_ms=cfg.message_timeout_ms,
    )
    topic = topic_name("raw.stacks", s.topic_prefix)

    def publish(rec: dict[str, Any]) -> None:
        size = 128 + sum(len(x["stack"]) + 8 for x in rec["stacks"])
        producer.submit(topic, f"{rec['job']}/{rec['rank']}".encode(), "stack_batch", rec, size)

    follower = None
    if not no_control:
        follower = ControlFollower(
            s.kafka_config(), topic_name("control", s.topic_prefix), commands.append
        )
    sampler = StackSampler(
        targets,
        publish,
        rate_hz=cfg.stacks_rate_hz,
        window_s=cfg.stacks_window_s,
        rate_for=rate_for,
        method=method,
    )
    signal.signal(signal.SIGTERM, lambda *_: sampler.stop())
    first = targets()
    click.echo(
        f"sampling {len(first)} process(es) at {cfg.stacks_rate_hz:g} Hz, "
        f"{cfg.stacks_window_s:g} s windows -> {topic}"
        + ("" if first else " (waiting for registered training processes)")
    )
    try:
        sampler.run(duration_s=duration_s)
    except KeyboardInterrupt:
        sampler.stop()
    finally:
        if follower is not None:
            follower.close()
        producer.close()
    click.echo(
        f"{sampler.dumps} dumps, {sampler.published} stack batches published, "
        f"{producer.dropped_records} dropped"
        + (f"; no permission for pids {sorted(sampler.denied)}" if sampler.denied else "")
    )
