"""`stetho impact PART`: the running jobs a node, switch or port would take down."""

from __future__ import annotations

import json

import click


@click.command()
@click.argument("part")
@click.option("--topology", "topology_spec", metavar="FILE|slurm",
              help="The fabric's tree, to name switches: a topology.conf FILE, or `slurm` "
              "(scontrol show topology). Without it, PART is a node or a hostlist.")
@click.option("--profile", "profile_name", help="Node profile whose GPU count stands for "
              "jobs Slurm gives no GPU count for (no GPU GRES) [default: STETHO_PROFILE].")
@click.option("--json", "as_json", is_flag=True, help="Print the blast radius as JSON.")
def impact(part: str, topology_spec: str | None, profile_name: str | None,
           as_json: bool) -> None:
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

    cfg = settings()
    env = config.child_environment()
    topo = parts.load_topology(topology_spec, slurm_topology_text)
    where = parts.resolve(part, topo, lambda: _known(env, part))
    node_gpus = _profile_gpus(profile_name or cfg.profile, where.nodes)
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


def _profile_gpus(name: str | None, nodes: tuple[str, ...]) -> dict[str, int]:
    """Every node's GPU count from the profile (none given, or it names no count: {})."""
    if not name:
        return {}
    from stetho import profiles

    count = profiles.load(name).gpu.count
    return {n: count for n in nodes} if count else {}
