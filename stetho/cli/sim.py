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
@click.option("--physics", is_flag=True,
              help="Per fault: the part it breaks, the outputs it changes and leaves alone, and "
                   "what a technician finds (the cause the diagnosis catalogue expects).")
def sim_faults(physics: bool) -> None:
    """List the faults `stetho sim build --fault` can inject."""
    from stetho.sim import faults
    from stetho.sim import physics as phys

    if physics:
        for name, p in sorted(phys.FAULTS.items()):
            click.echo(f"{name:<24} part: {p.part}\n{'':<24} changes: {', '.join(p.changes)}"
                       + (f"\n{'':<24} leaves alone: {p.unchanged}" if p.unchanged else "")
                       + f"\n{'':<24} found: {p.found or 'nothing to fix'}"
                       + (f" ({p.disposition})" if p.disposition else ""))
        return
    for name, fault in sorted(faults.FAULTS.items()):
        click.echo(f"{name:<24} {fault.description}")
