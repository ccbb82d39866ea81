"""`stetho sim build|faults`: simulated nodes from real recorded tool outputs."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def sim() -> None:
    """Simulated nodes built from real recorded tool outputs."""


@sim.command("build")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--nodes", "count", default=1, show_default=True, type=click.IntRange(1, 100000),
              help="How many nodes (named node01, node02, ...).")
@click.option("--prefix", default="node", show_default=True, help="Node name prefix.")
@click.option("--fault", "faults", multiple=True, metavar="NODE=FAULT",
              help="Inject a fault into one node, e.g. node03=busbw-drop=20 (repeatable). "
              "`stetho sim faults` lists them.")
def sim_build(out: str, count: int, prefix: str, faults: tuple[str, ...]) -> None:
    """Build healthy 8x H100 nodes under OUT, with faults injected into copies."""
    from stetho.sim import builder as build

    plan = build.parse_faults(faults)
    names = build.build_cluster(Path(out), count, prefix=prefix, faults=plan)
    click.echo(f"built {len(names)} simulated nodes in {out}: {names[0]} .. {names[-1]}"
               + (f"; faults: {', '.join(f'{n}={f}' for n, fs in plan.items() for f in fs)}"
                  if plan else ""))


@sim.command("faults")
def sim_faults() -> None:
    """List the faults `stetho sim build --fault` can inject."""
    from stetho.sim import faults

    for name, fault in sorted(faults.FAULTS.items()):
        click.echo(f"{name:<24} {fault.description}")
