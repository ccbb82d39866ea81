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

#: command -> ("module:attribute", the first line of its docstring). Commands load only when
#: used: `stetho gate` in a Slurm prolog must not pay for importing the sweep, the knowledge base
#: or the override machinery, and `stetho --help` lists them all from these lines without
#: importing any (tests/test_cli_lazy.py keeps each line equal to its command's docstring).
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("stetho.cli.check:check", "Run the health checks on this node (or a simulated "
              "one), or replay saved evidence."),
    "collect": ("stetho.cli.check:collect", "Collect this node's evidence into a bundle, "
                "without checking it."),
    "sweep": ("stetho.cli.sweep:sweep", "Run `stetho check --local` on every inventory host "
              "through Ansible."),
    "bench": ("stetho.cli.bench:bench", "Benchmarks (benchmarks/*.yml): run a suite, record "
              "and compare baselines."),
    "history": ("stetho.cli.history:history", "A node's metrics over time (`stetho history "
                "NODE`), or `stetho history ingest`."),
    "baseline": ("stetho.cli.baseline:baseline", "Healthy values of a node class, measured on "
                 "real nodes, with their versions."),
    "gate": ("stetho.cli.gate:gate", "Go (0) or blocked (1) for a job or release on these "
             "nodes, by a gate policy."),
    "report": ("stetho.cli.report:report", "Diagnose a run's failing nodes: ranked root causes "
               "and a diagnosis report each"),
    "remedy": ("stetho.cli.remedy:remedy", "Remediate a run's diagnosed nodes, per cause as "
               "the rules declare (dry run by default)."),
    "kb": ("stetho.cli.kb:kb", "The knowledge base: diagnosis reports committed to a git "
           "repository, searchable."),
    "override": ("stetho.cli.override:override", "Two-person overrides: let a failing gate "
                 "check pass on named nodes, for a while."),
    "breaker": ("stetho.cli.breaker:breaker", "The drain budget's circuit breaker: stetho "
                "drains at most max(min_nodes, max_pct %) of a"),
    "sim": ("stetho.cli.sim:sim", "Simulated nodes built from real recorded tool outputs."),
    "export": ("stetho.cli.export:export", "Artefacts generated from stetho's own "
               "configuration."),
    "localize": ("stetho.cli.localize:localize", "Find the bad nodes, links (pairs) and "
                 "switches of a fleet with group benchmarks."),
    "job": ("stetho.cli.job:job", "What hardware touched job JOBID: failing checks, drains, "
            "reports, drift and shared"),
    "stats": ("stetho.cli.stats:stats", "Incidents per cause, MTBF, MTTR, time to detect and "
              "to localize, false positives,"),
    "impact": ("stetho.cli.impact:impact", "The blast radius of PART: its nodes, the running "
               "jobs on them (user, partition, nodes"),
}


class _LazyGroup(click.Group):
    """Imports a command's module only when that command runs (or shows its own help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name][0].split(":")
        cmd: click.Command = getattr(importlib.import_module(module), attr)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the table's help lines, laid out as click lays out loaded
        commands (the same truncation), so `stetho --help` imports no command."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = [(n, click.Command(n, help=COMMANDS[n][1]).get_short_help_str(limit))
                for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stetho")
def cli() -> None:
    """stetho: health checks for GPU training nodes, as pytest tests.

    \b
    stetho check --local                 check this node now
    stetho check --evidence runs/x       replay the checks over saved evidence
    stetho sweep -i inventory.yml        every node, through Ansible
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
