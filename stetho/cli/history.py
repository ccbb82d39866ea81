"""`stetho history NODE`: a node's measured metrics over time; `stetho history decisions`:
the gates' recorded decisions; `stetho history ingest`: the same as `stetho ingest` (the
result spool into the history)."""

from __future__ import annotations

import sys

import click

from stetho.cli.common import db_option, settings, terminal_width
from stetho.errors import ConfigError


class _NodeOrCommand(click.Group):
    """`stetho history NODE [...]` as before, beside its subcommands (`ingest`): a first
    argument that names no subcommand is a node."""

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["show", *args]
        return super().resolve_command(ctx, args)


@click.group(cls=_NodeOrCommand)
def history() -> None:
    """A node's metrics over time (`stetho history NODE`), or `stetho history ingest`."""


@history.command("show")
@click.argument("node")
@click.option("--check", "check_name", help="Only this check's metrics (e.g. ib, gpu, nccl).")
@click.option("--metric", help="Only this metric (e.g. SymbolErrorCounter, temperature_c).")
@click.option("--since", default="30d", show_default=True, help="How far back: 30d, 12h, 2w.")
@db_option
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def show(node: str, check_name: str | None, metric: str | None, since: str,
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
    # A terminal gets rows fitted to it; a pipe or a file gets them whole (grep must see them).
    width = max(60, min(220, terminal_width())) if sys.stdout.isatty() else None
    click.echo(historyview.render(node, rows, width=width), nl=False)


def _ingest() -> click.Command:
    from stetho.cli.ingest import ingest

    return ingest


# `stetho history ingest` is `stetho ingest`: one spool, one ingest (it used to take only the
# Slurm hooks' verdicts; they now spool per node as every node-local run does).
history.add_command(_ingest(), "ingest")


@history.command("reseal")
@db_option
@click.option("--launder", is_flag=True, help="Required: the new seal believes the rows as "
              "they stand, so deleted newest rows are never noticed.")
def reseal(db: str | None, launder: bool) -> None:
    """Write a new history seal (`<db>.seal`) from the rows as they stand, after the old one
    was lost. Every node's chain is still verified (edited rows and deleted middle rows are
    refused), but rows deleted from the newest end, or an older copy of the database, are
    believed from then on: restore the seal from the backup taken with the database instead
    whenever you can."""
    from stetho.history.store import History

    if not launder:
        raise ConfigError("history reseal: a new seal believes whatever was done to the newest "
                          "rows since the old one; restore the .seal from the backup taken "
                          "with the database, or give --launder if you accept that")
    cfg = settings(db=db)
    with History(cfg.db) as h:
        count = h.reseal()
    click.echo(f"sealed {count} nodes in {cfg.db}.seal (laundered: rows deleted from the "
               "newest end before now are no longer detected)")


@history.command("prune")
@db_option
@click.option("--keep-results", default="30d", show_default=True,
              help="Keep each node-run's full results this long (30d, 12w); older rows keep "
                   "their verdict counts, chain and metrics.")
@click.option("--vacuum", is_flag=True, help="Then VACUUM, to give the freed pages back to "
              "the filesystem (needs free space the size of the database; without it SQLite "
              "reuses them for new rows).")
def prune(db: str | None, keep_results: str, vacuum: bool) -> None:
    """Drop results older than --keep-results, keeping every row verifiable: a pruned row is
    never fresh evidence (the gate, replay and `stetho job` need the results, so keep them
    longer than any policy's freshness and the windows you replay)."""
    from stetho.history.store import History, parse_since

    keep = parse_since(keep_results)
    cfg = settings(db=db)
    if not cfg.db.exists():
        raise ConfigError(f"history prune: no history database at {cfg.db}")
    with History(cfg.db) as h:
        done = h.prune(keep)
        if vacuum:
            h.conn.execute("VACUUM")
    click.echo(f"pruned the results of {done.rows} node-runs older than {keep_results} "
               f"({done.bytes_freed / 2**20:.1f} MiB{' given back' if vacuum else ' reusable'}); "
               f"{done.already} pruned before, {done.kept_old_format} kept whole (signed "
               f"before schema 5), {done.kept_unsigned} kept (unsigned, never evidence)")


@history.command("decisions")
@click.option("--since", default="30d", show_default=True, help="How far back: 30d, 12h, 2w.")
@click.option("--node", help="Only this node's decisions, each with the release's own verdict "
                              "(node *) of a release run the node was in.")
@click.option("--json", "as_json", is_flag=True,
              help="A JSON list, one object per decision: the table's fields (time as UTC "
                   "text, verdict, node, policy, mode, checks, reason, run) and the raw "
                   "epoch.")
@db_option
def decisions(since: str, node: str | None, as_json: bool, db: str | None) -> None:
    """The gates' recorded decisions, oldest first: the release gate's verdict on the
    release (node *, promote or hold, and why) and per canary (mode release), and what
    shadow policies would have done (mode shadow), with the checks or benchmarks behind each
    block."""
    import time

    from stetho.history import decisions as ledger
    from stetho.history.store import History, parse_since

    seconds = parse_since(since)
    path = settings(db=db).db
    if not path.exists():
        raise ConfigError(f"no history database at {path} (run `stetho gate` first, or pass "
                          "--db)")
    with History(path) as h:
        rows = ledger.read(h, since=time.time() - seconds)
    if node is not None:  # the node's rows, and the verdict on each release it was part of
        runs = {run for run, _, d in rows if d.node == node}
        rows = [r for r in rows if r[2].node == node or r[2].node == "*" and r[0] in runs]
    if as_json:
        import dataclasses
        import json

        click.echo(json.dumps([
            {"time": _utc(t), "epoch": t, **dataclasses.asdict(d), "checks": list(d.checks),
             "run": run} for run, t, d in rows], indent=1))
        return
    if not rows:
        click.echo(f"no gate decisions in the last {since}"
                   + (f" for node {node}" if node else ""))
        return
    for run, t, d in rows:
        stamp = _utc(t)
        click.echo(f"{stamp}  {d.verdict.upper():<11} {d.node}  policy {d.policy} "
                   f"({d.mode})" + (f": {', '.join(d.checks)}" if d.checks else "")
                   + (f"  why: {d.reason}" if d.reason else "") + f"  [run {run}]")


def _utc(t: int) -> str:
    """An epoch as the decisions table shows it: UTC, to the second."""
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
