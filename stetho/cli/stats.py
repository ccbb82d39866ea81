"""`stetho stats`: the fleet's reliability figures (stetho.reliability), as a table, JSON
or Prometheus text. Exits 3, after printing, when a source failed to load: the figures that
rest on it are shown as unknown."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from stetho.cli.common import db_option, settings
from stetho.errors import ConfigError


def _duration(flag: str, text: str) -> float:
    from stetho.history.store import parse_since

    try:
        s = parse_since(text)
    except ConfigError:
        raise ConfigError(f"{flag} {text!r}: expected a duration like 30d, 12h, 30m, 2w"
                          ) from None
    if s <= 0:
        raise ConfigError(f"{flag} {text!r}: must be longer than 0")
    return s


def _lemon(text: str) -> tuple[int, float]:
    k, _, w = text.partition("/")
    if not k.strip().isdigit() or int(k) < 1 or not w:
        raise ConfigError(f"--lemon {text!r}: expected K/WINDOW, e.g. 3/30d (at least K "
                          "incidents within WINDOW)")
    return int(k), _duration("--lemon", w) / 86400


@click.command("stats")
@click.option("--since", default="90d", show_default=True, help="The window: 90d, 12w, 24h.")
@click.option("--by", type=click.Choice(["cause", "node", "switch"]), default="cause",
              show_default=True, help="Group incidents by cause, node or leaf switch.")
@click.option("--lemon", default="3/30d", show_default=True,
              help="A lemon node has at least K incidents within WINDOW (K/WINDOW).")
@click.option("--gpus-per-job", type=click.IntRange(min=1), default=512, show_default=True,
              help="The job size the ETTR is given for.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True,
              help="GPUs a node: for MTBF per 1,000 GPUs and the ETTR's node count.")
@click.option("--checkpoint", default="30m", show_default=True,
              help="The job's checkpoint interval (ETTR).")
@click.option("--restart", default="10m", show_default=True,
              help="The job's restart overhead after a failure (ETTR).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@db_option
@click.option("--ledger", type=click.Path(dir_okay=False, path_type=Path),
              help="The drain ledger [default: STETHO_DRAIN_LEDGER, else drain-ledger.db "
              "beside the history database].")
@click.option("--topology", type=click.Path(dir_okay=False, path_type=Path),
              help="Slurm topology.conf: leaf switches for --by switch.")
@click.option("--kb", "kb_repo", metavar="PATH_OR_URL",
              help="Knowledge base [default: STETHO_KB_REPO]: report times, no-fault-found.")
@click.option("--override-repo", metavar="PATH_OR_URL",
              help="Override repository [default: STETHO_OVERRIDE_REPO]: overridden blocks.")
@click.option("--slurm", is_flag=True,
              help="Also read Slurm's own drain/resume stamps: the nodes drained now "
              "(sinfo -R) and past node events (sacctmgr, where slurmdbd runs). Slurm not "
              "reachable: exit 3.")
@click.option("--textfile", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the figures as Prometheus text for node_exporter's textfile "
              "collector (stetho_mtbf_seconds, stetho_incidents{cause=}, ...), atomically.")
def stats(since: str, by: str, lemon: str, gpus_per_job: int,
          gpus_per_node: int, checkpoint: str, restart: str, as_json: bool, db: str | None,
          ledger: Path | None, topology: Path | None, kb_repo: str | None,
          override_repo: str | None, textfile: Path | None, slurm: bool) -> None:
    """Incidents per cause, MTBF, MTTR, time to detect and to localize, false positives,
    lemon nodes and a job's expected ETTR, from the history, the drain ledger (and with
    --slurm, Slurm's drain/resume stamps), the knowledge base and the overrides. An
    incident opens at a node's failing run after a non-failing
    one and closes at its next passing run; its cause is the checks failing when it opened.

    \b
    stetho stats --since 90d
    stetho stats --by switch --topology /etc/slurm/topology.conf
    stetho stats --slurm   # drains an operator made by hand with scontrol too
    stetho stats --gpus-per-job 1024 --checkpoint 1h --json
    """
    from stetho import config
    from stetho.reliability import figures, gather, render

    window = _duration("--since", since)
    k, days = _lemon(lemon)
    params = figures.Params(lemon_k=k, lemon_days=days, gpus_per_job=gpus_per_job,
                            gpus_per_node=gpus_per_node,
                            checkpoint_s=_duration("--checkpoint", checkpoint),
                            restart_s=_duration("--restart", restart), by=by)
    cfg = settings(db=db, kb_repo=kb_repo, override_repo=override_repo)
    ledger_path = ledger or cfg.drain_ledger or cfg.db.parent / "drain-ledger.db"
    got = gather.stats(cfg.db, window, params, ledger=ledger_path,
                       ledger_given=ledger is not None or cfg.drain_ledger is not None,
                       kb=cfg.kb_repo, override_repo=cfg.override_repo, topology=topology,
                       slurm_env=config.child_environment() if slurm else None)
    if textfile is not None:
        from stetho.sinks import prometheus

        prometheus.write(textfile, render.prometheus(got))
    click.echo(json.dumps(got, indent=1) if as_json else render.table(got), nl=as_json)
    if any(s["error"] for s in got["sources"].values()):
        sys.exit(3)  # printed, but a figure is unknown: could not evaluate in full
