"""``argus config show``: every setting in effect and where it came from, secrets redacted."""

from __future__ import annotations

import json

import click

from argus.cli import settings_from


@click.group()
def config() -> None:
    """Inspect the effective configuration."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="one JSON object: key -> {value, source}")
@click.pass_context
def show(ctx: click.Context, as_json: bool) -> None:
    """Print every setting (defaults included) with its value and its source: default, file,
    or the environment variable that set it. Passwords and keys show as ********.

    Loads and validates exactly as a worker does: a value a worker would reject is the same
    error here.
    """
    from argus.config import ConfigError, effective

    s = settings_from(ctx)
    try:
        rows = effective(s)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    if as_json:
        body = {
            "config_file": str(s.config_file) if s.config_file else None,
            "settings": {k: {"value": v, "source": src} for k, v, src in rows},
        }
        click.echo(json.dumps(body, indent=2))
        return
    where = f"file {s.config_file}" if s.config_file else "no config file"
    cluster = "local broker" if s.local_broker else "existing cluster"
    click.echo(f"# {where}; environment wins over it; cluster {s.bootstrap_servers} ({cluster})")
    shown = [(k, json.dumps(v), src) for k, v, src in rows]
    kw = max(len(k) for k, _, _ in shown)
    vw = min(48, max(len(v) for _, v, _ in shown))
    for k, v, src in shown:
        click.echo(f"{k:<{kw}}  {v:<{vw}}  {src}")
