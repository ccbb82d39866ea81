"""Diagnose the failing nodes of a run folder and write their reports (and alerts).

Used by `stetho report`, and by the sweep and the gate after they decide. Each failing node
gets a diagnosis-report.md (with its SVG trend) in the output folder; a webhook alert per node
goes out when one is configured, rate-limited, never changing the run's verdict.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stetho.checking.nodes import NodeSummary
from stetho.diagnosis.model import Diagnosis
from stetho.diagnosis.signals import NodeContext
from stetho.results import Result


def failing_nodes(results: Iterable[Result]) -> list[str]:
    return sorted({r.node for r in results if r.status in ("fail", "error") and r.node != "*"})


def contexts(run_dir: Path, results: list[Result], nodes: list[str], history: Any = None
             ) -> list[NodeContext]:
    from stetho import profiles
    from stetho.checking import nodes as nodes_mod
    from stetho.checking.nodes import node_facts
    from stetho.errors import ConfigError
    from stetho.evidence.bundle import BundleError, load

    by_node: dict[str, list[Result]] = {}
    for r in results:
        by_node.setdefault(r.node, []).append(r)
    out = []
    for node in nodes:
        host = run_dir / "hosts" / node
        facts = None
        summary: NodeSummary | dict[str, Any] = {}
        if (host / "summary.json").is_file():
            summary = json.loads((host / "summary.json").read_text())
        if (host / "evidence.json").is_file():
            try:
                bundle = load(host / "evidence.json")
                prof = profiles.load(bundle.profile)
                facts = node_facts(bundle, prof)
                if not summary:
                    summary = nodes_mod.summary(facts, prof)
            except (BundleError, ConfigError):
                facts = None
        out.append(NodeContext(node, by_node.get(node, []), facts, history, summary))
    return out


def diagnose_results(results: list[Result], *, run_dir: Path | None, run: str,
                     out: Path, db: Path | None = None, gate: str = "",
                     nodes: list[str] | None = None, kb_repo: str | None = None,
                     alert: bool = True) -> list[tuple[Diagnosis, Path]]:
    """Diagnose and write a report for each failing node (or the given ones)."""
    from stetho.diagnosis import engine, report

    history = None
    if db is not None and db.exists():
        from stetho.history.store import History

        history = History(db)
    try:
        ctxs = contexts(run_dir or Path("/nonexistent"), results,
                        nodes if nodes is not None else failing_nodes(results), history)
        written = []
        for ctx in ctxs:
            d = engine.diagnose(ctx, run=run, gate=gate)
            path = report.write(d, out)
            if kb_repo:
                d = _with_similar(d, path, kb_repo)
                path = report.write(d, out)
            written.append((d, path))
    finally:
        if history is not None:
            history.close()
    if alert:
        _alert(written)
    return written


def _with_similar(d: Diagnosis, path: Path, repo: str) -> Diagnosis:
    """Earlier incidents from the knowledge base that look like this one."""
    from dataclasses import replace

    from stetho.diagnosis.model import Similar
    from stetho.errors import StethoError
    from stetho.publish import kb

    try:
        found = kb.similar(repo, path, limit=5)
    except (StethoError, OSError):
        return d
    return replace(d, similar=tuple(
        Similar(m.id, m.date.strftime("%Y-%m-%d"), m.node, m.cause, m.repo_path, round(sc, 2))
        for m, sc in found))


def _alert(written: list[tuple[Diagnosis, Path]]) -> None:
    from stetho.publish import notify

    url = notify.webhook_url()
    if not url or not written:
        return
    alerts = [notify.Alert(node=d.node, cause=d.cause,
                           title=d.top.title if d.top else "undiagnosed failure",
                           summary=d.phenomenon[:500],
                           severity="critical" if d.verdict == "fail" else "warning",
                           report=str(path), run=d.run) for d, path in written]
    notify.notify_all(alerts, url=url)
