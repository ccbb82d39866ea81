"""The `stetho` command: a thin click layer over the library, one module per command group.

Each command parses its options, calls the library, prints, and returns an exit code: 0 go
(warnings allowed), 1 a blocking check failed, 2 usage or configuration error, 3 could not
evaluate. `main` is the one place exceptions become exit codes; no traceback reaches the user
(STETHO_DEBUG=1 shows one). Settings come from stetho.config (defaults < config file <
STETHO_* environment) and a flag given on the command line wins over all of them.
"""

from __future__ import annotations

import sys

from stetho.cli.table import COMMANDS, HELP
from stetho.errors import StethoError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:
    import click

__all__ = ["COMMANDS", "HELP", "main"]


def __getattr__(name: str) -> click.Group:
    """`stetho.cli.cli`, the click group, is built on first use (it imports click)."""
    if name == "cli":
        from stetho.cli.group import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: build the configuration, run the CLI, and turn every failure into a
    message and an exit code. Without `argv` it runs the process's own command line (the
    `stetho` script, `python -m stetho`) and the process ends with it (`_ending`)."""
    try:
        _main(argv)
    finally:
        if argv is None:
            _ending()


def _ending() -> None:
    """The process exits next: every object still alive is frozen out of the cyclic GC, so
    the interpreter's last collection at exit has nothing to walk (after a 64-node gate it
    walked the imports and what the run kept, 5-8 ms of a 190 ms command; bench/gate.py).
    Exit still runs atexit handlers, flushes the standard streams and releases every object
    by reference count; only a finalizer inside a reference cycle is left to the OS, and
    no stetho writer relies on one (each closes its file before it returns)."""
    import gc

    gc.freeze()


def _main(argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args in (["--help"], ["-h"]) and _help_without_click():
        sys.exit(0)
    import click

    from stetho import config
    from stetho.cli.group import cli

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


def _help_without_click() -> bool:
    """Print `stetho --help` from the tables (stetho.cli.helptext); False when the
    configuration cannot be read, so that the full path reports it as for any command.
    Building it is skipped when nothing could fail (stetho.configsource): that import costs
    more than the page."""
    from stetho import configsource
    from stetho.cli.helptext import render

    if not configsource.nothing_to_validate():
        from stetho import config

        try:  # a broken config file or variable fails here as for every command
            config.activate(config.load())
        except StethoError:
            return False
    page = render("stetho", HELP, [(n, COMMANDS[n][1]) for n in sorted(COMMANDS)])
    sys.stdout.write(page + "\n")
    sys.stdout.flush()
    return True
