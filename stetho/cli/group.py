"""The `stetho` click group: commands load from stetho.cli.COMMANDS only when used."""

from __future__ import annotations

import importlib

import click

from stetho import __version__
from stetho.cli.table import COMMANDS, HELP


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


@click.group(cls=_LazyGroup, help=HELP,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stetho")
def cli() -> None:
    pass
