"""``argus config show``: the effective settings (file + environment), secrets redacted."""

from __future__ import annotations

import json
from typing import Any

import click

from argus.cli import settings_from


@click.group()
def config() -> None:
    """Inspect the effective configuration."""


def effective(settings: Any) -> dict[str, Any]:
    """The settings as one JSON-able mapping; every secret shows as ``********``."""
    from argus.kafka.security import REDACTED, Secret, is_sensitive

    def clean(key: str, value: Any) -> Any:
        if isinstance(value, Secret) or (is_sensitive(key) and not key.endswith("_file")):
            return REDACTED if value else ""
        if isinstance(value, dict) or hasattr(value, "items"):
            return {str(k): clean(str(k), v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(key, v) for v in value]
        return value if isinstance(value, int | float | bool) or value is None else str(value)

    return {
        "kafka": {
            "bootstrap": settings.bootstrap_servers,
            "local_broker": settings.local_broker,
            "port": settings.kafka_port,
            "controller_port": settings.controller_port,
            "schema_registry_url": settings.schema_registry_url,
            "security": settings.security.describe(),
            "client": clean("client", dict(settings.client_config)),
        },
        "topics": {"prefix": settings.topic_prefix},
        "state_dir": str(settings.state_dir),
        "cache_dir": str(settings.cache_dir),
        **{str(k): clean(str(k), v) for k, v in settings.sections.items()},
    }


@config.command("show")
@click.pass_context
def show(ctx: click.Context) -> None:
    """Print the effective settings as JSON (passwords shown as ********)."""
    click.echo(json.dumps(effective(settings_from(ctx)), indent=2, sort_keys=True))
