"""Diagnose the nodes of a run folder and write their reports (and alerts).

Used by `stetho report`, and by the sweep and the gate after they decide. Each failing node,
each warning node where a cause was found (a "watch" report: act before it fails), and each
passing node whose history shows an error counter rising (SBE, AER: a watch report), gets a
diagnosis report, <node>-<cause>-<id>.md (with its SVG trend), in the output folder. A
report's id comes from the run, node and cause, so reporting a run twice rewrites the same
files. With a knowledge base,
earlier new events of the same node and cause are counted (repeat offenders: a re-report of
an unchanged state is not a new event) and similar incidents
elsewhere linked. A webhook alert per node goes out when one is configured, rate-limited,
never changing the run's verdict.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stetho.results import Result

if TYPE_CHECKING:  # the signals import every parser: only a run with something to diagnose
    from stetho.checking.nodes import NodeSummary
    from stetho.diagnosis.context import NodeContext
    from stetho.diagnosis.model import Diagnosis


def failing_nodes(results: Iterable[Result]) -> list[str]:
    return sorted({r.node for r in results if r.status in ("fail", "error") and r.node != "*"})


def warning_nodes(results: Iterable[Result]) -> list[str]:
    """Nodes with warnings but no failure: diagnosed, reported only when a cause is found."""
    rows = list(results)
    bad = set(failing_nodes(rows))
    return sorted({r.node for r in rows if r.status == "warn" and r.node != "*"} - bad)


def trending_nodes(run_dir: Path | None, results: Iterable[Result], history: Any, run: str,
                   skip: set[str]) -> list[str]:
    """Nodes that passed every check but whose own history shows an error counter rising
    (correctable ECC, corrected AER, IB symbol errors) or busbw declining toward its
    threshold: each gets a watch report when a cause is found. Read from their summaries,
    and from the history only for a counter that is not zero (a zero counter cannot be
    rising) or a node that measured busbw, and only its last trends.TREND_RUNS runs: a
    nightly sweep asks this of every node, and a year of each node's history read and
    verified (20-30 ms a node, most of a 10,240-node sweep's tail) told these signals
    nothing their last runs do not. A node found here is diagnosed on its whole history."""
    from stetho.diagnosis import trends

    counters = {("gpu", "ecc_correctable"), ("gpu", "remapped_rows_correctable"),
                ("kernel", "aer_corrected"),
                *(("ib", m) for m in trends.IB_ERROR_COUNTERS), ("nccl", "busbw_gbps")}
    by_node: dict[str, list[Result]] = {}
    for r in results:
        by_node.setdefault(r.node, []).append(r)
    out = []
    for node in sorted(set(by_node) - {"*"} - skip):
        path = (run_dir / "hosts" / node / "summary.json") if run_dir is not None else None
        if path is None or not path.is_file():
            continue
        summary = json.loads(path.read_text())
        if not any((c, m) in counters and v for c, _, m, v, _ in summary.get("metrics", [])):
            continue
        from stetho.diagnosis.context import NodeContext

        ctx = NodeContext(node, by_node[node], None, history, summary, run=run,
                          past_runs=trends.TREND_RUNS)
        if any(f(ctx) for f in (trends.sbe_rising, trends.aer_rising, trends.ib_errors_rising,
                                trends.busbw_declining)):
            out.append(node)
    return out


def contexts(run_dir: Path, results: list[Result], nodes: list[str], history: Any = None
             ) -> Iterator[NodeContext]:
    """Each node's context, made as it is asked for: a node's parsed evidence and facts are
    megabytes, so a run with thousands of failing nodes holds one node's at a time."""
    from stetho import profiles
    from stetho.checking import nodes as nodes_mod
    from stetho.checking.nodes import node_facts
    from stetho.diagnosis.context import NodeContext
    from stetho.errors import ConfigError
    from stetho.evidence.bundle import BundleError, load

    by_node: dict[str, list[Result]] = {}
    for r in results:
        by_node.setdefault(r.node, []).append(r)
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
        yield NodeContext(node, by_node.get(node, []), facts, history, summary)


def diagnose_results(results: list[Result], *, run_dir: Path | None, run: str,
                     out: Path, db: Path | None = None, gate: str = "",
                     nodes: list[str] | None = None, kb_repo: str | None = None,
                     alert: bool = True, blast: Mapping[str, str] | None = None
                     ) -> list[tuple[Diagnosis, Path]]:
    """Diagnose and write a report for each failing node (or the given ones). `blast`: node
    -> the running jobs its drain hits, for the report's "Blast radius" line."""
    if nodes is not None and not nodes:
        return []
    history = None
    if db is not None and db.exists():
        from stetho.history.store import History

        history = History(db)
    watch = set(warning_nodes(results)) if nodes is None else set()
    if nodes is None and history is not None:  # passing nodes whose counters are rising
        watch |= set(trending_nodes(run_dir, results, history, run,
                                    skip=set(failing_nodes(results)) | watch))
    wanted = nodes if nodes is not None else sorted(set(failing_nodes(results)) | watch)
    if not wanted:  # a healthy run has nothing to diagnose: no rules, no knowledge base read
        if history is not None:
            history.close()
        return []
    from stetho.diagnosis import engine, report

    # what the reports quote must be writable (a lone surrogate from a node's output, a value
    # nested too deep): the diagnosed nodes' results through stetho.sinks.safe
    from stetho.sinks import safe

    diagnosed = set(wanted)
    results = [safe.clean(r) if r.node in diagnosed else r for r in results]
    earlier = _kb_reports(kb_repo) if kb_repo else None
    from stetho.diagnosis.rules import load_all

    rules = load_all()  # once per run, not per node
    try:
        ctxs = contexts(run_dir or Path("/nonexistent"), results, wanted, history)
        written = []
        for ctx in ctxs:
            notes = () if run_dir is not None else (
                "Diagnosed from check results only: this run has no run folder, so no "
                "evidence bundle was read.",)
            d = engine.diagnose(ctx, run=run, gate=gate, rules=rules,
                                notes=notes if ctx.facts is None else ())
            if ctx.node in watch and d.top is None:
                continue  # warnings with no cause behind them: nothing to report
            if blast and ctx.node in blast:
                d = replace(d, extra={**d.extra, "blast_radius": blast[ctx.node]})
            path = report.write(d, out)
            if earlier is not None:
                d = _with_history(d, path, earlier, history, rules)
                path = report.write(d, out)
            written.append((d, path))
    finally:
        if history is not None:
            history.close()
    if alert:
        _alert(written)
    return written


def _kb_reports(repo: str) -> list[Any] | None:
    from stetho.errors import StethoError
    from stetho.publish import kb

    try:
        return kb.reports(repo)
    except (StethoError, OSError):
        return None


def repeat_limit() -> tuple[int, float]:
    from stetho import config

    count, days = config.active().repeat_limit.split("/")
    return int(count), float(days)


def new_events(earlier: list[Any], me: Any, passes: list[datetime]) -> list[Any]:
    """The earlier reports of one node and cause that each began a new event, newest first.
    Reports are walked oldest first; a report begins a new event when its evidence differs
    from the report before it (a counter that grew, a new Xid line: `event`), or when the node
    passed its checks in between (a failure after a pass). The last event begun is the current
    report's own, so it is not a repeat: four nightly reports of one stale DBE are one event.
    A report without an event key (written before them) counts as its own event."""
    seq = [*sorted(earlier, key=lambda r: (r.date, r.id)), me]
    starts = [seq[0]]
    for prev, cur in zip(seq, seq[1:], strict=False):
        if (not prev.event or not cur.event or prev.event != cur.event
                or any(prev.date < p < cur.date for p in passes)):
            starts.append(cur)
    return sorted(starts[:-1], key=lambda r: (r.date, r.id), reverse=True)


def _with_history(d: Diagnosis, path: Path, earlier: list[Any], history: Any = None,
                  rules: list[Any] | None = None) -> Diagnosis:
    """Earlier events of the same node and cause (repeat offenders: after COUNT new events
    in DAYS, replace the hardware; a rule's own `escalate.after` comes first, and drains a
    watch cause), and similar incidents on other nodes."""
    from dataclasses import replace
    from datetime import timedelta, timezone

    from stetho.diagnosis import engine
    from stetho.diagnosis.model import Similar
    from stetho.publish import kb

    me = kb.read_report(path)
    count, days = repeat_limit()
    rule = next((r for r in rules or () if d.top is not None and r.cause == d.top.cause), None)
    since = me.date - timedelta(days=days)
    past = [r for r in earlier if r.id != me.id and r.date <= me.date and r.run != me.run]
    same = [r for r in past if r.node == me.node and r.cause == me.cause != "undiagnosed"
            and r.date >= since]
    if rule is not None and rule.escalate_after is not None:
        count = rule.escalate_after
        # an escalation counts the same part's events only (reports naming no part: all);
        # the report names its parts for the next one (front matter `implicated`)
        mine = set(d.implicated)
        same = [r for r in same if not (r.implicated and mine) or set(r.implicated) & mine]
        d = replace(d, extra={**d.extra, "implicated": sorted(mine)})
    passes = [datetime.fromtimestamp(t, timezone.utc)
              for t in (history.clean_runs(me.node) if history is not None else [])]
    repeats = new_events(same, me, passes)
    scored = sorted(((r, kb.similarity(me, r)) for r in past if r.node != me.node),
                    key=lambda rs: (-rs[1], -rs[0].date.timestamp(), rs[0].id))

    def as_similar(r: Any, score: float) -> Similar:
        return Similar(r.id, r.date.strftime("%Y-%m-%d"), r.node, r.cause, r.repo_path,
                       round(score, 2))

    replace_hw = len(repeats) >= count and d.top is not None \
        and d.top.kind in ("hardware", "degradation")
    top = d.hypotheses
    if replace_hw and rule is not None and rule.escalate_after is not None and d.top is not None:
        top = (engine.escalated(d.top, rule, d.node), *d.hypotheses[1:])
    return replace(d, repeats=tuple(as_similar(r, 1.0) for r in repeats),
                   replace_hardware=replace_hw, hypotheses=top,
                   similar=tuple(as_similar(r, sc) for r, sc in scored[:5] if sc >= 0.6))


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
