"""`stetho remedy RUN_DIR`: what stetho would do by itself about each diagnosed node (reset an
idle GPU, reboot through Slurm behind the drain budget, send a ticket), and with --act, do it."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stetho.cli.common import db_option, settings, write

if TYPE_CHECKING:
    from stetho.evidence.runner import Environment
    from stetho.remedy.budget import Budget
    from stetho.remedy.outcome import Outcome


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--node", "nodes", multiple=True, help="Only these nodes (default: every "
              "failing or warning node of the run).")
@click.option("--act", is_flag=True, help="Carry the actions out and record them in the "
              "history; without it, a dry run that says what would run and what the drain "
              "budget allows.")
@click.option("--webhook", "ticket_url", help="Ticket webhook (JSON POST) [default: "
              "STETHO_TICKET_URL, the config file's `ticket_url`].")
@click.option("--sim", "sim_root", type=click.Path(exists=True, file_okay=False),
              help="A simulated cluster (`stetho sim build DIR`): GPU resets run against "
              "DIR/<node>'s tools.")
@click.option("--local", is_flag=True, help="This is the node: GPU resets of the node named "
              "as this host run here, with its own nvidia-smi.")
@click.option("--policy", "policy_name", help="Gate policy whose circuit (limit, window, "
              "ledger) sizes the drain budget reboots ask [default: the built-in circuit].")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the outcomes as JSON here.")
@db_option
def remedy(run_dir: str, nodes: tuple[str, ...], act: bool, ticket_url: str | None,
           sim_root: str | None, local: bool, policy_name: str | None, json_out: str | None,
           db: str | None) -> None:
    """Remediate a run's diagnosed nodes, per cause as the rules declare (dry run by default).

    Exit 0 when every action ran or was allowed, 1 when one failed, 3 when the drain budget
    refused one (the breaker is open) or one could not be decided.
    """
    from stetho.core import hostlist
    from stetho.diagnosis.rules import load_all
    from stetho.history.store import History
    from stetho.remedy import plan, run, source

    cfg = settings(db=db)
    for n in nodes:
        hostlist.validate(n)
    rules = load_all()
    history = History(cfg.db)
    try:
        found = source.diagnose_run(Path(run_dir), rules, list(nodes) or None, history)
        by_cause = {r.cause: r for r in rules}
        import time

        now = time.time()
        steps = [s for d, facts, seen in found
                 for s in plan.plan(d, by_cause, history, now=now, facts=facts, seen=seen)]
        ex = run.Executors(env_for=_env_for(sim_root, local), slurm=_slurm(act),
                           budget=_budget(policy_name, cfg.db),
                           ticket_url=ticket_url or cfg.ticket_url)
        outcomes = run.execute(steps, ex, act=act, history=history,
                               run=found[0][0].run if found else "", now=now)
    finally:
        history.close()
    for line in render(outcomes, act):
        click.echo(line)
    if json_out:
        write(json_out, json.dumps({"act": act, "outcomes": [o.to_json() for o in outcomes]},
                                   indent=2) + "\n")
    sys.exit(exit_code(outcomes))


def render(outcomes: list[Outcome], act: bool) -> list[str]:
    """One line per step, its why, then the summary: what would run and what the budget
    allows ("would reboot 3, the drain budget allows 2")."""
    lines = []
    for o in outcomes:
        s = o.step
        lines.append(f"{s.node}: {s.cause} [{s.part}] -> {s.action}: {o.outcome}: {o.detail}")
        if s.action != "none":
            lines.append(f"  why: {s.why}")
        if s.earlier:
            lines.append("  earlier on this fault: " + "; ".join(
                f"{r.action} {r.outcome} {_iso(r.time)}" for r in s.earlier))
    if not outcomes:
        return ["no diagnosed node in this run: nothing to remediate"]
    boots = [o for o in outcomes if o.step.action == "reboot"]
    counts = {a: sum(1 for o in outcomes if o.step.action == a)
              for a in ("gpu-reset", "reboot", "ticket")}
    head = ", ".join(f"{n} {a}" for a, n in counts.items() if n) or "nothing automatic"
    text = f"{'done' if act else 'dry run'}: {head}"
    if boots:
        allowed = sum(1 for o in boots if o.outcome in ("done", "planned", "skipped"))
        text += (f"; {'reboots' if act else 'would reboot'} {len(boots)}, the drain budget "
                 f"allows {allowed}")
    if not act:
        text += "; nothing changed (--act carries it out)"
    return [*lines, text]


def _iso(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def exit_code(outcomes: list[Outcome]) -> int:
    if any(o.outcome == "failed" for o in outcomes):
        return 1
    if any(o.outcome == "refused" and o.step.action == "reboot" for o in outcomes):
        return 3
    return 0


def _env_for(sim_root: str | None, local: bool):  # type: ignore[no-untyped-def]
    from stetho.evidence.collect import sim_environment
    from stetho.evidence.runner import Environment

    me = socket.gethostname().split(".")[0]

    def env_for(node: str) -> Environment | None:
        if sim_root is not None:
            folder = Path(sim_root) / node
            return sim_environment(str(folder))[0] if (folder / "bin").is_dir() else None
        return Environment.configured() if local and node == me else None

    return env_for


def _slurm(act: bool):  # type: ignore[no-untyped-def]
    from stetho import config
    from stetho.remedy.reboot import Rebooter

    if shutil.which("scontrol", path=config.child_environment(None).get("PATH")) is None:
        return None
    return Rebooter(act=act)


def _budget(policy_name: str | None, db: Path) -> Budget:
    """The drain budget of the policy's circuit (its ledger: STETHO_DRAIN_LEDGER, the
    policy's `ledger:`, else beside the history database): the one every drain asks."""
    from stetho.gate import drains
    from stetho.gate.breaker import Circuit

    circuit = Circuit()
    if policy_name:
        from stetho.gate import policy

        circuit = policy.load(policy_name).circuit
    return drains.budget_for(circuit, db)
