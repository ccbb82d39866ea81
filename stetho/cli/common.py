"""What every command shares: the configuration with the command's flags applied, output
files written atomically, the results table and exit code, and progress on stderr."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stetho import config
from stetho.errors import StethoError

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID
    from rich.status import Status

    from stetho.evidence.runner import ProbeEvent
    from stetho.results import Result

#: --db, the same on every command that reads or writes history.
db_option = click.option("--db", type=click.Path(dir_okay=False),
                         help="History database [default: STETHO_DB, the config file's `db`, "
                         "else ~/.local/share/stetho/history.db].")


def settings(**flags: object) -> config.Config:
    """The configuration for this command (defaults < config file < environment, read now:
    a command is an edge) with its flags applied (None: not given), made active for the
    library calls that follow."""
    cfg = config.load().with_flags(**flags)
    config.activate(cfg)
    return cfg


def history_db(cfg: config.Config, sim: str | None) -> Path:
    """The history a run records into: a simulated node's own (`<sim folder>/history.db`)
    unless --db, STETHO_DB or the config file names one, so that a simulation never lands in
    the production history; else the configured one."""
    if sim and "db" not in cfg.given:
        return Path(sim) / "history.db"
    return cfg.db


def terminal_width() -> int:
    """The terminal's columns ($COLUMNS wins, as everywhere else), 80 when not a terminal;
    without shutil, which a gate's run would import for this alone."""
    from stetho.configsource import terminal_columns

    return terminal_columns(80)


def write(path: str, text: str | Iterable[str]) -> None:
    """Write a report atomically; '-' (or a device such as /dev/stdout) is written through.
    `text` may come in pieces (a streamed document), written as they come."""
    from stetho.check.outputs import write_text

    write_text(path, text)


def unwritten(problems: Sequence[str], code: int) -> int:
    """After the verdict line: each output that could not be written, named on stderr, and
    exit 3 (the run was judged, but what it was asked to leave behind is not there)."""
    for problem in problems:
        click.echo(f"stetho: {problem}", err=True)
    return 3 if problems else code


def emit(results: Sequence[Result], junit: str | None, json_out: str | None, *,
         show_all: bool, problems: bool, quiet: bool, summary_to_stderr: bool = False) -> int:
    """Write the requested files, print the table (or only the summary line), and return the
    exit code of the results. Results spilled to disk (a fleet's replay) are streamed."""
    from stetho.results import exit_code
    from stetho.sinks import json_out as json_sink
    from stetho.sinks.spool import Results

    if not results:
        raise StethoError("no check produced a result (is the checks folder empty?)")
    streamed = results if isinstance(results, Results) and results.spilled else None
    if junit:
        from stetho.sinks import junit as junit_sink

        write(junit, junit_sink.render_stream(streamed) if streamed is not None
              else junit_sink.render(list(results)))
    if json_out:
        write(json_out, json_sink.render_stream(streamed) if streamed is not None
              else json_sink.render(list(results)))
    show_results(results, quiet=quiet, problems=problems, group_ok=not show_all,
                 summary_to_stderr=summary_to_stderr)
    return exit_code(results)


def show_results(results: Sequence[Result], *, quiet: bool, problems: bool,
                 group_ok: bool = True, summary_to_stderr: bool = False) -> None:
    """The results on stdout, the same for every command that judges nodes: the summary line
    alone when quiet, else the table (only fail/error/warn rows with `problems`) sized to the
    terminal, in colour only on a terminal."""
    from stetho.sinks import table

    if quiet:
        click.echo(table.summary(results), err=summary_to_stderr)
        return
    show = ("fail", "error", "warn") if problems else table.ALL
    width = max(60, min(220, terminal_width()))
    click.echo(table.render(results, width=width, color=sys.stdout.isatty(), show=show,
                            group_ok=group_ok), nl=False)


