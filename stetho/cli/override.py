"""`stetho override ...`: request, approve, list and revoke two-person gate overrides, each
signed with the person's own SSH key.

A thin click layer over `stetho.gate.override_actions`; errors are raised as StethoError
subclasses and mapped to exit codes by `stetho.cli`. The override repository comes from --repo
or $STETHO_OVERRIDE_REPO, the key from --key, $STETHO_SIGNING_KEY or ~/.ssh/id_ed25519.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from stetho.cli.common import settings
from stetho.core import hostlist
from stetho.errors import ConfigError
from stetho.gate import override_actions as actions
from stetho.gate.override_actions import Done
from stetho.gate.override_store import OverrideStore

#: States `list` shows without --all: the ones someone may need to act on.
CURRENT_STATES = ("pending", "active", "invalid")


def _store(repo: str | None, branch: str | None) -> OverrideStore:
    repo = settings(override_repo=repo).override_repo
    if not repo:
        raise ConfigError("no override repository: pass --repo PATH_OR_URL or set "
                          "STETHO_OVERRIDE_REPO")
    return OverrideStore(repo, branch=branch)


def _key(given: str | None) -> Path:
    key = settings(signing_key=given).signing_key
    if key is None:
        raise ConfigError("no signing key: pass --key or set STETHO_SIGNING_KEY")
    return key


def _duration(text: str) -> float:
    from stetho.history.store import parse_since

    try:
        return parse_since(text)
    except ConfigError:
        raise ConfigError(f"--expires {text!r}: expected a duration like 24h, 90m, 7d, 2w") \
            from None


def _note_typed_name(done: Done) -> None:
    """STETHO_USER is a name for printing, never an identity: say so when it disagrees."""
    from stetho import config

    typed = config.active().user
    if typed and typed.casefold() not in {done.principal.casefold()}:
        click.echo(f"note: STETHO_USER={typed} is not who signed: the key's principal is "
                   f"{done.principal}", err=True)


repo_option = click.option(
    "--repo", help="The override git repository: a working clone path or a URL "
    "[default: STETHO_OVERRIDE_REPO, the config file's `override_repo`].")
branch_option = click.option(
    "--branch", help="Branch of the override repository [default: the clone's current branch].")
key_option = click.option(
    "--key", help="Your SSH key: a private key file, or KEY.pub with its private half in "
    "ssh-agent [default: STETHO_SIGNING_KEY, else ~/.ssh/id_ed25519].")


@click.group(name="override")
def override() -> None:
    """Two-person overrides: let a failing gate check pass on named nodes, for a while.

    Each person signs with their own SSH key; the gate verifies both signatures against the
    policy's allowed signers file.

    \b
    stetho override request --policy release --check nccl_busbw --nodes 'gpu[07-08]' \\
        --reason "known slow link, RMA open" --expires 24h --key ~/.ssh/id_ed25519
    stetho override approve ovr-... --key ~/.ssh/id_ed25519 --acknowledge "<the sentence>"
    stetho override list
    stetho override revoke ovr-... --key ~/.ssh/id_ed25519 --reason "RMA done"
    """
    settings()  # the environment as it is now: key, repository


@override.command(name="request")
@click.option("--policy", "policy_name", required=True, help="Gate policy name or path.")
@click.option("--check", required=True, help="The check to let pass, e.g. nccl_busbw.")
@click.option("--nodes", "nodes_expr", required=True,
              help="Exact nodes, as a Slurm hostlist: 'gpu[07-08],gpu11'.")
@click.option("--reason", required=True, help="Why; kept in the override and in git history.")
@click.option("--expires", required=True,
              help="How long it lasts: 90m, 24h, 7d, 2w (at most the policy's cap).")
@key_option
@click.option("--requester", help="Refuse unless your key signs as this principal (a check "
              "only: the key decides who you are).")
@repo_option
@branch_option
def request_cmd(policy_name: str, check: str, nodes_expr: str, reason: str, expires: str,
                key: str | None, requester: str | None, repo: str | None,
                branch: str | None) -> None:
    """Request an override; prints its id. A second person must approve it."""
    expires_s = _duration(expires)
    nodes = hostlist.expand(nodes_expr)
    if not nodes:
        raise ConfigError(f"--nodes {nodes_expr!r} names no node")
    store = _store(repo, branch)
    done = actions.request_override(store, policy_name, check, nodes, reason, expires_s,
                                    _key(key), requester)
    o = done.override
    click.echo(o.id)
    policy = actions.load_policy(o.policy)
    click.echo(f"requested by {done.principal}: {o.check} on {hostlist.compress(list(o.nodes))}"
               f" under policy {o.policy} until {o.expires_at}; approvers: "
               f"{', '.join(policy.principals) or 'none'}", err=True)
    _note_typed_name(done)


@override.command(name="approve")
@click.argument("override_id", metavar="ID")
@click.option("--acknowledge", "acknowledgement", required=True,
              help="The policy's acknowledgement sentence, exactly.")
@key_option
@click.option("--approver", help="Refuse unless your key signs as this principal (a check "
              "only: the key decides who you are).")
@repo_option
@branch_option
def approve_cmd(override_id: str, acknowledgement: str, key: str | None, approver: str | None,
                repo: str | None, branch: str | None) -> None:
    """Approve (sign) someone else's override request."""
    store = _store(repo, branch)
    done = actions.approve_override(store, override_id, acknowledgement, _key(key), approver)
    o = done.override
    click.echo(f"approved {o.id} as {done.principal}: {o.check} on "
               f"{hostlist.compress(list(o.nodes))} under policy {o.policy}, requested by "
               f"{done.check.requester}, until {o.expires_at} (reason: {o.reason})")
    _note_typed_name(done)


