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
              warn: Callable[[str], None] | None = None) -> list[Result]:
    """Drift results for every summarised node (added to the run), then record the run.
    Returns the drift results."""
    from stetho import profiles
    from stetho.errors import ConfigError
    from stetho.history import drift
    from stetho.history.store import History, HistoryError, NodeRun

    say = warn or (lambda m: print(f"stetho: warning: {m}", file=sys.stderr))
    now = when if when is not None else time.time()
    try:
        history = History(db)
    except (HistoryError, sqlite3.Error, OSError) as exc:
        say(f"history not used or recorded ({db}): {exc}")
        return []
    added: list[Result] = []
    try:
        for node, summary in sorted(summaries.items()):
            try:
                prof = profiles.load(summary.get("profile") or profiles.DEFAULT_PROFILE)
            except ConfigError:
                continue
            added += drift.evaluate(history, node, prof, summary.get("metrics", []), now=now)
        if record:
            every = results + added
            by_node: dict[str, list[Result]] = {}
            for r in every:
                by_node.setdefault(r.node, []).append(r)
            runs = [NodeRun(n, summaries[n]["profile"] if n in summaries else "", rs,
                            summaries[n]["metrics"] if n in summaries else [])
                    for n, rs in sorted(by_node.items()) if n != "*"]
            history.record(run_id, kind, runs, when=now, command=command, run_dir=run_dir)
    except (sqlite3.Error, OSError) as exc:
        say(f"history not recorded ({db}): {exc}")
    finally:
        history.close()
    return added
