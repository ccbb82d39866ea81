"""After a check or sweep: drift against the node's history, then the run into the history.

Shared by `stetho check` and `stetho sweep`. The history database is a sink: if it cannot be
opened or written, the run's verdict stands and a warning says history was not recorded.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from stetho.checking.nodes import NodeSummary
from stetho.results import Result


def after_run(kind: str, run_id: str, results: list[Result],
              summaries: Mapping[str, NodeSummary], db: Path, *, record: bool = True,
              when: float | None = None, command: str = "", run_dir: str = "",
              warn: Callable[[str], None] | None = None,
              max_evidence_age_s: float | None = None,
              then: Callable[[sqlite3.Connection], None] | None = None) -> list[Result]:
    """Drift results for every summarised node (added to the run), then record the run.
    Returns the drift results. `then` runs inside the recording's transaction (the ingest's
    ledger): it lands with the run's rows or not at all.

    History keeps this controller's receive time; a bundle's own `collected_at` is evidence,
    not authority: a node whose bundle is dated more than FUTURE_TOLERANCE_S ahead of now, or
    older than `max_evidence_age_s`, is not recorded (its verdict stands), and `warn` names
    the node, the bundle's time and now."""
    from stetho import profiles
    from stetho.errors import ConfigError
    from stetho.history import drift
    from stetho.history.backend import open_history
    from stetho.history.store import HistoryCorrupt, HistoryError, NodeRun, describe

    say = warn or (lambda m: print(f"stetho: warning: {m}", file=sys.stderr))
    now = when if when is not None else time.time()
    refused = {}
    for node, summary in sorted(summaries.items()):
        why = evidence_time_problem(node, summary.get("collected_at"), now, max_evidence_age_s)
        if why:
            refused[node] = why
            say(f"history did not record {why}")
    try:
        history = open_history(db)
    except (HistoryError, sqlite3.Error, OSError) as exc:
        say(f"history unavailable, this run was not recorded ({db}): {exc}")
        return []
    added: list[Result] = []
    try:
        for node, summary in sorted(summaries.items()):
            if node in refused:
                continue
            try:
                prof = profiles.load(summary.get("profile") or profiles.DEFAULT_PROFILE)
            except ConfigError:
                continue
            try:
                added += drift.evaluate(history, node, prof, summary.get("metrics", []),
                                        now=now)
            except HistoryCorrupt as exc:  # this node's history was tampered with: its error
                added.append(Result(node, "drift_shift", "history", "error", str(exc),
                                    probe="history", remediation=(
                                        "find who could write the history database and what "
                                        "they changed; drift cannot be judged until then")))
        if record:
            by_node: dict[str, list[Result]] = {}
            for r in (*results, *added):
                by_node.setdefault(r.node, []).append(r)
            names = [n for n in sorted(by_node) if n != "*" and n not in refused]
            # each node's NodeRun made as record() asks for it: its blob is built and let go
            # a chunk at a time, never the fleet's at once
            runs = (NodeRun(n, summaries[n]["profile"] if n in summaries else "", by_node[n],
                            summaries[n]["metrics"] if n in summaries else [])
                    for n in names)
            if names or not refused or then is not None:
                history.record(run_id, kind, runs, when=now, command=command,
                               run_dir=run_dir, then=then)
    except (HistoryError, sqlite3.Error, OSError) as exc:
        say(f"history unavailable, this run was not recorded ({db}): {describe(exc)}")
    finally:
        history.close()
    return added


def evidence_time_problem(node: str, collected_at: object, now: float,
                          max_age_s: float | None) -> str | None:
    """Why a bundle's timestamp is not believable (named: node, bundle time, now), or None.
    A bundle with no timestamp (an older node-side stetho) is taken at receive time."""
    from datetime import datetime, timezone

    from stetho.history.store import FUTURE_TOLERANCE_S

    if not collected_at:
        return None
    stamp = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")
    try:
        t = datetime.fromisoformat(str(collected_at).replace("Z", "+00:00"))
    except ValueError:
        return f"{node}: its bundle time {collected_at!r} is not a time (now {stamp})"
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    ahead = t.timestamp() - now
    if ahead > FUTURE_TOLERANCE_S:
        return (f"{node}: its bundle is dated {collected_at}, {_span(ahead)} in the future "
                f"of this controller (now {stamp}); fix the node's clock (NTP) and check it "
                "again")
    if max_age_s and -ahead > max_age_s:
        return (f"{node}: its bundle is dated {collected_at}, {_span(-ahead)} old (now "
                f"{stamp}), older than the {_span(max_age_s)} the policy calls fresh; "
                "check the node again")
    return None


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
