"""Gate decisions kept in the history database: what a shadow policy would have done, per
node, and what the release gate decided on each canary.

They are a run of kind `gate-shadow` (or `gate-release`) in `runs` and one row per
node in `gate_decisions`, never `node_runs` rows: the gate reads a node's newest `node_runs`
row for the `gate`/`sweep` pseudo-checks and counts every check of a row, so a verdict written
there as a result would clear a real "could not check" error or block a node under a policy
that counts every check. The table is made by schema 6 of stetho.history.store's
migrations.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass

from stetho.history.store import History

KIND = "gate-shadow"
RELEASE_KIND = "gate-release"
#: The node of a decision about no one node (the release as a whole): no host has this name.
RELEASE_NODE = "*"


@dataclass(frozen=True)
class NodeDecision:
    """One policy's verdict on one node: `block`, `go` or `unevaluated`, and the checks
    that blocked it (or left it unevaluated); or the release gate's verdict on the release
    as a whole (node RELEASE_NODE): `promote` or `hold`, with the `reason` in words."""

    policy: str
    mode: str
    node: str
    verdict: str
    checks: tuple[str, ...] = ()
    reason: str = ""


def record(h: History, run_id: str, decisions: Iterable[NodeDecision], *, when: float,
           command: str, kind: str = KIND, exit_code: int | None = None) -> int:
    """Write one gate's decisions as a run of `kind`, all or nothing. Its exit code is
    what the policies made (or, shadows, would have made) it: 1 when one blocks."""
    from stetho import __version__

    rows = list(decisions)
    t = int(when)
    would = (1 if any(d.verdict == "block" for d in rows) else 0) if exit_code is None \
        else exit_code
    with h.transaction():
        cur = h.conn.execute(
            "INSERT INTO runs (id, kind, time, started, host, stetho_version, command, "
            "exit_code, nodes, run_dir) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (run_id, kind, t, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)),
             socket.gethostname(), __version__, command, would,
             len({d.node for d in rows} - {RELEASE_NODE}),
             ""))
        key = int(cur.lastrowid or 0)
        h.conn.executemany("INSERT OR REPLACE INTO gate_decisions (run_key, time, policy, "
                           "mode, node, verdict, checks, reason) VALUES (?,?,?,?,?,?,?,?)",
                           [(key, t, d.policy, d.mode, d.node, d.verdict,
                             json.dumps(list(d.checks)), d.reason) for d in rows])
    return key


def read(h: History, since: float = 0.0) -> list[tuple[str, int, NodeDecision]]:
    """(run id, time, decision) of every recorded decision at or after `since`, oldest
    first."""
    out = []
    for run, t, policy, mode, node, verdict, checks, reason in h.conn.execute(
            "SELECT r.id, d.time, d.policy, d.mode, d.node, d.verdict, d.checks, d.reason "
            "FROM gate_decisions d JOIN runs r ON r.key = d.run_key WHERE d.time >= ? "
            "ORDER BY d.time, d.policy, d.node", (int(since),)):
        out.append((str(run), int(t), NodeDecision(policy, mode, node, verdict,
                                                   tuple(json.loads(checks)), str(reason))))
    return out
