"""The ``argus`` command line.

Subcommands live in their own modules and are imported only when used, so ``argus --help``
stays fast and a missing optional dependency breaks only its own command. To add one, write
a click command and list it in ``COMMANDS`` as ``"name": "module:attribute"``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from argus import __version__

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module:attribute, one-line help shown in `argus --help`)
    "kafka": ("argus.commands.kafka:kafka", "Run a local Apache Kafka broker (up/down/status)."),
    "config": ("argus.commands.config:config", "Show the effective settings (secrets redacted)."),
    "topics": ("argus.commands.kafka:topics", "Create or list the argus topics."),
    "simulate": (
        "argus.commands.simulate:simulate",
        "Simulate a training job with injected faults (Avro files or Kafka).",
    ),
    "ingest": (
        "argus.commands.ingest:ingest",
        "Ingest PyTorch profiler (Kineto) traces as a recorded job (Avro files or Kafka).",
    ),
    "diagnose": (
        "argus.commands.diagnose:diagnose",
        "Diagnose recorded Avro files offline: L1-L3 and the funnel.",
    ),
    "demo": (
        "argus.commands.demo:demo",
        "The main job end to end: broker, workers, a faulty simulated job, live funnel.",
    ),
    "worker": (
        "argus.commands.worker:worker",
        "Run stream-worker roles (compressor, l1, l2, l3, funnel, stacks, pagerduty).",
    ),
    "collect": ("argus.commands.collect:collect", "Collector sidecars (py-spy stacks)."),
    "control": ("argus.commands.control:control", "Send runtime commands to running collectors."),
    "fidelity": (
        "argus.commands.fidelity:fidelity",
        "Check compression fidelity: raw vs reconstructed rank W1 (synthetic or Avro files).",
    ),
    "replay": (
        "argus.commands.replay:replay",
        "Replay a job's historical window from Kafka through L1-L3 and the funnel.",
    ),
    "trace": (
        "argus.commands.trace:trace",
        "Write a Perfetto trace of ranks' phases, kernels and stacks (L4 drill-down).",
    ),
    "stacks": (
        "argus.commands.stacks:stacks",
        "Hottest collapsed stacks of a rank; text, folded or speedscope (L5).",
    ),
    "report": (
        "argus.commands.report:report",
        "One self-contained HTML report of a job's window (charts, funnel).",
    ),
    "status": (
        "argus.commands.status:status",
        "Jobs (time range, last step, open alerts) and workers (liveness, lag).",
    ),
    "jobs": (
        "argus.commands.status:jobs",
        "Jobs on the topics: time range, last step, open alerts.",
    ),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        mod, _, attr = COMMANDS[name][0].partition(":")
        cmd = getattr(importlib.import_module(mod), attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="argus")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="ARGUS_CONFIG",
    help="TOML settings file (default: ./argus.toml if present). Env ARGUS_* overrides it.",
)
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """argus-trace: always-on fail-slow diagnosis for large LLM training jobs.

    Collectors in each training rank publish Avro records to Kafka; stream workers compress
    kernel timings and run the L1 (iteration), L2 (phase) and L3 (kernel) detectors; alerts
    go to argus.alerts and PagerDuty.
    """
    ctx.obj = {"config_path": config_path}


def settings_from(ctx: click.Context) -> Any:
    """The frozen settings for this invocation (file + environment)."""
    from argus.config import ConfigError, load_settings

    try:
        return load_settings((ctx.find_root().obj or {}).get("config_path"))
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


def main(argv: list[str] | None = None) -> int:
    from argus.errors import ArgusError

    try:
        rv = cli.main(args=argv, prog_name="argus", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except ArgusError as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        return 1
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    sys.exit(main())
