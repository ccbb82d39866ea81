"""`stetho override ...`: request, approve, list and revoke two-person gate overrides.

A thin click layer over `stetho.gate.overrides`; errors are raised as StethoError subclasses and
mapped to exit codes by `stetho.cli.main`. The override repository comes from --repo or
$STETHO_OVERRIDE_REPO, the signing key from $STETHO_OVERRIDE_KEY.
"""

from __future__ import annotations

import getpass
import importlib
import json
from collections.abc import Callable
from typing import Any

import click

from stetho.cli.common import settings
from stetho.core import hostlist
from stetho.errors import ConfigError, StethoError
from stetho.gate.override_store import OverrideStore
from stetho.gate.overrides import (
    Override,
    OverrideFileError,
    OverridePolicy,
    approve,
    approve_message,
    key_from_env,
    request,
    request_message,
    revoke,
    revoke_message,
    state,
)

#: How a policy name becomes an OverridePolicy. Tests (and embedders) set this; when None the
#: gate policy loader `stetho.gate.policy.load_override_policy` is used.
POLICY_LOADER: Callable[[str], OverridePolicy] | None = None

#: States `list` shows without --all: the ones someone may need to act on.
CURRENT_STATES = ("pending", "active", "approved", "invalid")


def load_policy(name: str) -> OverridePolicy:
    """Resolve a policy name (or path) through POLICY_LOADER, else the gate policy module,
    imported only now so this command works before that module exists."""
    loader = POLICY_LOADER
    if loader is None:
        try:
            module = importlib.import_module("stetho.gate.policy")
        except ImportError as exc:
            raise ConfigError(f"cannot load gate policy {name!r}: gate policies are not "
                              f"available ({exc})") from None
        found = getattr(module, "load_override_policy", None)
        if not callable(found):
            raise ConfigError(f"cannot load gate policy {name!r}: stetho.gate.policy has no "
                              "load_override_policy")
        loader = found
    policy = loader(name)
    if not isinstance(policy, OverridePolicy):
        raise ConfigError(f"gate policy {name!r} did not give override settings")
    return policy


def _who(given: str | None, option: str) -> str:
    """An explicit name, else $STETHO_USER, else the login name."""
    if given:
        return given
    from stetho import config

    env = config.active().user
    if env:
        return env
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        raise ConfigError(f"cannot tell who you are: pass {option} or set STETHO_USER") from None


def _store(repo: str | None, branch: str | None) -> OverrideStore:
    repo = settings(override_repo=repo).override_repo
    if not repo:
        raise ConfigError("no override repository: pass --repo PATH_OR_URL or set "
                          "STETHO_OVERRIDE_REPO")
    return OverrideStore(repo, branch=branch)


def _duration(text: str) -> float:
    from stetho.history.store import parse_since

    try:
        return parse_since(text)
    except ConfigError:
        raise ConfigError(f"--expires {text!r}: expected a duration like 24h, 90m, 7d, 2w") \
            from None


def _nodes(o: Override) -> str:
    return hostlist.compress(list(o.nodes))


repo_option = click.option(
    "--repo", help="The override git repository: a working clone path or a URL "
    "[default: STETHO_OVERRIDE_REPO, the config file's `override_repo`].")
branch_option = click.option(
    "--branch", help="Branch of the override repository [default: the clone's current branch].")


@click.group(name="override")
def override() -> None:
    """Two-person overrides: let a failing gate check pass on named nodes, for a while.

    \b
    stetho override request --policy release --check nccl_busbw --nodes 'gpu[07-08]' \\
        --reason "known slow link, RMA open" --expires 24h
    stetho override approve ovr-... --approver bob --acknowledge "<the policy's sentence>"
    stetho override list
    stetho override revoke ovr-...
    """
    settings()  # the environment as it is now: signing key, identity, repository


@override.command(name="request")
@click.option("--policy", "policy_name", required=True, help="Gate policy name or path.")
@click.option("--check", required=True, help="The check to let pass, e.g. nccl_busbw.")
@click.option("--nodes", "nodes_expr", required=True,
              help="Exact nodes, as a Slurm hostlist: 'gpu[07-08],gpu11'.")
@click.option("--reason", required=True, help="Why; kept in the override and in git history.")
@click.option("--expires", required=True,
              help="How long it lasts: 90m, 24h, 7d, 2w (at most the policy's cap).")