class Progress:
    """What a long command is doing, on stderr: its steps (`step`, e.g. the wheelhouse build)
    and hosts done / total and failing so far (`update`). A spinner and a live bar on a
    terminal, lines in a CI log, nothing when quiet."""

    def __init__(self, what: str = "sweep", *, quiet: bool = False) -> None:
        self.what = what
        self.quiet = quiet
        self.bar: RichProgress | None = None
        self.task: TaskID | None = None
        self.spinner: Status | None = None
        self.tty = sys.stderr.isatty()

    def step(self, text: str) -> None:
        if self.quiet:
            return
        if not self.tty:
            click.echo(text, err=True)
            return
        if self.bar is not None:  # one live display at a time on a terminal
            self.bar.stop()
            self.bar = None
        if self.spinner is None:
            from rich.console import Console

            self.spinner = Console(stderr=True).status(text)
            self.spinner.start()
        else:
            self.spinner.update(text)

    def update(self, host: str, done: int, total: int, failing: int) -> None:
        if self.quiet:
            return
        self._stop_spinner()
        if not self.tty:
            click.echo(f"[{done}/{total}] {host} done ({failing} failing so far)", err=True)
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(TextColumn(self.what), BarColumn(), MofNCompleteColumn(),
                                    TextColumn("{task.fields[failing]} failing"),
                                    console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=total, failing=0)
        assert self.task is not None
        self.bar.update(self.task, completed=done, failing=failing)

    def _stop_spinner(self) -> None:
        if self.spinner is not None:
            self.spinner.stop()
            self.spinner = None

    def close(self) -> None:
        self._stop_spinner()
        if self.bar is not None:
            self.bar.stop()


class ProbeProgress:
    """Which probes a node's check is running, on stderr (a hung tool is named while it
    hangs): a live status line on a terminal, a line per start and end in a log."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()  # rich is imported only for a terminal (a prolog has none)
        self.running: dict[str, float] = {}
        self.lock = threading.Lock()
        self.status: object | None = None

    def __call__(self, event: ProbeEvent) -> None:
        limit = f"timeout {event.timeout_s:g} s" if event.timeout_s else "file read"
        with self.lock:
            if event.record is None:
                self.running[event.name] = event.timeout_s
                line = f"probe {event.name} ... ({limit})"
            else:
                self.running.pop(event.name, None)
                rec = event.record
                line = f"probe {event.name} {'done' if rec.status == 'ok' else rec.status} " \
                       f"{rec.duration_s:.1f} s"
            if not self.tty:
                click.echo(line, err=True)
                return
            self._show()

    def _show(self) -> None:
        from rich.console import Console
        from rich.status import Status

        text = "probes running: " + (", ".join(sorted(self.running)) or "(none)")
        if self.status is None:
            status = Status(text, console=Console(stderr=True))
            status.start()
            self.status = status
        else:
            assert isinstance(self.status, Status)
            self.status.update(text)

    def close(self) -> None:
        with self.lock:
            if self.status is not None:
                from rich.status import Status

                assert isinstance(self.status, Status)
                self.status.stop()
                self.status = None


class ReplayProgress:
    """A fleet replay's check items done of all, on stderr: a bar on a terminal, a line at
    each tenth in a log (a 10,000-node replay has thousands of items)."""

    def __init__(self) -> None:
        self.what = "replay"
        self.tty = sys.stderr.isatty()
        self.bar: RichProgress | None = None
        self.task: TaskID | None = None
        self.shown = -1

    def __call__(self, done: int, total: int) -> None:
        if total <= 0:
            return
        if not self.tty:
            tenth = min(10, done * 10 // total)
            if tenth > self.shown:
                self.shown = tenth
                click.echo(f"{self.what}: {tenth * 10}% of the checks done ({done}/{total})",
                           err=True)
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(TextColumn(self.what), BarColumn(), MofNCompleteColumn(),
                                    console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=total)
        assert self.task is not None
        self.bar.update(self.task, completed=done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
