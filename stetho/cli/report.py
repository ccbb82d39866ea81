"""`stetho report RUN_DIR`: diagnose a run's failing nodes and write their reports."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stetho.cli.common import db_option, settings
from stetho.errors import ConfigError

if TYPE_CHECKING:
    from stetho.diagnosis.model import Diagnosis
    from stetho.results import Result


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--node", "nodes", multiple=True, help="Only these nodes (default: every "
              "failing node of the run).")
@click.option("--out", type=click.Path(file_okay=False), help="Where to write the reports "
              "[default: RUN_DIR/reports].")
@db_option
@click.option("--kb", "kb_repo", help="Knowledge-base repository, to link similar earlier "
              "reports [default: STETHO_KB_REPO, the config file's `kb_repo`].")
@click.option("--alert/--no-alert", default=False, show_default=True,
              help="Also send the webhook alerts (STETHO_WEBHOOK_URL).")
@click.option("--replay", "replay_json", type=click.Path(exists=True, dir_okay=False),
              help="A `stetho gate replay --json` file: the run page gets a section with its "
              "figures and the blocks added and removed.")
def report(run_dir: str, nodes: tuple[str, ...], out: str | None, db: str | None,
           kb_repo: str | None, alert: bool, replay_json: str | None) -> None:
    """Diagnose a run's failing nodes: ranked root causes and a diagnosis report each
    (reports/<node>-<cause>-<id>.md)."""
    import json

    from stetho.core import hostlist
    from stetho.diagnosis import runs
    from stetho.sinks.json_out import load

    cfg = settings(db=db, kb_repo=kb_repo)
    folder = Path(run_dir)
    results_file = folder / "results.json"
    if not results_file.is_file():
        raise ConfigError(f"{run_dir} is not a run folder (no results.json); run folders come "
                          "from `stetho sweep`")
    results = load(results_file.read_text())
    meta = json.loads((folder / "meta.json").read_text()) if (folder / "meta.json").is_file() \
        else {}
    for n in nodes:
        hostlist.validate(n)
    replay = _replay(Path(replay_json)) if replay_json else None
    written = runs.diagnose_results(
        results, run_dir=folder, run=meta.get("run_id", folder.name),
        out=Path(out) if out else folder / "reports", db=cfg.db,
        nodes=list(nodes) or None, kb_repo=cfg.kb_repo, alert=alert)
    for d, path in written:
        top = f"{d.top.title} (score {d.top.score:g})" if d.top else "undiagnosed"
        click.echo(f"{d.node}: {top} [{d.disposition}] -> {path}")
        for note in d.notes:
            click.echo(f"  note: {note}", err=True)
    if not written:
        click.echo("no failing node in this run: nothing to diagnose")
    page = _run_page(folder, results, written, meta, cfg.kb_repo, cfg.db, replay)
    click.echo(f"run page: {page}")


def _replay(path: Path) -> dict[str, Any]:
    """The replay section's view of a `gate replay --json` file; exit 2 naming it if not."""
    import json

    from stetho.sinks import replay_page

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc}); give the file `stetho gate "
                          "replay --json FILE` wrote") from None
    return replay_page.view(doc, str(path))


def _run_page(folder: Path, results: list[Result], written: list[tuple[Diagnosis, Path]],
              meta: dict[str, Any], kb_repo: str | None, db: Path,
              replay: dict[str, Any] | None = None) -> Path:
    """RUN_DIR/index.html: the grid, the reports linked, the busbw chart and, with a
    knowledge base, how often each rule was right on resolved reports (`kb accuracy`)."""
    from stetho.cli.kb_loop import accuracy_or_why
    from stetho.sinks import runpage

    linked = _reports_in(folder, {r.node for r in results})
    linked.update({d.node: path for d, path in written})
    links = runpage.relative_reports(linked, folder)
    page = runpage.render(results, title=f"run {meta.get('run_id', folder.name)}",
                          reports=links, busbw=runpage.busbw_from(results),
                          accuracy=accuracy_or_why(kb_repo),
                          reliability=_reliability(db, kb_repo), replay=replay)
    return runpage.write(folder, page)


def _reliability(db: Path, kb_repo: str | None) -> dict[str, Any] | None:
    """The fleet's figures over the last 90 days (`stetho stats`' defaults) for the page,
    where a history database is configured; why not, where they could not be computed."""
    from stetho import config
    from stetho.errors import StethoError
    from stetho.reliability import figures, gather, render

    if not db.exists():
        return None
    cfg = config.active()
    try:
        got = gather.stats(db, 90 * 86400, figures.Params(), kb=kb_repo,
                           ledger=cfg.drain_ledger or db.parent / "drain-ledger.db",
                           ledger_given=cfg.drain_ledger is not None,
                           override_repo=cfg.override_repo, topology=None)
    except StethoError as exc:
        return {"error": str(exc)}
    return {"error": None, "header": render.header(got), "lines": render.lines(got)}


def _reports_in(folder: Path, nodes: set[str]) -> dict[str, Path]:
    """The reports already in RUN_DIR/reports, by the node their front matter names (the
    newest per node), so a `report --node N` or `--out ELSEWHERE` does not drop the other
    nodes' links from the page. A file that is not a report, or names a node this run did not
    check, is not linked."""
    from stetho.publish.reports import collect_reports, read_report

    found: dict[str, tuple[float, Path]] = {}
    if not (folder / "reports").is_dir():
        return {}
    kept, _refused = collect_reports([folder / "reports"])
    for path in kept:
        try:
            meta = read_report(path)
        except ConfigError:
            continue
        when = meta.date.timestamp()
        if meta.node in nodes and (meta.node not in found or when >= found[meta.node][0]):
            found[meta.node] = (when, path)
    return {node: path for node, (_, path) in found.items()}
