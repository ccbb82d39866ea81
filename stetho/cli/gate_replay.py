"""`stetho gate replay`: what a candidate policy would have decided over recorded history,
against the current one, before it enforces anything."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from stetho.cli.common import db_option, settings, write

#: blocks added or removed listed in the text output per policy (--json has every one)
SHOWN = 40


@click.command("replay")
@click.option("--policy", "candidate", required=True,
              help="The candidate policy: a name on the gate search path or a YAML path (a "
              "`mode: shadow` policy is replayed like any other).")
@click.option("--against", help="The current policy to compare with (name or path): blocks "
              "the candidate adds and removes are listed.")
@click.option("--since", default="30d", show_default=True,
              help="How far back: 30d, 12w, 48h.")
@click.option("--horizon", default="48h", show_default=True,
              help="How long after a decision an outcome (incident, override, no fault "
              "found) still counts for it.")
@click.option("--kb", "kb_repo", metavar="PATH_OR_URL", help="Knowledge base whose resolved "
              "reports are the outcomes (found cause: incident; no-fault-found) [default: "
              "the config file's `kb_repo`, STETHO_KB_REPO].")
@click.option("--override-repo", help="Git repository of signed overrides: the ones valid at "
              "each decision point apply, and one honoured after a block marks it a false "
              "positive [default: STETHO_OVERRIDE_REPO].")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write every figure and every added/removed block as JSON here ('-': "
              "stdout).")
@db_option
def replay(candidate: str, against: str | None, since: str, horizon: str,
           kb_repo: str | None, override_repo: str | None, json_out: str | None,
           db: str | None) -> None:
    """Re-decide every recorded decision point (each node's row of each sweep, gate and
    check run) under the candidate policy (and --against), with the results and overrides as
    they were then. Prints node-days blocked, blocks added and removed, and precision and
    recall where outcomes are known. Exit 0 replayed, 2 bad input, 3 nothing could be
    replayed (no history in the window, or it could not be read)."""
    from stetho.errors import StethoError
    from stetho.gate import policy as policies
    from stetho.gate import replay as engine
    from stetho.gate import replay_score
    from stetho.history.store import parse_since

    cfg = settings(db=db, override_repo=override_repo)
    window = parse_since(since)
    try:
        horizon_s = parse_since(horizon)
    except StethoError as exc:
        raise click.UsageError(str(exc).replace("--since", "--horizon", 1)) from None
    loaded = [policies.load(candidate)]
    if against:
        loaded.append(policies.load(against))
        if loaded[1].name == loaded[0].name and loaded[1].source == loaded[0].source:
            raise click.UsageError("--against names the candidate itself")
    now = int(time.time())
    import os

    # nodes are independent: a long window is split over the cores (at most 8 processes)
    result = engine.run(cfg.db, loaded, now - int(window), now, cfg.override_repo,
                        workers=min(8, os.cpu_count() or 1))
    events: list[replay_score.Event] = replay_score.override_events(result)
    kb = kb_repo or cfg.kb_repo
    if kb:
        events += replay_score.kb_events(str(kb))
    doc = replay_score.score(result, against=1 if against else None,
                             horizon_s=horizon_s, events=events,
                             outcome_sources={"knowledge_base": bool(kb),
                                              "overrides": bool(cfg.override_repo)})
    if json_out:
        write(json_out, json.dumps(doc, indent=1) + "\n")
    if json_out != "-":
        for line in render(doc):
            click.echo(line)
    for problem in result.problems:
        click.echo(f"stetho: warning: {problem}", err=True)
    if not result.points:
        click.echo(f"stetho: nothing to replay: no verified decision point in {cfg.db} "
                   f"since {doc['since']}", err=True)
        sys.exit(3)


def render(doc: dict[str, Any]) -> list[str]:
    """The replay in lines a person reads (the JSON has the same figures)."""
    ex = doc["excluded"]
    out = [f"replay {doc['since']} .. {doc['until']}: {doc['decision_points']} decision "
           f"points on {doc['nodes']} nodes; horizon {doc['horizon_s'] / 3600:g}h"]
    if ex["total"]:
        parts = [f"{sum(ex[k].values())} {label}" for k, label in (
            ("failed_integrity", "failed their integrity check"),
            ("unsigned", "unsigned (before signing)"), ("unreadable", "unreadable"))
            if ex[k]]
        nodes = sorted({n for k in ("failed_integrity", "unsigned", "unreadable")
                        for n in ex[k]})
        out.append(f"EXCLUDED {ex['total']} rows, never judged: {', '.join(parts)} "
                   f"(nodes: {', '.join(nodes[:10])}{' ...' if len(nodes) > 10 else ''})")
    src = doc["outcome_sources"]
    known = [k.replace("_", " ") for k, v in src.items() if v]
    for p in doc["policies"]:
        pts, o = p["decision_points"], p["outcomes"]
        out.append(f"policy {p['policy']} ({p['role']}, {p['source']}): "
                   f"{p['node_days_blocked']} node-days blocked; {pts['block']} blocks, "
                   f"{pts['go']} go, {pts['unevaluated']} could not evaluate")
        if "against" in p:
            out.append(f"  versus {p['against']}: {len(p['added'])} blocks added, "
                       f"{len(p['removed'])} removed")
            for tag, rows, key in (("ADDED", p["added"], "was"),
                                   ("REMOVED", p["removed"], "now")):
                for r in rows[:SHOWN]:
                    out.append(f"  {tag} {r['node']} {r['time']} {','.join(r['checks'])} "
                               f"({p['against'] if tag == 'ADDED' else p['policy']}: "
                               f"{r[key]})")
                if len(rows) > SHOWN:
                    out.append(f"  ... and {len(rows) - SHOWN} more {tag.lower()} (--json "
                               "lists all)")
        sources = ", ".join(known) or "no outcome source: give --kb and/or --override-repo"
        out.append(f"  outcomes ({sources}): TP {o['true_positive']}, FP {o['false_positive']}, "
                   f"miss {o['miss']}, unknown {o['unknown_blocks']} blocks; precision "
                   f"{_ratio(o['precision'], o['true_positive'], o['false_positive'])}, recall "
                   f"{_ratio(o['recall'], o['true_positive'], o['miss'])}")
    out.append("counted per decision point (a node's row of one run): TP a block followed "
               "within the horizon by an incident (kb report resolved with a found cause); "
               "FP a block followed by an honoured override of its check or a no-fault-found; "
               "miss a GO followed by an incident; unknown outcomes are never counted correct")
    return out


def _ratio(value: float | None, hits: int, other: int) -> str:
    if value is None:
        return "n/a (nothing known)"
    return f"{value:.2f} ({hits}/{hits + other})"
