"""`stetho gate --policy release --canaries HOSTLIST --controls HOSTLIST`: the options and the
printing of the canaries-against-controls release gate (stetho.gate.release.run)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from stetho.cli.common import Progress, write

_OPTIONS = [
    click.option("--canaries", help="Release gate: the canary nodes (the new image, driver or "
                 "NCCL), a Slurm hostlist. With --controls, judges canaries against controls."),
    click.option("--controls", help="Release gate: the control nodes (the current release), "
                 "a Slurm hostlist, measured in the same window."),
    click.option("--reservation-minutes", type=click.IntRange(1, 7 * 24 * 60), default=60,
                 show_default=True, help="How long the Slurm reservation stetho creates for "
                 "the canaries and controls lasts at most (it is removed when the run ends)."),
    click.option("--repeats", type=click.IntRange(2, 1000), default=3, show_default=True,
                 help="Runs of each benchmark per group (the median decides; their spread is "
                 "the noise)."),
    click.option("--stage", help="The rollout stage these canaries are (a name under the "
                 "policy's stages:); the gate says which stage may proceed."),
    click.option("--runner", type=click.Choice(["srun", "mpirun"]), default="srun",
                 show_default=True, help="How the all-reduce runs (srun inside the "
                 "reservation)."),
    click.option("--command", "bench_command", default=None,
                 help="The nccl-tests command each group runs [default: all_reduce_perf "
                 "-b 1G -e 1G -f 2 -g 1 -c 1 -n 20]."),
    click.option("--gpus-per-node", type=click.IntRange(1, 64), default=8, show_default=True,
                 help="Tasks per node for the all-reduce (one per GPU)."),
]


def release_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(_OPTIONS):
        fn = opt(fn)
    return fn


def run_release(policy: str, nodes: str | None, local: bool, inventory: str | None,
                profile: str | None, json_out: str | None, junit: str | None,
                job: str | None, quiet: bool, opts: dict[str, Any], db: Path) -> NoReturn:
    """Run the release gate and exit: 0 GO, 1 blocked, 3 could not evaluate. The verdict
    is kept in the history `db` (`stetho history decisions`)."""
    from stetho.gate.release import run as release
    from stetho.localize.runners import DEFAULT_NCCL

    if nodes or local:
        raise click.UsageError("--canaries/--controls replace --nodes and --local")
    if not (opts.get("canaries") and opts.get("controls")):
        raise click.UsageError("the release gate needs both --canaries and --controls")
    progress = Progress("gate: release", quiet=quiet)
    try:
        outcome = release.run(release.ReleaseRequest(
            policy=policy, canaries=opts["canaries"], controls=opts["controls"],
            inventory=Path(inventory) if inventory else None, topology=opts["topology"],
            runner=opts["runner"], command=opts["bench_command"] or DEFAULT_NCCL,
            gpus_per_node=opts["gpus_per_node"], repeats=opts["repeats"],
            minutes=opts["reservation_minutes"], stage=opts["stage"], profile=profile),
            progress=progress.step)
    finally:
        progress.close()
    import time

    from stetho.gate.release.ledger import keep
    from stetho.history.store import new_run_id

    kept = keep(db, new_run_id(), outcome, time.time(), f"gate --policy {policy} --canaries "
                f"{opts['canaries']} --controls {opts['controls']}")
    if kept:
        outcome.problems.append(kept)
    if not quiet:
        for line in outcome.lines():
            click.echo(line)
    elif outcome.stage:
        click.echo(outcome.stage)
    for problem in outcome.problems:
        click.echo(f"stetho: warning: {problem}", err=True)
    if junit:
        from stetho.sinks import junit as junit_sink

        write(junit, junit_sink.render(outcome.results()))
    if json_out:
        write(json_out, json.dumps(outcome.to_json(job), indent=1) + "\n")
    click.echo(outcome.summary())
    sys.exit(outcome.exit_code)
