"""`stetho impact PART`: the running jobs a node, switch or port would take down."""

from __future__ import annotations

import json
from pathlib import Path

import click

from stetho.cli.common import db_option
from stetho.errors import ConfigError


@click.command()
@click.argument("part")
@click.option("--topology", "topology_spec", metavar="FILE|slurm",
              help="The fabric's tree, to name switches: a topology.conf FILE, or `slurm` "
              "(scontrol show topology). Without it, PART is a node or a hostlist.")
@click.option("--profile", "profile_name", help="Node profile whose GPU count stands for "
              "jobs Slurm gives no GPU count for (no GPU GRES) [default: each node's profile "
              "as history pins it, else STETHO_PROFILE].")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the blast radius as JSON.")
def impact(part: str, topology_spec: str | None, profile_name: str | None,
           db: str | None, as_json: bool) -> None:
    """The blast radius of PART: its nodes, the running jobs on them (user, partition, nodes
    in the job and affected, GPUs affected) and the totals.

    \b
    PART is a node (gpu042), a hostlist (gpu[041-044]), a switch of --topology (leafA), a
    node's port (gpu042:mlx5_0/1: that node) or a switch's port (leafA:17: every node under
    leafA, since topology.conf does not map ports). Exit 2 for an unknown part, 3 when squeue
    cannot answer (the blast radius is then unknown, never "no jobs").
    """
    from stetho import config
    from stetho.cli.common import settings
    from stetho.jobs import blast, parts, squeue
    from stetho.localize.setup import slurm_topology_text

    cfg = settings(db=db)
    env = config.child_environment()
    topo = parts.load_topology(topology_spec, slurm_topology_text)
    where = parts.resolve(part, topo, lambda: _known(env, part))
    node_gpus = _profile_gpus(where.nodes, profile_name, cfg.db, cfg.profile)
    try:
        jobs = squeue.running(env)
    except squeue.SqueueError as exc:
        raise squeue.SqueueError(f"could not evaluate the blast radius of {part}: {exc}"
                                 ) from None
    result = blast.of(where, jobs, node_gpus)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=1))
    else:
        click.echo(blast.render(result), nl=False)


def _known(env: dict[str, str], part: str) -> set[str]:
    from stetho.jobs import squeue

    try:
        return squeue.known_nodes(env)
    except squeue.SqueueError as exc:
        raise squeue.SqueueError(f"could not evaluate the blast radius of {part}: cannot "
                                 f"tell whether it is a node ({exc})") from None


def _profile_gpus(nodes: tuple[str, ...], flag: str | None, db: Path, default: str | None
                  ) -> dict[str, int]:
    """Each node's GPU count from its profile: --profile for all; else the one history pins
    it to; else STETHO_PROFILE. A node with none (or a profile with no count) is left out:
    its GPUs are unknown."""
    from stetho import profiles

    counts: dict[str, int | None] = {}

    def count(name: str) -> int | None:
        if name not in counts:
            counts[name] = profiles.load(name).gpu.count
        return counts[name]

    if flag:
        return {n: c for n in nodes if (c := count(flag))}
    chosen = {n: default for n in nodes if default}
    chosen.update(_pinned(list(nodes), db))
    out = {}
    for n, name in chosen.items():
        try:
            c = count(name)
        except ConfigError:  # a pinned profile since removed: unknown, not a usage error
            continue
        if c:
            out[n] = c
    return out


def _pinned(nodes: list[str], db: Path) -> dict[str, str]:
    """node -> the profile history last recorded it with ({} without a readable history)."""
    import sqlite3

    from stetho.history.store import History, HistoryError
    from stetho.profiles import DEFAULT_PROFILE

    if not db.exists():
        return {}
    try:
        with History(db) as h:
            # the seal's pins (a row edited or deleted cannot move them), as the gate reads
            pins = h.pinned_profiles(nodes, frozenset({DEFAULT_PROFILE}))
    except (HistoryError, sqlite3.Error, OSError) as exc:
        click.echo(f"stetho: warning: no node profiles from {db} ({exc}); GPU counts "
                   "only from Slurm or --profile", err=True)
        return {}
    return {n: profile for n, (profile, _, why) in pins.items() if why is None}
