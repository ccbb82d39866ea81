"""`stetho history NODE`: a node's measured metrics over time."""

from __future__ import annotations

import click

from stetho.cli.common import db_option, settings, terminal_width
from stetho.errors import ConfigError


@click.command()
@click.argument("node")
@click.option("--check", "check_name", help="Only this check's metrics (e.g. ib, gpu, nccl).")
@click.option("--metric", help="Only this metric (e.g. SymbolErrorCounter, temperature_c).")
@click.option("--since", default="30d", show_default=True, help="How far back: 30d, 12h, 2w.")
@db_option
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def history(node: str, check_name: str | None, metric: str | None, since: str,
            db: str | None, as_json: bool) -> None:
    """A node's measured metrics over time, with a sparkline each."""
    import json

    from stetho.core import hostlist
    from stetho.history import view as historyview
    from stetho.history.store import History, parse_since

    hostlist.validate(node)
    path = settings(db=db).db
    if not path.exists():
        raise ConfigError(f"no history database at {path} (run `stetho check` or "
                          "`stetho sweep` first, or pass --db)")
    with History(path) as h:
        rows = historyview.rows(h, node, check=check_name, metric=metric,
                                since_s=parse_since(since))
    if as_json:
        click.echo(json.dumps({"node": node, "since": since,
                               "series": [r.to_json() for r in rows]}, indent=1))
        return
    if not rows:
        click.echo(f"{node}: no metrics in the last {since}"
                   + (f" for check {check_name}" if check_name else "")
                   + (f" metric {metric}" if metric else ""))
        return
    click.echo(historyview.render(node, rows, width=max(60, min(220, terminal_width()))),
               nl=False)
