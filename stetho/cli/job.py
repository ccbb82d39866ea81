"""`stetho job JOBID`: from a Slurm job to the hardware that touched it, in one screen.

The job's nodes and window come from sacct (or scontrol where accounting is off); the
history, the drain ledger and Slurm's current drain reasons say what happened to those nodes
in the window; a topology.conf adds their leaf switches and failures elsewhere under them;
a step-time CSV (with the job's NCCL log) adds the slow ranks. Exit 0: no finding on a
complete window; 1: a hardware finding; 2: usage (an unknown job, a bad file); 3: could not
tell (no record, nodes without history, rows failing their integrity check, Slurm
unreachable).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stetho.cli.common import db_option, settings
from stetho.errors import ConfigError

if TYPE_CHECKING:
    from stetho.jobs.timeline import Drain


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None


def _drains(nodes: list[str], since: float, until: float, db: Path, now: float
            ) -> tuple[list[Drain], list[str]]:
    """Drains of the job's nodes: Slurm's current ones (with their reasons) and the drain
    ledger's in the window. What cannot be read is a note on the screen, not a silent gap."""
    from stetho.gate.breaker import Circuit
    from stetho.gate.budget import DrainBudget, LedgerError, ledger_path
    from stetho.gate.slurm import Slurm, SlurmError
    from stetho.jobs.timeline import Drain

    out: list[Drain] = []
    notes: list[str] = []
    try:
        for info in Slurm(act=False).show(nodes).values():
            if info.drained:
                out.append(Drain(info.name, info.reason_time, info.reason, "slurm"))
    except SlurmError as exc:
        notes.append(f"Slurm's drain state of the nodes could not be read: {exc}")
    circuit = Circuit(window_s=max(1.0, now - since))
    wanted = set(nodes)
    budget = DrainBudget(ledger_path(circuit, db), circuit)
    try:
        for scope in budget.scopes():
            for e in budget.status(scope, now=now).entries:
                if e.node in wanted and e.kind in ("grant", "released", "repeat") \
                        and e.at <= until:
                    out.append(Drain(e.node, e.at, e.reason, "ledger"))
    except LedgerError as exc:
        notes.append(f"the drain ledger could not be read: {exc}")
    return out, notes


@click.command()
@click.argument("job_id", metavar="JOBID")
@db_option
@click.option("--topology", metavar="FILE|slurm",
              help="The fabric's tree: a Slurm topology.conf FILE, or `slurm` (scontrol show "
              "topology): the job's leaf switches, and failures of other nodes under them.")
@click.option("--margin", default="1h", show_default=True,
              help="History read from this long before the job started (30m, 1h, 1d).")
@click.option("--steps", type=click.Path(dir_okay=False),
              help="CSV rank,step,seconds of the job's step times: the slow ranks.")
@click.option("--nccl-log", type=click.Path(dir_okay=False),
              help="The job's NCCL_DEBUG=INFO log: maps --steps ranks to hosts and GPUs.")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout instead of the screen.")
def job(job_id: str, db: str | None, topology: str | None, margin: str, steps: str | None,
        nccl_log: str | None, as_json: bool) -> None:
    """What hardware touched job JOBID: failing checks, drains, reports, drift and shared
    leaf switches on its nodes, from its start (less --margin) to its end (or now)."""
    import json

    from stetho import config
    from stetho.history.store import History, parse_since
    from stetho.jobs import parts, sacct, screen, stragglers, timeline
    from stetho.localize.setup import slurm_topology_text

    cfg = settings(db=db)
    try:
        margin_s = parse_since(margin)
    except ConfigError:
        raise ConfigError(f"--margin {margin!r}: expected a duration like 30m, 1h, 1d"
                          ) from None
    if nccl_log and not steps:
        raise ConfigError("--nccl-log maps the ranks of --steps to hosts: give --steps too")
    # one reader for every command's --topology (impact and the gate take the same forms)
    topo = parts.load_topology(topology, slurm_topology_text)
    per_rank = stragglers.parse_steps(_read(steps, "--steps"), steps) if steps else None
    places = (stragglers.parse_nccl_ranks(_read(nccl_log, "--nccl-log"), nccl_log)
              if nccl_log else None)
    found = sacct.lookup(job_id, config.child_environment())
    if not found.nodes or found.start is None:
        raise ConfigError(f"job {found.id} is {found.state or 'not started'}: it has no nodes "
                          "or start time yet, so there is no window to look at")
    now = time.time()
    since, until = found.start - margin_s, min(found.end or now, now)
    if topo is not None:
        unplaced = [n for n in found.nodes if n not in topo.paths]
        if unplaced:
            raise ConfigError(f"--topology {topology} places no switch over "
                              f"{', '.join(unplaced[:8])}: add them to a SwitchName=... Nodes= "
                              "line, or leave --topology out")
    ranks = None
    note = ""
    if per_rank is not None:
        try:
            ranks, job_median = stragglers.find(per_rank, places)
            note = (f"{len(per_rank)} ranks, job median step {job_median:.3f} s"
                    + ("" if places else "; no --nccl-log: ranks not mapped to hosts"))
        except ValueError as exc:
            note = f"not judged: {exc}"
    if not cfg.db.exists():
        raise ConfigError(f"no history database at {cfg.db} (run `stetho sweep` or "
                          "`stetho check` first, or pass --db)")
    drains, notes = _drains(list(found.nodes), since, until, cfg.db, now)
    with History(cfg.db) as h:
        tl = timeline.build(h, found.nodes, since, until, drains=drains, topology=topo)
    tl.notes += notes
    v = screen.verdict(found, tl)
    if as_json:
        click.echo(json.dumps({"verdict": v.headline, "exit_code": v.code,
                               "job": found.to_json(), "timeline": tl.to_json(),
                               "stragglers": None if ranks is None else
                               [s.to_json() for s in ranks], "stragglers_note": note},
                              indent=1))
    else:
        click.echo(screen.render(found, tl, v, ranks, note), nl=False)
    sys.exit(v.code)
