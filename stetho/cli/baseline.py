"""`stetho baseline record|show|diff`: a node class's healthy values, with their versions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from stetho.cli.common import terminal_width


@click.group()
def baseline() -> None:
    """Healthy values of a node class, measured on real nodes, with their versions."""


@baseline.command("record")
@click.option("--from", "sources", multiple=True, required=True, type=click.Path(exists=True),
              help="A run folder or evidence bundles (repeatable): the healthy nodes.")
@click.option("--profile", "profile_name", required=True, help="The profile to record into.")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Write here instead of the profile's own file.")
@click.option("--include-failing", is_flag=True,
              help="Keep nodes whose checks fail or error (left out by default).")
@click.option("--min-nodes", type=click.IntRange(min=1), default=8, show_default=True,
              help="Refuse to record from fewer healthy nodes.")
def baseline_record(sources: tuple[str, ...], profile_name: str, out: str | None,
                    include_failing: bool, min_nodes: int) -> None:
    """Record the median of the given nodes as the profile's baseline (review and commit it).

    Nodes whose checks fail or error are left out (named); fewer than --min-nodes healthy
    nodes is refused."""
    from stetho import profiles
    from stetho.check.screen import screen
    from stetho.history import baselines as bl

    prof = profiles.load(profile_name)
    screened = screen(bl.bundles_of(list(sources)), prof, include_failing=include_failing,
                         min_nodes=min_nodes)
    for node, why in screened.excluded.items():
        click.echo(f"left out {node}: {why}", err=True)
    m = bl.measure(screened.kept, prof)
    path = bl.record(prof, m, ", ".join(sources), Path(out) if out else None)
    click.echo(f"recorded {len(m.busbw)} busbw sizes and {len(m.measured)} metrics from "
               f"{m.nodes} nodes into {path}")
    for comp, seen in sorted(m.spread.items()):
        click.echo(f"warning: the nodes disagree on {comp}: {seen}; the majority was recorded",
                   err=True)


@baseline.command("show")
@click.argument("profile_name")
@click.option("--json", "as_json", is_flag=True)
def baseline_show(profile_name: str, as_json: bool) -> None:
    """The profile's baseline values and the fingerprint they were measured on."""
    from stetho import profiles
    from stetho.history import baselines as bl

    prof = profiles.load(profile_name)
    _baseline_table(prof, bl.compare(prof, None), as_json, current=False)


@baseline.command("diff")
@click.argument("profile_name")
@click.option("--against", "sources", multiple=True, required=True,
              type=click.Path(exists=True), help="A run folder or evidence bundles.")
@click.option("--json", "as_json", is_flag=True)
def baseline_diff(profile_name: str, sources: tuple[str, ...], as_json: bool) -> None:
    """The baseline against current values (medians of the given nodes), and the fingerprint
    differences. Exit 1 when a value is worse than the tolerance or the fingerprint differs."""
    from stetho import profiles
    from stetho.history import baselines as bl

    prof = profiles.load(profile_name)
    rows = bl.compare(prof, bl.measure(bl.bundles_of(list(sources)), prof))
    _baseline_table(prof, rows, as_json, current=True)
    sys.exit(1 if any(r.status in ("worse", "differs") for r in rows) else 0)


def _baseline_table(prof: Any, rows: list[Any], as_json: bool, *, current: bool) -> None:
    import io
    import json

    if as_json:
        click.echo(json.dumps({"profile": prof.name, "source": prof.source,
                               "measured_on": prof.baseline.measured_on,
                               "rows": [r.to_json() for r in rows]}, indent=1, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    nccl_on = prof.nccl.baseline.measured_on if prof.nccl.baseline else "?"
    t = Table(title=f"baseline {prof.name} ({prof.source}; measured "
                    f"{prof.baseline.measured_on or nccl_on})", header_style="bold")
    cols = ["kind", "name", "baseline"] + (["current", "delta %", "status"] if current else [])
    for c in cols:
        t.add_column(c)
    for r in rows:
        cells = [r.kind, r.name, str(r.baseline)]
        if current:
            cells += [str(r.current), "" if r.delta_pct is None else f"{r.delta_pct:+.1f}",
                      r.status]
        t.add_row(*cells)
    buf = io.StringIO()
    Console(file=buf, width=max(60, min(200, terminal_width())), no_color=True).print(t)
    click.echo(buf.getvalue(), nl=False)
