"""`stetho ingest SPOOL [--follow]`: the outcomes nodes left in the result spool, into the
history and a run folder each batch, exactly once (stetho.fleet.ingest); and `stetho spool
key NODE`, a node's signing key for provisioning."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from stetho.cli.common import Progress, db_option, settings, show_results, unwritten
from stetho.cli.sweep import _StopOnSignal, _textfile
from stetho.errors import ConfigError
from stetho.results import Result, exit_code


@click.command()
@click.argument("spool", required=False, type=click.Path(file_okay=False))
@click.option("--follow", is_flag=True, help="Keep going: poll the spool every --interval "
              "seconds and ingest each new batch as one run (a service under systemd: "
              "contrib/systemd/stetho-ingest.service). SIGTERM/SIGINT finish the batch, exit 0.")
@click.option("--interval", default=30.0, show_default=True,
              type=click.FloatRange(min=0.1), help="Seconds between polls with --follow.")
@click.option("--expect", help="Nodes that must report (a Slurm hostlist): one with no file "
              "is that node's error, \"no outcome from NODE in the spool\".")
@click.option("--run", "run_filter", help="Only files of this run id (e.g. a Slurm sweep's).")
@click.option("--out", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Folder for run folders (runs/<UTC time>-<id>/).")
@click.option("--problems/--all", "problems_only", default=True,
              help="Show only fail/error/warn rows (default), or every row.")
@db_option
@click.option("--no-history", is_flag=True, help="Neither drift checks nor recording (and "
              "no ledger: a file is moved once its run folder is written).")
@click.option("--kb", "kb_repo", help="Knowledge-base repository for the reports and the run "
              "page [default: STETHO_KB_REPO].")
@click.option("--textfile", type=click.Path(path_type=Path),
              help="Also write the fleet's node_exporter textfile (stetho-sweep.prom) into this "
              "folder [default: STETHO_TEXTFILE_DIR].")
@click.option("--quiet", "-q", is_flag=True,
              help="The summary line instead of the table; no progress on stderr.")
@click.option("--workers", type=click.IntRange(min=0), help="Processes reading the files "
              "[default: one a core from 64 files; 0: none, this process reads them].")
def ingest(spool: str | None, follow: bool, interval: float, expect: str | None,
           run_filter: str | None, out: str, problems_only: bool, db: str | None,
           no_history: bool, kb_repo: str | None, textfile: Path | None, quiet: bool,
           workers: int | None) -> None:
    """Take the outcomes nodes left in a spool into the history, once, judged as a sweep.

    SPOOL [default: STETHO_RESULT_SPOOL] holds one folder per node, written by `stetho check
    --local --spool`, the Slurm hooks and `sweep --via slurm`. Each outcome goes into the
    history exactly once and is judged as a sweep does: fleet checks over peers, run
    folder, reports, alerts, textfile. A file that cannot be taken as its folder's node's
    (unreadable, unsigned with STETHO_SPOOL_SECRET set, naming another node) is that node's
    error and moves to SPOOL/<node>/bad/ with a .why. Exit codes as `sweep`."""
    from stetho.core import hostlist
    from stetho.fleet import ingest as ingest_mod
    from stetho.spool import keys
    from stetho.spool.files import check_run_id

    cfg = settings(db=db, kb_repo=kb_repo, result_spool=spool)
    if cfg.result_spool is None:
        raise ConfigError("no result spool: give SPOOL or set STETHO_RESULT_SPOOL")
    if not Path(cfg.result_spool).is_dir():
        raise ConfigError(f"result spool {cfg.result_spool}: no such folder")
    if run_filter is not None:
        check_run_id(run_filter)
    secret = keys.read_key(cfg.spool_secret, "spool secret (STETHO_SPOOL_SECRET)") \
        if cfg.spool_secret is not None else None
    progress = Progress("ingest", quiet=quiet)
    opts = ingest_mod.IngestOptions(
        spool=Path(cfg.result_spool), out=Path(out), db=None if no_history else cfg.db,
        expect=hostlist.expand(expect) if expect else None, run=run_filter,
        kb_repo=cfg.kb_repo, textfile=_textfile(textfile or cfg.textfile_dir),
        progress=progress.update, secret=secret, workers=workers,
        command=" ".join(["ingest", *sys.argv[2:]])[:400])
    stop = _StopOnSignal()
    every: list[Result] = []
    problems: list[str] = []
    files = refused = settled = 0
    with stop:
        try:
            batches = 0
            while not stop.requested():
                pending = ingest_mod.has_pending(opts.spool, opts.run)
                if pending or (opts.expect and batches == 0):
                    result = ingest_mod.ingest(opts)
                    progress.close()
                    settled += result.settled
                    opts.expect = None  # only the first batch answers for the expected nodes
                    if not result.hosts:  # only files an earlier ingest had recorded
                        continue
                    batches += 1
                    every += result.results
                    problems += result.output_problems
                    files += len(result.taken) + len(result.refused)
                    refused += len(result.refused)
                    _show(result, quiet, problems_only)
                    continue
                if not follow:
                    break
                _sleep(interval, stop.requested)
        finally:
            progress.close()
    if settled:
        click.echo(f"{settled} spool files were already in the history (an earlier ingest "
                   "stopped before moving them): moved, not recorded again")
    if stop.requested():
        click.echo("stetho: ingest stopped by a signal after its batch", err=True)
        sys.exit(unwritten(problems, 0))
    if not batches:
        click.echo(f"nothing to ingest in {opts.spool}"
                   + (f" for run {opts.run}" if opts.run else ""))
        sys.exit(0)
    click.echo(f"ingested {files} spool files"
               + (f" ({refused} refused, moved to <node>/bad/)" if refused else "")
               + f" in {batches} run{'s' if batches != 1 else ''}"
               + (f" into {opts.db}" if opts.db else " (no history)"))
    sys.exit(unwritten(problems, exit_code(every)))


def _show(result: object, quiet: bool, problems_only: bool) -> None:
    from stetho.fleet.finish import SweepResult

    assert isinstance(result, SweepResult)
    show_results(result.results, quiet=quiet, problems=problems_only)
    refused = sorted(h for h, st in result.hosts.items() if st.error)
    if refused:
        click.echo(f"{len(refused)} of {len(result.hosts)} nodes without a usable outcome "
                   f"({', '.join(refused[:8])}{' ...' if len(refused) > 8 else ''})")
    if not result.output_problems:
        click.echo(f"run folder: {result.run_dir} (run page: {result.run_dir / 'index.html'})")


def _sleep(seconds: float, stop: object) -> None:
    """Sleep `seconds`, waking early once `stop()` is true (a signal arrived)."""
    assert callable(stop)
    end = time.monotonic() + seconds
    while not stop() and time.monotonic() < end:
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))


@click.group()
def spool() -> None:
    """The result spool's keys (`stetho spool key NODE`)."""


@spool.command("key")
@click.argument("node")
def key(node: str) -> None:
    """Print NODE's spool key (hex), derived from the controller's secret
    (STETHO_SPOOL_SECRET): put it in a file only NODE can read and point STETHO_SPOOL_KEY at
    it there. A node holding its key can sign for itself only."""
    from stetho.spool import keys

    cfg = settings()
    if cfg.spool_secret is None:
        raise ConfigError("stetho spool key: no spool secret; set STETHO_SPOOL_SECRET (or "
                          "`spool_secret` in the config file) to the controller's secret file")
    secret = keys.read_key(cfg.spool_secret, "spool secret (STETHO_SPOOL_SECRET)")
    click.echo(keys.node_key(secret, node).decode())