@override.command(name="revoke")
@click.argument("override_id", metavar="ID")
@click.option("--reason", required=True, help="Why; kept in the signed revocation.")
@key_option
@click.option("--by", "who", help="Refuse unless your key signs as this principal (a check "
              "only: the key decides who you are).")
@repo_option
@branch_option
def revoke_cmd(override_id: str, reason: str, key: str | None, who: str | None,
               repo: str | None, branch: str | None) -> None:
    """Revoke an override (pending or approved), for good: the gate stops honouring it."""
    store = _store(repo, branch)
    done = actions.revoke_override(store, override_id, reason, _key(key), who)
    o = done.override
    click.echo(f"{done.check.reason}: {o.id}, {o.check} on {hostlist.compress(list(o.nodes))}")
    _note_typed_name(done)


@override.command(name="list")
@click.option("--all", "show_all", is_flag=True,
              help="Also expired and revoked overrides (default: pending, active, invalid).")
@click.option("--json", "as_json", is_flag=True, help="JSON, one object per override file.")
@repo_option
@branch_option
def list_cmd(show_all: bool, as_json: bool, repo: str | None, branch: str | None) -> None:
    """List overrides and their state: pending, active, expired, revoked or invalid: why.
    Requester and approver are the principals OpenSSH verified, never typed names."""
    rows = actions.list_overrides(_store(repo, branch))
    if not show_all:
        rows = [r for r in rows if r["state"] in CURRENT_STATES]
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    if not rows:
        click.echo("no overrides" if show_all else "no current overrides (--all for every one)")
        return
    header = ("ID", "POLICY", "CHECK", "NODES", "REQUESTER", "APPROVER", "EXPIRES", "STATE")
    table: list[tuple[str, ...]] = [header]
    for r in rows:
        nodes = r.get("nodes")
        state = str(r["state"]) + (f": {r['reason']}" if r["state"] == "invalid" else "")
        table.append((str(r["id"]), str(r.get("policy", "-")), str(r.get("check", "-")),
                      hostlist.compress([str(n) for n in nodes]) if isinstance(nodes, list)
                      else "-", str(r.get("requester") or "-"), str(r.get("approver") or "-"),
                      str(r.get("expires_at", "-")), state))
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    for row in table:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        click.echo("  ".join([*cells, row[-1]]))