@click.option("--requester", help="Who asks [default: $STETHO_USER or the login name].")
@repo_option
@branch_option
def request_cmd(policy_name: str, check: str, nodes_expr: str, reason: str, expires: str,
                requester: str | None, repo: str | None, branch: str | None) -> None:
    """Request an override; prints its id. A second person must approve it."""
    expires_s = _duration(expires)
    nodes = hostlist.expand(nodes_expr)
    if not nodes:
        raise ConfigError(f"--nodes {nodes_expr!r} names no node")
    store = _store(repo, branch)
    policy = load_policy(policy_name)
    o = request(policy, check, nodes, reason, _who(requester, "--requester"), expires_s)
    store.save(o, request_message(o))
    click.echo(o.id)
    click.echo(f"requested {o.check} on {_nodes(o)} under policy {o.policy} until "
               f"{o.expires_at}; approvers: {', '.join(policy.approvers) or 'none'}", err=True)


@override.command(name="approve")
@click.argument("override_id", metavar="ID")
@click.option("--approver", help="Who approves [default: $STETHO_USER or the login name].")
@click.option("--acknowledge", "acknowledgement", required=True,
              help="The policy's acknowledgement sentence, exactly.")
@repo_option
@branch_option
def approve_cmd(override_id: str, approver: str | None, acknowledgement: str,
                repo: str | None, branch: str | None) -> None:
    """Approve (and sign) someone else's override request."""
    key = key_from_env()
    if key is None:
        raise ConfigError("STETHO_OVERRIDE_KEY is not set: an approval must be signed with "
                          "the gate's key")
    who = _who(approver, "--approver")
    store = _store(repo, branch)

    def change(cur: Override) -> Override:
        return approve(cur, load_policy(cur.policy), who, acknowledgement, key)

    o = store.update(override_id, change, approve_message)
    click.echo(f"approved {o.id}: {o.check} on {_nodes(o)} under policy {o.policy}, requested "
               f"by {o.requester}, until {o.expires_at} (reason: {o.reason})")


@override.command(name="revoke")
@click.argument("override_id", metavar="ID")
@click.option("--by", "who", help="Who revokes [default: $STETHO_USER or the login name].")
@repo_option
@branch_option
def revoke_cmd(override_id: str, who: str | None, repo: str | None,
               branch: str | None) -> None:
    """Revoke an override (pending or approved); the gate stops honouring it at once."""
    by = _who(who, "--by")
    store = _store(repo, branch)
    o = store.update(override_id, lambda cur: revoke(cur, by), revoke_message)
    click.echo(f"revoked {o.id}: {o.check} on {_nodes(o)} (by {o.revoked_by} at "
               f"{o.revoked_at})")


@override.command(name="list")
@click.option("--all", "show_all", is_flag=True,
              help="Also expired and revoked overrides (default: pending, active, invalid).")
@click.option("--json", "as_json", is_flag=True, help="JSON, one object per override file.")
@repo_option
@branch_option
def list_cmd(show_all: bool, as_json: bool, repo: str | None, branch: str | None) -> None:
    """List overrides and their state: pending, active, expired, revoked or invalid: why."""
    store = _store(repo, branch)
    key = key_from_env()
    policies: dict[str, OverridePolicy | str] = {}
    rows: list[dict[str, Any]] = []
    for path, item in store.load_all():
        if isinstance(item, OverrideFileError):
            rows.append({"id": path.stem, "file": f"{store.DIR}/{path.name}",
                         "state": f"invalid: {item}"})
            continue
        if item.policy not in policies:
            try:
                policies[item.policy] = load_policy(item.policy)
            except StethoError as exc:
                policies[item.policy] = str(exc)
        pol = policies[item.policy]
        st = state(item, pol if isinstance(pol, OverridePolicy) else None, key)
        if isinstance(pol, str) and st.startswith("invalid"):
            st = f"invalid: {pol}"
        rows.append({**item.to_dict(), "file": f"{store.DIR}/{path.name}", "state": st})
    if not show_all:
        rows = [r for r in rows if str(r["state"]).startswith(CURRENT_STATES)]
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    if not rows:
        click.echo("no overrides" if show_all else "no current overrides (--all for every one)")
        return
    header = ("ID", "POLICY", "CHECK", "NODES", "REQUESTER", "APPROVER", "EXPIRES", "STATE")
    table = [header]
    for r in rows:
        nodes = hostlist.compress(list(r["nodes"])) if "nodes" in r else "-"
        table.append((r["id"], r.get("policy", "-"), r.get("check", "-"), nodes,
                      r.get("requester", "-"), r.get("approver") or "-",
                      r.get("expires_at", "-"), r["state"]))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header) - 1)]
    for row in table:
        cells = [str(c).ljust(w) for c, w in zip(row[:-1], widths, strict=True)]
        click.echo("  ".join([*cells, str(row[-1])]))
