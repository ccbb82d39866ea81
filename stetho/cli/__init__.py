"""The `stetho` command: a thin click layer over the library, one module per command group.

Each command parses its options, calls the library, prints, and returns an exit code: 0 go
(warnings allowed), 1 a blocking check failed, 2 usage or configuration error, 3 could not
evaluate. `main` is the one place exceptions become exit codes; no traceback reaches the user
(STETHO_DEBUG=1 shows one). Settings come from stetho.config (defaults < config file <
STETHO_* environment) and a flag given on the command line wins over all of them.
"""

from __future__ import annotations

import importlib
import sys

import click

from stetho import __version__
from stetho.errors import StethoError

#: command -> "module:attribute". Commands load only when used: `stetho gate` in a Slurm
#: prolog must not pay for importing the sweep, the knowledge base or the override machinery.
COMMANDS = {
    "check": "stetho.cli.check:check",
    "collect": "stetho.cli.check:collect",
    "sweep": "stetho.cli.sweep:sweep",
    "ingest": "stetho.cli.ingest:ingest",
    "spool": "stetho.cli.ingest:spool",
    "bench": "stetho.cli.bench:bench",
    "history": "stetho.cli.history:history",
    "baseline": "stetho.cli.baseline:baseline",
    "gate": "stetho.cli.gate:gate",
    "report": "stetho.cli.report:report",
    "remedy": "stetho.cli.remedy:remedy",
    "kb": "stetho.cli.kb:kb",
    "override": "stetho.cli.override:override",
    "breaker": "stetho.cli.breaker:breaker",
    "sim": "stetho.cli.sim:sim",
    "export": "stetho.cli.export:export",
    "localize": "stetho.cli.localize:localize",
    "job": "stetho.cli.job:job",
    "stats": "stetho.cli.stats:stats",
    "impact": "stetho.cli.impact:impact",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        cmd: click.Command = getattr(importlib.import_module(module), attr)
        return cmd


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stetho")
def cli() -> None:
    """stetho: health checks for GPU training nodes, as pytest tests.

    \b
    stetho check --local                 check this node now
    stetho check --evidence runs/x       replay the checks over saved evidence
    stetho sweep -i inventory.yml        every node, through Ansible
    stetho ingest SPOOL [--follow]       what nodes left in the result spool, exactly once
    stetho bench run --suite nightly     the benchmark suite on this (idle) node
    stetho gate --policy pre-job --nodes 'gpu[01-64]'   go or no-go
    stetho remedy runs/<id>              what stetho would fix by itself (--act: do it)
    stetho sim build OUT --nodes 4       build simulated H100 nodes to try it on
    stetho localize -i inventory.yml --dry-run   find the bad node, link or switch
    stetho job 1234 --topology topology.conf     what hardware touched a Slurm job
    stetho impact leafA --topology topology.conf   the running jobs a part would hit
    """


def main(argv: list[str] | None = None) -> None:
    """Entry point: build the configuration, run the CLI, and turn every failure into a
    message and an exit code."""
    from stetho import config

    debug = False
    try:
        cfg = config.load()
        debug = cfg.debug
        config.activate(cfg)
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
        if debug:
            raise
        click.echo(f"stetho: internal error: {type(exc).__name__}: {exc} "
                   "(set STETHO_DEBUG=1 for the traceback, and please report it)", err=True)
        sys.exit(3)
    sys.exit(0)
