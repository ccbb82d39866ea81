"""A localization's outputs: what to do first, the JSON record, the markdown report, the run
page (index.html), history.

The markdown leads with the findings and the action for each, then the evidence (the tests
that convict, the tests that clear the neighbours), then what could not be resolved. JSON is
the record the rest render from; history gets the run and a fail result (check `localize`) for each
accused node, so that a pre-job gate blocks it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from stetho.core import hostlist
from stetho.localize.engine import Localization
from stetho.localize.model import FAIL, INTERMITTENT, PASS
from stetho.results import Result

SCHEMA = "stetho.localize"
SCHEMA_VERSION = 1
CHECK = "localize"


def verdict_line(loc: Localization) -> str:
    if loc.exit_code == 0:
        return f"no fault found: all {len(loc.nodes)} nodes verified healthy together"
    if loc.exit_code == 1:
        kinds = ", ".join(f"{f.kind} {f.subject}" for f in loc.findings)
        return f"{len(loc.findings)} fault(s) found: {kinds}; the rest verified healthy"
    why = loc.stopped or ("unresolved: " + hostlist.compress(loc.unresolved) if loc.unresolved
                          else "the rest of the fleet did not verify healthy")
    flaky = [t.id for t in loc.tests if t.verdict == INTERMITTENT]
    if flaky and not loc.stopped:
        why += ("; intermittent (slow on some runs, fine on others: a straggler, or worse) in "
                "test " + ", ".join(map(str, flaky)))
    found = f"; found so far: {', '.join(f.subject for f in loc.findings)}" if loc.findings \
        else ""
    return f"could not finish ({why}){found}"


def to_json(loc: Localization, meta: Mapping[str, object] | None = None) -> dict[str, object]:
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, **(meta or {}),
        "exit_code": loc.exit_code, "verdict": verdict_line(loc),
        "nodes": len(loc.nodes), "rounds": loc.rounds, "tests": len(loc.tests),
        "runs": loc.runs, "verified": loc.verified, "stopped": loc.stopped,
        "wall_s": round(loc.wall_s, 3),
        "findings": [f.as_dict() for f in loc.findings],
        "unresolved": loc.unresolved, "transient_tests": loc.transients,
        "group_tests": [t.as_dict() for t in loc.tests],
    }


def cost_line(loc: Localization, per_test_s: float | None = None) -> str:
    """What the run cost, against testing every pair."""
    cost = f"{len(loc.tests)} group tests ({loc.runs} runs) in {loc.rounds} rounds"
    if per_test_s:
        cost += f", about {loc.rounds * per_test_s / 60:.0f} min at {per_test_s / 60:g} min a round"
    n = len(loc.nodes)
    return f"{cost}; testing every pair would take {n * (n - 1) // 2}."


def markdown(loc: Localization, meta: Mapping[str, object] | None = None,
             per_test_s: float | None = None) -> str:
    meta = meta or {}
    lines = [f"# Localization: {verdict_line(loc)}", ""]
    if loc.findings:
        lines += ["## What to do first", ""]
        lines += [f"{i}. **{f.kind} {f.subject}**: {f.action}."
                  for i, f in enumerate(loc.findings, 1)]
        lines.append("")
    if loc.unresolved:
        lines += ["## Unresolved", "",
                  f"{hostlist.compress(loc.unresolved)}: their tests never decided (noise "
                  "beyond the confidence asked, or the runner failed). Rerun `stetho "
                  "localize` on them, or check them one by one.", ""]
    lines += ["## Cost", "", cost_line(loc, per_test_s), ""]
    by_id = {t.id: t for t in loc.tests}
    for f in loc.findings:
        lines += [f"## Evidence: {f.kind} {f.subject}", "", f"{f.detail}.", "",
                  "| test | verdict | score | nodes | why |", "|---|---|---|---|---|"]
        for tid in [*f.convicting, *f.clearing]:
            t = by_id[tid]
            score = ", ".join(f"{s:.2f}" for s in t.scores)
            members = hostlist.compress(list(t.nodes))
            if t.padding:
                members += f" + {hostlist.compress(list(t.padding))}"
            why = "convicts" if tid in f.convicting else "clears neighbours"
            lines.append(f"| {tid} | {t.verdict} | {score} | {members} | {why} |")
        lines.append("")
    if meta:
        lines += ["## Run", ""] + [f"- {k}: {v}" for k, v in meta.items()] + [""]
    return "\n".join(lines) + "\n"


def results(loc: Localization) -> list[Result]:
    """One result per node: accused (fail), unresolved (error) or cleared (pass)."""
    out: dict[str, Result] = {}
    for f in loc.findings:
        for node in f.nodes:
            out.setdefault(node, Result(
                node, CHECK, f"{f.kind}:{f.subject}", "fail",
                f"{f.kind} {f.subject} convicted by tests {f.convicting}", remediation=f.action))
    for node in loc.unresolved:
        out.setdefault(node, Result(node, CHECK, "group tests", "error",
                                    "group tests never decided; not localized"))
    passed = {n for t in loc.tests if t.verdict == PASS for n in (*t.nodes, *t.padding)}
    for node in loc.nodes:
        if node in out:
            continue
        status = "pass" if node in passed and loc.verified else "error"
        out[node] = Result(node, CHECK, "group tests", status,
                           "healthy in every group it was verified in" if status == "pass"
                           else "not verified (the run did not finish)")
    return [out[n] for n in loc.nodes]


def record(loc: Localization, db: Path, run_id: str, *, command: str = "",
           run_dir: str = "") -> None:
    """The run into history, kind `localize`, with a fail result for each accused node and its
    worst group score. Cleared nodes get no row: the gate reads a node's newest results, and a
    localization must never stand in for a node's checks."""
    from stetho.history.store import History, NodeRun

    worst: dict[str, float] = {}
    for t in loc.tests:
        if t.scores and t.verdict in (PASS, FAIL):
            for n in t.nodes:
                worst[n] = min(worst.get(n, 1e9), min(t.scores))
    node_runs = [NodeRun(r.node, "", [r], [[CHECK, "group tests", "worst_group_score",
                                             worst[r.node], "ratio"]] if r.node in worst else [])
                 for r in results(loc) if r.status == "fail"]
    with History(db) as history:
        history.record(run_id, "localize", node_runs, exit_code=loc.exit_code, command=command,
                       run_dir=run_dir)


def write_run(loc: Localization, run_dir: Path, meta: Mapping[str, object],
              per_test_s: float | None = None) -> None:
    """localize.json (the record), localize.md and the run page index.html."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "localize.json").write_text(json.dumps(to_json(loc, meta), indent=1) + "\n")
    (run_dir / "localize.md").write_text(markdown(loc, meta, per_test_s))
    write_page(loc, run_dir, meta, per_test_s)


def write_page(loc: Localization, run_dir: Path, meta: Mapping[str, object],
               per_test_s: float | None = None) -> Path:
    """index.html beside localize.md (stetho.localize.page), written atomically."""
    from stetho.localize import page
    from stetho.sinks import runpage

    return runpage.write(run_dir, page.render(loc, verdict_line(loc), meta,
                                              cost_line(loc, per_test_s)))
