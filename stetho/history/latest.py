"""A node's newest result per check, folded from its runs newest first: what the gate decides
on, so that a narrow run replaces only the checks it ran."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import field
from typing import Any

from stetho.core.record import record
from stetho.results import Result

#: (node, run, run key, time, the ROW columns) -> why the row cannot be believed, or None
#: A run's own verdict on a node it could not check at all (stetho.gate.catalogue's
#: PSEUDO_CHECKS): always kept, taken from the newest run only.
PSEUDO = frozenset({"gate", "sweep"})

Verify = Callable[[str, str, int, int, tuple[Any, ...]], "str | None"]


@record(frozen=False)
class NodeLatest:
    """A node's newest result per check inside the freshness window, and which run each
    came from."""

    node: str
    checks: dict[str, tuple[int, str]] = field(default_factory=dict)  # check -> (time, run)
    results: list[Result] = field(default_factory=list)
    newest: int = 0
    #: why a row of this node failed its integrity check (stetho.history.integrity), if one did
    distrusted: str | None = None
    #: check -> the profile its result was judged against ("" where the run recorded none)
    profiles: dict[str, str] = field(default_factory=dict)
    #: runs folded in so far: the pseudo-checks come from the first only (counted, since a
    #: run whose kept results are none still is the node's newest)
    folded: int = 0
    #: id(result) -> (the result, the JSON line history stored it as), for the results read
    #: exactly as stored (stetho.history.blob): results.json copies the line
    stored: dict[int, tuple[Result, bytes]] = field(default_factory=dict)

    def add(self, t: int, run: str, results: list[Result], profile: str = "",
            lines: list[bytes | None] | None = None) -> None:
        """Fold in one older run (runs arrive newest first); `lines`: each result's stored
        JSON, where it is exactly the result's."""
        first = self.folded == 0
        self.folded += 1
        self.newest = max(self.newest, t)
        ran = {r.check for r in results} - self.checks.keys()
        if not first:
            ran -= PSEUDO
        for check in ran:
            self.checks[check] = (t, run)
            self.profiles[check] = profile
        if lines is None:
            self.results += [r for r in results if r.check in ran]
            return
        for r, line in zip(results, lines, strict=True):
            if r.check in ran:
                self.results.append(r)
                if line is not None:
                    self.stored[id(r)] = (r, line)

    @property
    def oldest(self) -> int:
        return min((t for t, _ in self.checks.values()), default=self.newest)

    def runs(self) -> list[str]:
        """The runs the results came from, newest first."""
        seen = sorted({(t, run) for t, run in self.checks.values()}, reverse=True)
        return [run for _, run in seen]


def pinned_profiles(conn: sqlite3.Connection, nodes: list[str],
                    unpinned: frozenset[str] = frozenset(), verify: Verify | None = None,
                    pre_chain: bool = False) -> dict[str, tuple[str, str, str | None]]:
    """Each node's profile as history pins it: the one its newest run was recorded with, of
    any age, leaving out runs with no profile or one in `unpinned` (the fallback a node is
    judged against when nothing names its hardware): node -> (profile, run, why the row
    cannot be believed or None). `verify` says that of a row (stetho.history.store): ""
    for one from before signing, which pins nothing. `pre_chain`: only rows from before the
    chain (later ones pin through the seal)."""
    from stetho.history.integrity import ROW

    out: dict[str, tuple[str, str, str | None]] = {}
    skip = sorted(unpinned)
    leave_out = f"AND nr.profile NOT IN ({','.join('?' * len(skip))}) " if skip else ""
    for i in range(0, len(nodes), 500):
        chunk = nodes[i:i + 500]
        rows = conn.execute(
            f"SELECT n.name, r.id, nr.run_key, nr.time, {ROW} FROM nodes n "
            "JOIN node_runs nr ON nr.node_id = n.id JOIN runs r ON r.key = nr.run_key "
            f"WHERE n.name IN ({','.join('?' * len(chunk))}) AND nr.profile IS NOT NULL "
            f"AND nr.profile != '' {leave_out}"
            + ("AND nr.seq IS NULL " if pre_chain else "") +
            "ORDER BY n.name, nr.time DESC, nr.run_key DESC", [*chunk, *skip])
        for name, run, run_key, t, *row in rows:
            if str(name) in out:
                continue
            why = verify(str(name), str(run), int(run_key), int(t), tuple(row)) if verify \
                else None
            if why != "":
                out[str(name)] = (str(row[0]), str(run), why)
    return out
