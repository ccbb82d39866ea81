"""`stetho sweep --via slurm`'s options and lines: the CLI side of stetho.fleet.slurm_sweep.

Kept apart from `stetho sweep` (stetho/cli/sweep.py) so the Ansible path reads as before; an
option of one way in given to the other is a usage error, never silently ignored."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import click

from stetho import config
from stetho.cli.common import Progress
from stetho.results import Result

_SLURM_DEFAULTS = {"partition": None, "reservation": None, "node_stetho": None,
                   "profile_name": None, "spool_dir": None}


def slurm_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--via and the options only `--via slurm` reads."""
    opts = [
        click.option("--via", type=click.Choice(("ansible", "slurm")), default="ansible",
                     show_default=True, help="How the nodes are reached: Ansible over SSH "
                     "(the inventory), or Slurm (srun on a partition's idle nodes; they "
                     "leave their outcome in --spool, then it is ingested)."),
        click.option("--partition", help="--via slurm: the partition whose idle nodes are "
                     "checked (busy, drained and down nodes are listed, never touched)."),
        click.option("--reservation", help="--via slurm: check every node of this (maintenance)"
                     " reservation in the partition that no job holds."),
        click.option("--node-stetho", metavar="PATH", help="--via slurm: stetho on the nodes "
                     "[default: /opt/stetho/current/bin/stetho, where the Ansible install and "
                     "contrib/slurm put it]."),
        click.option("--profile", "profile_name", help="--via slurm: the nodes' profile "
                     "[default: STETHO_PROFILE, else generic]."),
        click.option("--spool", "spool_dir", type=click.Path(file_okay=False, path_type=Path),
                     help="--via slurm: the result spool the nodes write into, an absolute "
                     "path on a filesystem they share with this machine [default: "
                     "STETHO_RESULT_SPOOL]."),
    ]
    for option in reversed(opts):
        f = option(f)
    return f


def refuse_ansible_options(**given: object) -> None:
    named = {"inventory": "-i/--inventory", "limit": "--limit", "bench": "--bench",
             "forks": "--forks"}
    bad = [named[k] for k, v in given.items() if v]
    if bad:
        raise click.UsageError(f"{', '.join(bad)}: Ansible options; --via slurm takes the "
                               "partition's nodes from Slurm (see --partition, --reservation)")


def refuse_slurm_options(slurm: dict[str, Any]) -> None:
    bad = [f"--{k.replace('_dir', '').replace('_name', '').replace('_', '-')}"
           for k, v in slurm.items() if v is not None and k in _SLURM_DEFAULTS]
    if bad:
        raise click.UsageError(f"{', '.join(bad)}: only with --via slurm")


def slurm_run(cfg: config.Config, slurm: dict[str, Any], *, out: Path, timeout_s: int | None,
              db: Path | None, textfile: Path | None, progress: Progress,
              cancel: Callable[[], bool]) -> Callable[[], Any]:
    """The Slurm sweep to run, its options checked now (before any signal handler)."""
    from stetho.fleet import slurm_sweep

    if not slurm.get("partition"):
        raise click.UsageError("--via slurm needs --partition P")
    spool = slurm.get("spool_dir") or cfg.result_spool
    if spool is None:
        raise click.UsageError("--via slurm needs --spool DIR (or STETHO_RESULT_SPOOL): a "
                               "folder the nodes and this machine share")
    opts = slurm_sweep.SlurmSweepOptions(
        partition=slurm["partition"], reservation=slurm.get("reservation"), out=out,
        spool=Path(spool),
        node_stetho=slurm.get("node_stetho") or slurm_sweep.DEFAULT_NODE_STETHO,
        profile=slurm.get("profile_name") or cfg.profile, timeout_s=timeout_s, db=db,
        kb_repo=cfg.kb_repo, textfile=textfile, progress=progress.update,
        steps=progress.step, cancel=cancel)
    return partial(slurm_sweep.sweep, opts)


def not_checked_lines(results: list[Result]) -> list[str]:
    """What the Slurm sweep did not touch, one line a kind: `busy: not checked: 2 nodes
    (n03: job 17 running; n07: Slurm says COMPLETING)`."""
    groups: dict[str, list[str]] = {}
    for r in results:
        if r.check == "sweep" and r.probe == "slurm" and ": not checked: " in r.message:
            kind, why = r.message.split(": not checked: ", 1)
            groups.setdefault(kind, []).append(f"{r.node}: {why}")
    lines = []
    for kind, rows in groups.items():
        shown = "; ".join(rows[:8]) + (f"; ... {len(rows) - 8} more" if len(rows) > 8 else "")
        lines.append(f"{kind}: not checked: {len(rows)} node{'s' if len(rows) > 1 else ''} "
                     f"({shown})")
    return lines
