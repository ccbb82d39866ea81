"""The `stetho` command: a thin click layer over the library.

It parses options, calls the library, and maps exceptions to the documented exit codes:
0 go (warnings allowed), 1 a blocking check failed, 2 usage or configuration error, 3 could not
evaluate. No traceback reaches the user (set STETHO_DEBUG=1 to see one). Every option can be
defaulted from the environment: STETHO_<COMMAND>_<OPTION>, e.g. STETHO_CHECK_PROFILE.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from stetho import __version__
from stetho.errors import ConfigError, StethoError


@click.group(context_settings={"help_option_names": ["-h", "--help"],
                               "auto_envvar_prefix": "STETHO"})
@click.version_option(__version__, prog_name="stetho")
def cli() -> None:
    """stetho: health checks for GPU training nodes, as pytest tests.

    \b
    stetho check --local                 check this node now
    stetho check --evidence runs/x       replay the checks over saved evidence
    stetho sim build OUT --nodes 4       build simulated H100 nodes to try it on
    """


@cli.command()
@click.option("--local", "local", is_flag=True, help="Collect evidence on this node and check it "
              "(the default when no --evidence is given).")
@click.option("--evidence", "evidence", multiple=True, type=click.Path(),
              help="Replay over saved evidence bundles: a file or a folder of them.")
@click.option("--sim", type=click.Path(), help="Check a simulated node folder "
              "(from `stetho sim build`) instead of this machine.")
@click.option("--node", help="Node name (default: the hostname, or the simulated node's name).")
@click.option("--profile", "profile_name", envvar="STETHO_PROFILE",
              help="Node profile: a name in baselines/ or a YAML path [default: generic; with "
              "--evidence, the profile recorded in each bundle].")
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False),
              help="Write the results JSON here.")
@click.option("--evidence-out", type=click.Path(dir_okay=False),
              help="Write the collected evidence bundle here (with --local).")
@click.option("--checks", "extra_checks", multiple=True, type=click.Path(),
              help="Also run the site checks in this folder (repeatable).")
@click.option("-k", "select", help="Only checks matching this pytest -k expression.")
@click.option("-n", "--workers", help="Spread a replay over N processes (pytest-xdist; 'auto').")
@click.option("--all", "show_all", is_flag=True,
              help="A row for every check x subject (default: passes and skips of a check "
              "are grouped per node).")
@click.option("--problems", is_flag=True, help="Only fail, error and warn rows.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the summary line.")
def check(local: bool, evidence: tuple[str, ...], sim: str | None, node: str | None,
          profile_name: str | None, junit: str | None, json_out: str | None,
          evidence_out: str | None, extra_checks: tuple[str, ...], select: str | None,
          workers: str | None, show_all: bool, problems: bool, quiet: bool) -> None:
    """Run the health checks on this node (or a simulated one), or replay saved evidence."""
    from stetho import checkrun
    from stetho.evidence.bundle import Bundle

    if evidence and (local or sim):
        raise click.UsageError("--evidence replays saved bundles; it cannot be combined with "
                               "--local or --sim")
    if evidence_out and evidence:
        raise click.UsageError("--evidence-out writes what --local collects")
    bundles: list[Bundle] | None = None
    if not evidence:
        from stetho import collect

        bundle = collect.collect_local(profile=profile_name, sim=sim, node=node)
        if evidence_out:
            bundle.save(Path(evidence_out))
        bundles = [bundle]
    elif not workers:
        from stetho.evidence.bundle import find_bundles, load

        # Loaded here, not inside pytest, so an unreadable bundle is one clear error (exit 3).
        bundles = [load(p) for e in evidence for p in find_bundles(Path(e))]
        evidence = ()
    else:
        from stetho.evidence.bundle import find_bundles

        for e in evidence:
            find_bundles(Path(e))  # fail early, exit 3, with the path in the message
    results = checkrun.run(bundles, evidence=list(evidence) or None, profile=profile_name,
                           extra_checks=extra_checks, select=select, workers=workers)
    _emit(results, junit, json_out, show_all=show_all, problems=problems, quiet=quiet)


def _emit(results: list[Any], junit: str | None, json_out: str | None, *, show_all: bool,
          problems: bool, quiet: bool) -> None:
    from stetho.results import exit_code
    from stetho.sinks import json_out as json_sink
    from stetho.sinks import table

    if not results:
        raise StethoError("no check produced a result (is the checks folder empty?)")
    if junit:
        from stetho.sinks import junit as junit_sink

        _write(junit, junit_sink.render(results))
    if json_out:
        _write(json_out, json_sink.render(results))
    if quiet:
        click.echo(table.summary(results))
    else:
        show = ("fail", "error", "warn") if problems else table.ALL
        width = max(100, min(220, _terminal_width()))
        click.echo(table.render(results, width=width, color=sys.stdout.isatty(), show=show,
                                group_ok=not show_all), nl=False)
    sys.exit(exit_code(results))


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 180


def _write(path: str, text: str) -> None:
    """Write a report atomically; '-' (or a device such as /dev/stdout) is written through."""
    if path == "-":
        sys.stdout.write(text)
        return
    p = Path(path)
    if p.exists() and not p.is_file():
        with p.open("w", encoding="utf-8") as fh:
            fh.write(text)
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(p)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None


@cli.group()
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


@cli.command()
@click.option("--sim", type=click.Path(), help="Collect from a simulated node folder.")
@click.option("--node", help="Node name (default: the hostname).")
@click.option("--profile", "profile_name", envvar="STETHO_PROFILE", help="Node profile.")
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False),
              help="Where to write the evidence bundle.")
def collect(sim: str | None, node: str | None, profile_name: str | None, out: str) -> None:
    """Collect this node's evidence into a bundle, without checking it."""
    from stetho import collect as collect_mod

    bundle = collect_mod.collect_local(profile=profile_name, sim=sim, node=node)
    bundle.save(Path(out))
    statuses = [f"{r.name}={r.status}" for r in bundle.probes.values()]
    click.echo(f"{bundle.node}: {len(statuses)} probes -> {out} ({', '.join(statuses)})")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn every failure into a message and an exit code."""
    try:
        cli.main(args=argv, prog_name="stetho", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except StethoError as exc:
        click.echo(f"stetho: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # the last line of defence: never a traceback
        if os.environ.get("STETHO_DEBUG"):
            raise
        click.echo(f"stetho: internal error: {type(exc).__name__}: {exc} "
                   "(set STETHO_DEBUG=1 for the traceback, and please report it)", err=True)
        sys.exit(3)
    sys.exit(0)
