"""`stetho export prometheus-rules GATES_DIR`: alert rules generated from the gate policies."""

from __future__ import annotations

import click


@click.group("export")
def export() -> None:
    """Artefacts generated from stetho's own configuration."""


@export.command("prometheus-rules")
@click.argument("folder", type=click.Path(exists=True, file_okay=False), default="gates")
def prometheus_rules(folder: str) -> None:
    """Prometheus alert rules for every gate policy in FOLDER (a node blocked, a check failing,
    results gone stale), for `rule_files:`; check them with `promtool check rules`."""
    from stetho.gate import promrules

    click.echo(promrules.generate(promrules.load_policies(folder)), nl=False)
