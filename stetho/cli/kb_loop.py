"""`stetho kb resolve` and `stetho kb accuracy`: what the technician found, and how often the
rules were right (stetho.publish.resolve, stetho.publish.accuracy). Registered on the `kb`
group by stetho.cli.kb."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from stetho.cli.common import settings
from stetho.errors import ConfigError

_REPO_HELP = ("Knowledge base: a working clone's path, or a git URL / bare repository "
              "[default: STETHO_KB_REPO, the config file's `kb_repo`].")


def _repo(repo: str | None) -> str:
    if not repo:
        raise ConfigError("no knowledge base: pass --repo PATH_OR_URL, set STETHO_KB_REPO, or "
                          "set kb_repo in ~/.config/stetho/stetho.toml")
    return repo


def known_causes() -> list[str]:
    """The rule catalogue's cause ids (shipped rules and the site's STETHO_RULES)."""
    from stetho.diagnosis.rules import causes

    return causes()


@click.command("resolve")
@click.argument("report", required=False, metavar="[REPORT]")
@click.option("--found", metavar="CAUSE", help="What the technician found: a cause id of the "
              "rule catalogue (rules/<cause>.yml), or no-fault-found.")
@click.option("--part", "parts", multiple=True, metavar="PART",
              help="A part replaced (a serial, a slot, 'HCA mlx5_3'); repeat for several.")
@click.option("--note", default="", help="Free text: what was seen and done.")
@click.option("--from-git", "from_git", is_flag=True,
              help="Instead of REPORT: apply the signed resolution commits (Stetho-Resolve / "
              "Stetho-Found trailers) in the knowledge base's history not applied yet.")
@click.option("--signers", type=click.Path(dir_okay=False, path_type=Path),
              help="With --from-git: the OpenSSH allowed signers file of the people trusted "
              "to resolve reports.")
@click.option("--repo", metavar="PATH_OR_URL", help=_REPO_HELP)
def resolve_cmd(report: str | None, found: str | None, parts: tuple[str, ...], note: str,
                from_git: bool, signers: Path | None, repo: str | None) -> None:
    """Record what the technician found for REPORT (its id, its path in the knowledge base,
    or a copy of the report file); the diagnosed cause stays beside it. Committed and pushed
    like every knowledge-base write.

    \b
    stetho kb resolve rpt-20261202T101500Z-node07-1a2b3c --found riser-pcie-slot --part GPU3
    stetho kb resolve --from-git --signers gates/allowed_signers
    """
    from stetho.publish import kb as kblib
    from stetho.publish import resolve as rs

    repo = _repo(settings(kb_repo=repo).kb_repo)
    if from_git:
        if report or found or parts or note:
            raise ConfigError("kb resolve --from-git reads REPORT, --found, --part and --note "
                              "from the signed commits' trailers: give none of them")
        if signers is None:
            raise ConfigError("kb resolve --from-git needs --signers ALLOWED_SIGNERS: only "
                              "commits signed by a key listed there are applied")
        _from_git(repo, signers)
        return
    if signers is not None:
        raise ConfigError("--signers goes with --from-git")
    if not report or not found:
        raise ConfigError("kb resolve takes REPORT and --found CAUSE (or --from-git)")
    rs.check_found(found, known_causes())  # before touching any repository
    ref = report
    if Path(report).is_file():  # a copy of the report: its id names it in the knowledge base
        ref = kblib.read_report(report).id
    meta, commit = rs.resolve(repo, ref, found, known=known_causes(),
                              now=datetime.now(timezone.utc), parts=parts, note=note)
    verdict = ("the diagnosis was right" if found == meta.cause
               else f"the diagnosis ({meta.cause}) was not what was found")
    click.echo(f"resolved {meta.id} ({meta.node}): diagnosed {meta.cause}, found {found}: "
               f"{verdict}" + (f"; commit {commit[:12]}" if commit else ""))


def _from_git(repo: str, signers: Path) -> None:
    from stetho.publish import resolve as rs

    result = rs.from_git(repo, signers, known=known_causes())
    for sha, rid, found, who in result.applied:
        click.echo(f"applied {sha[:12]}: {rid} found {found} (signed by {who})")
    if result.commit:
        click.echo(f"committed {result.commit[:12]} to {repo}")
    for sha, rid in result.superseded:
        click.echo(f"superseded {sha[:12]}: {rid} was resolved again after it; not applied")
    if result.refused:
        raise ConfigError(f"refused {len(result.refused)} resolution commit"
                          f"{'s' if len(result.refused) != 1 else ''} (not applied; a later "
                          "resolution of those reports settles them):\n"
                          + "\n".join(f"  {why}" for _, why in result.refused))
    if not result.applied and not result.superseded:
        click.echo(f"no signed resolution commits to apply in {repo}")


def accuracy_data(repo: str, since: str) -> dict[str, Any]:
    """The rule accuracy figures of the knowledge base over the last `since` (a duration)."""
    from stetho.publish import accuracy

    return accuracy.of_repo(repo, since, known_causes())


@click.command("accuracy")
@click.option("--since", default="180d", show_default=True,
              help="Reports dated within this long: 180d, 12w, 24h.")
@click.option("--repo", metavar="PATH_OR_URL", help=_REPO_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@click.option("--textfile", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write them as Prometheus metrics for node_exporter's textfile "
              "collector (stetho_kb_rule_precision{rule=...}, ...), atomically.")
def accuracy_cmd(since: str, repo: str | None, as_json: bool, textfile: Path | None) -> None:
    """Per rule, precision and recall against the resolved reports, the confusion pairs
    (diagnosed X, found Y) and the no-fault-found rate. With no resolved report it says so
    and shows no figure."""
    from stetho.publish.accuracy import summary
    from stetho.sinks import prometheus

    repo = _repo(settings(kb_repo=repo).kb_repo)
    acc = accuracy_data(repo, since)
    if textfile is not None:
        prometheus.write(textfile, prometheus.render_accuracy(acc))
    if as_json:
        click.echo(json.dumps(acc, indent=2))
        return
    click.echo(summary(acc))
    if not acc["resolved"]:
        return
    rows = [r for r in acc["rules"] if r["diagnosed"] or r["found"]]
    head = ["rule", "diagnosed", "found", "confirmed", "precision", "recall", "no-fault"]
    body = [[r["rule"], str(r["diagnosed"]), str(r["found"]), str(r["correct"]),
             _pct(r["precision"]), _pct(r["recall"]), str(r["no_fault_found"])] for r in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    click.echo("")
    for line in [head, *body]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    unmeasured = [r["rule"] for r in acc["rules"] if not (r["diagnosed"] or r["found"])]
    if unmeasured:
        click.echo(f"\nnot measured (no resolved report): {', '.join(unmeasured)}")
    if acc["confusion"]:
        click.echo("\nconfusion (diagnosed -> found):")
        for c in acc["confusion"]:
            click.echo(f"  {c['diagnosed']} -> {c['found']}: {c['count']}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def accuracy_or_why(repo: str | None, since: str = "180d") -> dict[str, Any] | None:
    """For the run page: stetho.publish.accuracy.of_repo_or_why."""
    from stetho.publish import accuracy

    return accuracy.of_repo_or_why(repo, since, known_causes() if repo else ())
