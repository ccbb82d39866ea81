"""`stetho kb`: publish diagnosis reports to the knowledge base repository, and search it.

A thin click layer over stetho.publish.kb; errors are StethoError/ConfigError, which the main
CLI maps to exit codes 3 and 2. `--repo` defaults to the configured knowledge base
(STETHO_KB_REPO, or `kb_repo` in the config file) so nodes and on-call laptops are set up once.
"""

from __future__ import annotations

import json
from datetime import timezone
from pathlib import Path

import click

from stetho.cli.common import settings
from stetho.errors import ConfigError
from stetho.publish import kb as kblib

_REPO_HELP = ("Knowledge base: a working clone's path, or a git URL / bare repository "
              "(used through a cached clone) [default: STETHO_KB_REPO, the config file's "
              "`kb_repo`].")


@click.group("kb")
def kb() -> None:
    """The knowledge base: diagnosis reports committed to a git repository, searchable.

    \b
    stetho kb publish --repo URL runs/x/          spool the reports under runs/x, publish
    stetho kb search "xid 79"                     reports mentioning Xid 79
    stetho kb search --similar NODE-CAUSE-ID.md   earlier incidents like this one
    stetho kb resolve REPORT --found CAUSE        what the technician actually found
    stetho kb accuracy --since 180d               how often each rule was right
    """


@kb.command("publish")
@click.option("--repo", metavar="PATH_OR_URL", help=_REPO_HELP)
@click.option("--spool", "spool_path", type=click.Path(file_okay=False, path_type=Path),
              help="Spool directory [default: STETHO_SPOOL, else "
              "~/.local/share/stetho/kb-spool].")
@click.option("-m", "--message", help="Commit subject [default: kb: publish N reports (...)].")
@click.argument("reports", nargs=-1, type=click.Path(exists=True, path_type=Path),
                metavar="[REPORT_OR_DIR]...")
def publish_cmd(repo: str | None, spool_path: Path | None, message: str | None,
                reports: tuple[Path, ...]) -> None:
    """Spool REPORTs (a directory: every report under it) and publish the whole spool.

    Reports are copied into the spool first and leave it only once pushed, so a failed
    publish loses nothing: the next one (with or without new reports) takes them along. A
    report that cannot be published (not a report, a symbolic link, an asset that is one) is
    refused by name and the others still publish; the command then exits 2.
    """
    cfg = settings(kb_repo=repo, spool=spool_path)
    repo = _repo(cfg.kb_repo)
    root = cfg.spool
    refused: list[tuple[str, str]] = []
    if reports:
        found, bad = kblib.collect_reports(reports)
        spooled, bad_spool = kblib.spool_each(found, root)
        refused += [(str(path), why) for path, why in bad + bad_spool]
        click.echo(f"spooled {_n(len(spooled))} in {root}")
    result = kblib.publish(repo, spool=root, message=message)
    refused += list(result.refused.items())
    if not result.published and not result.already and not refused:
        click.echo(f"nothing to publish: the spool {root} is empty")
        return
    if result.published:
        commit = (result.commit or "")[:12]
        click.echo(f"published {_n(len(result.published))} to {repo} in commit {commit}:")
        for rid in result.published:
            click.echo(f"  {result.paths.get(rid, rid)}")
    if result.already:
        click.echo(f"already in the knowledge base, not added again: {_n(len(result.already))}")
        for rid in result.already:
            click.echo(f"  {result.paths.get(rid, rid)}")
    if refused:
        others = " (the others were published)" if result.published or result.already else ""
        raise ConfigError(f"refused {_n(len(refused))}{others}:\n"
                          + "\n".join(f"  {why}" if why.startswith(path) else f"  {path}: {why}"
                                      for path, why in refused))


def _repo(repo: str | None) -> str:
    if not repo:
        raise ConfigError("no knowledge base: pass --repo PATH_OR_URL, set STETHO_KB_REPO, or "
                          "set kb_repo in ~/.config/stetho/stetho.toml")
    return repo


def _n(count: int) -> str:
    return f"{count} report{'s' if count != 1 else ''}"


@kb.command("search")
@click.argument("query", required=False)
@click.option("--similar", "similar_to", type=click.Path(exists=True, dir_okay=False,
                                                         path_type=Path),
              help="Instead of a query: earlier incidents like this report, best first.")
@click.option("--repo", metavar="PATH_OR_URL", help=_REPO_HELP)
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="At most this many results [default: 5 with --similar, all otherwise].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def search_cmd(query: str | None, similar_to: Path | None, repo: str | None,
               limit: int | None, as_json: bool) -> None:
    """Reports matching every word of QUERY (id, node, cause, signature, checks, text), newest
    first; or, with --similar, earlier incidents ranked by cause, signature and node."""
    if (query is None) == (similar_to is None):
        raise ConfigError("kb search takes a QUERY or --similar REPORT (one of them)")
    repo = _repo(settings(kb_repo=repo).kb_repo)
    if similar_to is not None:
        ranked = kblib.similar(repo, similar_to, limit=limit or 5)
        if as_json:
            click.echo(json.dumps([{**r.to_dict(), "score": round(s, 4)} for r, s in ranked],
                                  indent=2))
            return
        if not ranked:
            click.echo(f"no earlier incidents like {similar_to} in {repo}")
        _table([(r, s) for r, s in ranked])
        return
    assert query is not None
    found = kblib.search(repo, query)[:limit]
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in found], indent=2))
        return
    if not found:
        click.echo(f"no reports match {query!r} in {repo}")
    _table([(r, None) for r in found])


def _table(rows: list[tuple[kblib.ReportMeta, float | None]]) -> None:
    if not rows:
        return
    scored = rows[0][1] is not None
    head = (["score"] if scored else []) + ["date", "node", "cause", "status", "id"]
    body = [([f"{s:.2f}"] if s is not None else [])
            + [f"{r.date.astimezone(timezone.utc):%Y-%m-%d %H:%M}", r.node, r.cause, r.status,
               r.id] for r, s in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    for line in [head, *body]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                   .rstrip())


def _register() -> None:
    """`kb resolve` and `kb accuracy` live in stetho.cli.kb_loop (closing the loop)."""
    from stetho.cli.kb_loop import accuracy_cmd, resolve_cmd

    kb.add_command(resolve_cmd)
    kb.add_command(accuracy_cmd)


_register()
