"""`stetho breaker status|reset`: the drain budget's circuit breaker, seen and closed by a person
who signs with their own key. A thin layer over `stetho.gate.breaker_admin`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stetho.cli.common import db_option, settings

if TYPE_CHECKING:
    from stetho.gate.budget import DrainBudget
    from stetho.gate.policy import GatePolicy

policy_option = click.option(
    "--policy", "policy_name", default="pre-job", show_default=True,
    help="Gate policy whose circuit (limit, window, ledger) and signers apply.")


def _budget(policy_name: str, db: str | None) -> tuple[GatePolicy, DrainBudget]:
    from stetho.gate import drains
    from stetho.gate import policy as policies

    cfg = settings(db=db)
    pol = policies.load(policy_name)
    return pol, drains.budget_for(pol.circuit, cfg.db)


@click.group(name="breaker")
def breaker() -> None:
    """The drain budget's circuit breaker: stetho drains at most max(min_nodes, max_pct %) of a
    cluster per window, whoever asks; past that it drains nothing more until a person resets
    it or the window ends.

    \b
    stetho breaker status [--scope CLUSTER] [--json]
    stetho breaker reset --scope CLUSTER --key ~/.ssh/id_ed25519
    """


@breaker.command(name="status")
@click.option("--scope", help="Cluster (Slurm ClusterName) [default: this Slurm's, else every "
              "scope in the ledger].")
@click.option("--json", "as_json", is_flag=True, help="JSON on stdout.")
@policy_option
@db_option
def status_cmd(scope: str | None, as_json: bool, policy_name: str, db: str | None) -> None:
    """Drains in the window, the limit, who drained, what was refused."""
    from stetho.gate import breaker_admin

    _, budget = _budget(policy_name, db)
    found = breaker_admin.statuses(budget, scope, time.time())
    if as_json:
        click.echo(json.dumps({"ledger": str(budget.path),
                               "breakers": [s.to_json() for s in found]}, indent=1))
        return
    click.echo(f"ledger {budget.path}")
    if not found:
        click.echo("no drains recorded")
    for st in found:
        for line in breaker_admin.render(st):
            click.echo(line)


@breaker.command(name="reset")
@click.option("--scope", required=True, help="The cluster whose breaker to close.")
@click.option("--key", help="Your SSH key: a private key file, or KEY.pub with its private "
              "half in ssh-agent [default: STETHO_SIGNING_KEY, else ~/.ssh/id_ed25519].")
@policy_option
@db_option
def reset_cmd(scope: str, key: str | None, policy_name: str, db: str | None) -> None:
    """Close an open breaker: the drains counted now stop counting. Signed by your key, which
    the policy's allowed signers file must list under one of its approvers."""
    from stetho.errors import ConfigError
    from stetho.gate import breaker_admin

    pol, budget = _budget(policy_name, db)
    signing = settings(db=db, signing_key=key).signing_key
    if signing is None:
        raise ConfigError("no signing key: pass --key or set STETHO_SIGNING_KEY")
    done = breaker_admin.reset(pol, budget, scope, Path(signing), time.time())
    click.echo(f"breaker {done.scope} reset by {done.principal} ({done.fingerprint}): "
               f"{len(done.forgiven)} drain(s) no longer counted"
               + (f" ({', '.join(done.forgiven)})" if done.forgiven else ""))
