"""``argus worker ROLE...``: run stream-worker roles (faust agents) or the PagerDuty sink."""

from __future__ import annotations

import click

from argus.cli import settings_from

_ALL = ("compressor", "l1", "l2", "l3", "funnel", "stacks")


@click.command()
@click.argument(
    "roles",
    nargs=-1,
    required=True,
    type=click.Choice([*_ALL, "all", "pagerduty"], case_sensitive=False),
)
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    envvar="ARGUS_METRICS_PORT",
    help="serve Prometheus /metrics on 127.0.0.1:PORT (default: streams.metrics_port; 0 = off)",
)
@click.option(
    "--metrics-addr",
    default=None,
    envvar="ARGUS_METRICS_ADDR",
    metavar="HOST:PORT",
    help="serve Prometheus /metrics on HOST:PORT, e.g. 0.0.0.0:9464 or [::]:9464 to be "
    "scraped from elsewhere (overrides --metrics-port; port 0 = off)",
)
@click.option(
    "--instance-id",
    default="auto",
    show_default=True,
    envvar="ARGUS_WORKER_INSTANCE_ID",
    help="static group membership id (group.instance.id): a restarted worker with the same id "
    "gets its partitions back at once. auto: <hostname>-w<slot>, one slot per live worker of "
    "the role set on this host; off: dynamic membership (docs/pipeline.md, 'Rejoin')",
)
@click.option(
    "--loglevel",
    default="warn",
    show_default=True,
    type=click.Choice(["crit", "error", "warn", "info", "debug"]),
)
@click.pass_context
def worker(
    ctx: click.Context,
    roles: tuple[str, ...],
    metrics_port: int | None,
    metrics_addr: str | None,
    instance_id: str,
    loglevel: str,
) -> None:
    """Run one or more pipeline roles until interrupted (SIGINT/SIGTERM stop cleanly).

    \b
    ROLES: compressor  raw kernel batches -> KDE summaries (+ live fidelity figure)
           l1          iteration time per job            -> argus.anomalies
           l2          phases per parallelism group      -> argus.anomalies
           l3          kernel distributions (W1)         -> argus.anomalies
           funnel      anomalies -> one alert per culprit -> argus.alerts
           stacks      py-spy stacks -> per-window summaries
           all         every role above in one process
           pagerduty   argus.alerts -> PagerDuty Events API v2 (runs alone)

    Scale out by starting more workers with the same roles: they share the work by
    partitions (consumer group = the app id, <prefix>-<roles>). The compressor runs on its
    own Kafka client loop in group <prefix>-compressor, whatever roles share the process
    (streams.compressor_runtime = "faust" puts it back in the faust app); so does the
    steps router, in <prefix>-steps-router (streams.steps_router_runtime = "faust": back in
    the app).
    """
    from dataclasses import replace

    from argus.errors import ConfigError
    from argus.streams.metrics import parse_addr

    if metrics_addr is not None:
        try:
            parse_addr(metrics_addr)  # before any work: a typo is a usage error
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--metrics-addr") from None
    settings = settings_from(ctx)
    if settings.security.protocol != "PLAINTEXT":  # refused login: one clear error, no hang
        from argus.kafka.security import check_connection

        check_connection(settings)
    chosen = {r.lower() for r in roles}
    if "pagerduty" in chosen:
        if len(chosen) > 1:
            raise click.UsageError("pagerduty runs alone: `argus worker pagerduty`")
        import logging
        import signal
        import threading

        from argus.sinks.pagerduty.worker import run_pagerduty_sink
        from argus.streams import metrics

        logging.basicConfig(level=logging.INFO)
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        metrics.serve(metrics_addr if metrics_addr is not None else metrics_port or 0)
        run_pagerduty_sink(settings, stop_event=stop, metrics_registry=metrics.REGISTRY)
        return
    from argus.streams import metrics
    from argus.streams.groups import app_id
    from argus.streams.pipeline_config import PipelineConfig

    pcfg = PipelineConfig.from_mapping(settings.section("streams"))
    if metrics_port is not None:
        pcfg = replace(pcfg, metrics_port=metrics_port)
    every = set(_ALL) if "all" in chosen else chosen
    loop = "compressor" in every and pcfg.compressor_runtime == "kafka"
    faust_roles = every - {"compressor"} if loop else every
    addr = metrics_addr if metrics_addr is not None else pcfg.metrics_port
    if loop and not faust_roles:  # the compressor alone: no faust app at all
        import logging

        from argus.streams.compressor_loop import run_alone

        logging.basicConfig(level=loglevel.upper().replace("CRIT", "CRITICAL"))
        metrics.serve(addr)
        run_alone(settings, pcfg, instance_id)
        return
    from argus.streams.app import Worker, build_app  # Worker: freezes the heap once started

    app, app_ctx = build_app(
        settings,
        faust_roles,
        pcfg=pcfg,
        app_id=app_id(settings.topic_prefix, every),  # the whole role set's, as before
        instance_id=instance_id,
    )
    from argus.streams.worker_topics import ensure_worker_topics

    ensure_worker_topics(settings, app_ctx)  # before faust's first metadata (ensure_topics)
    metrics.serve(addr)
    # faust's data dir (build_app: <state_dir>/workers/<app id>); faust makes only its last level
    (settings.state_dir / "workers").mkdir(parents=True, exist_ok=True)
    from argus.streams.kafka_loop import start_beside

    beside = []  # the loops on threads of their own beside the faust worker
    # a partition a loop's group never committed starts where this app committed it
    kw = {"instance_id": instance_id, "legacy_group": app.conf.id}
    if loop:
        from argus.streams.compressor_loop import CompressorLoop

        beside.append(start_beside(CompressorLoop(settings, pcfg, **kw), "compressor-loop"))
    if pcfg.steps_router_runtime == "kafka" and faust_roles & {"l1", "l2"}:
        from argus.streams.steps_router_loop import StepsRouterLoop

        beside.append(start_beside(StepsRouterLoop(settings, pcfg, **kw), "steps-router-loop"))
    try:
        Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()
    finally:
        for _thread, stop, _errors in beside:
            stop.set()
        for thread, _stop, _errors in beside:
            thread.join(60.0)
        if any(errors for _thread, _stop, errors in beside):
            raise SystemExit(1)
