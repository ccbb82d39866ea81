"""A node's history rows read back through their chain (stetho.history.chain): the rows of a
time window, the chain walked from the seal's head down to them, the profile pin, and a new
seal for an operator who lost the old one. Apart from the store so that the SQL that writes
rows and the checks that believe them can each be read in one sitting."""

from __future__ import annotations

import sqlite3
from itertools import groupby
from operator import itemgetter
from typing import Any

from stetho.core.profile_name import DEFAULT_PROFILE
from stetho.history import chain, integrity
from stetho.history.errors import HistoryCorrupt, HistoryKeyError
from stetho.history.integrity import ROW, RowCheck

_RUN_TIME = itemgetter(3, 1)
#: the digest of a run none of whose metrics rows are left (its rows were all deleted)
_NO_ROWS = chain.digest_lines([])


class ChainedRows:
    """Verified reads of one database's chained rows; a named HistoryCorrupt where they
    cannot be believed."""

    def __init__(self, conn: sqlite3.Connection, rows: RowCheck, seals: chain.SealReader
                 ) -> None:
        self.conn = conn
        self.rows = rows
        self.seals = seals

    def node_id(self, node: str) -> int | None:
        row = self.conn.execute("SELECT id FROM nodes WHERE name = ?", (node,)).fetchone()
        return int(row[0]) if row else None

    def window(self, node: str, nid: int, since: int, until: int
                      ) -> list[tuple[str, int, int, tuple[Any, ...]]]:
        """A node's chained rows between since and until, newest first, as (run, run key,
        time, ROW), each verified: its signature, and the chain from the seal's head down to
        the row before the oldest of them unbroken (so none between, nor the one just before,
        was deleted). Rows from before the chain are left out, as unverified. A named
        HistoryCorrupt where one cannot be believed."""
        out = []
        for run, run_key, t, *row in self.conn.execute(
                f"SELECT r.id, nr.run_key, nr.time, {ROW} FROM node_runs nr "
                "JOIN runs r ON r.key = nr.run_key WHERE nr.node_id = ? AND nr.time >= ? "
                "AND nr.time <= ? ORDER BY nr.time DESC, nr.run_key DESC", (nid, since, until)):
            why = self.rows.untrusted(node, str(run), int(run_key), int(t), tuple(row))
            if why:
                raise HistoryCorrupt(why)
            if why is None and row[7] is not None:
                out.append((str(run), int(run_key), int(t), tuple(row)))
        low = min((row[7] for *_, row in out), default=None)
        # the rows just verified are not read and verified again on the walk (same snapshot:
        # the seal's lock is held by whoever reads, and a writer waits for it)
        walked = self.walk(node, nid, None if low is None else max(int(low) - 1, 1),
                           known=frozenset((k, t) for _r, k, t, _row in out))
        for run, _k, _t, row in out:
            if walked.get(row[7]) != row[-1]:
                raise HistoryCorrupt(f"history of node {node} has two rows at seq {row[7]} "
                                     f"(run {run} is not the one its chain links to)")
        return out

    def metrics(self, node: str, nid: int, since: int, until: int
                ) -> tuple[dict[int, str], list[tuple[int, int, Any, int]]]:
        """A node's metrics between since and until as (series id, time, value, run key),
        oldest first, each chained run's checked against the digest its signed row holds, and
        at the time that row holds: every run the window() holds, one whose rows were all
        deleted included (its digest then fails). Returns (run key -> run id of each verified
        run, the rows of those runs); rows of runs from before the chain are left out,
        unverified. One range scan of the node's rows (the table is clustered by node, then
        time); the caller holds the seal's lock. A named HistoryCorrupt where a run's metrics
        are not what stetho wrote."""
        signed = {k: (run, row[9], t) for run, k, t, row in self.window(node, nid, since, until)}
        rows = self.conn.execute(
            "SELECT series_id, time, value, run_key FROM metrics "
            "WHERE node_id = ? AND time >= ? AND time <= ? ORDER BY time, run_key",
            (nid, since, until)).fetchall()
        # each series' (check, subject, metric) as the start of its rows' digest lines: a
        # line is then that text and the value's repr, as chain.digest writes a row
        heads = {sid: repr(tuple(names))[:-1] + ", " for sid, *names in self.conn.execute(
            "SELECT id, check_name, subject, metric FROM series WHERE id IN "
            f"({','.join(map(str, {int(r[0]) for r in rows}))})")}
        # every row's line at once, each run's rows then one slice (ordered by run within a
        # time): a two-week read of a node checked hourly is 45,000 rows
        lines = [f"{heads.get(r[0], '')}{r[2]!r})" for r in rows]
        after = self.rows.chained_after()
        unsigned = False
        got: dict[int, str] = {}
        start = 0
        for (run_key, t), group in groupby(rows, _RUN_TIME):
            end = start + len(list(group))
            sig = signed.get(run_key)
            if sig is not None:
                # stetho writes a run's metrics at its row's (signed) time: moved readings
                # would change the span a counter's growth is judged over
                if run_key in got or t != sig[2]:
                    raise HistoryCorrupt(f"metrics of node {node} in run {sig[0]} are not at "
                                         "the time its signed row holds (the database was "
                                         "edited): restore it from its backup")
                got[run_key] = chain.digest_lines(lines[start:end])
            elif run_key > after:
                raise HistoryCorrupt(f"metrics of node {node} in run key {run_key} have no "
                                     "signed row of that run (the row was deleted, or the "
                                     "metrics moved): restore the database from its backup")
            else:
                unsigned = True
            start = end
        for run_key, (run, stored, _t) in signed.items():
            if not isinstance(stored, str) or got.get(run_key, _NO_ROWS) != stored:
                raise HistoryCorrupt(f"metrics of node {node} in run {run} failed their "
                                     "integrity check: they are not what stetho wrote (the "
                                     "database was edited): restore it from its backup")
        return ({k: run for k, (run, _d, _t) in signed.items()},
                [r for r in rows if r[3] in signed] if unsigned else rows)

    def walk(self, node: str, nid: int, down_to: int | None, sealed: bool = True,
              known: frozenset[tuple[int, int]] = frozenset()) -> dict[int, str]:
        """A node's chain from its newest row (which must be the seal's head, unless not
        `sealed`) down to seq `down_to` (None: the head alone), each row's signature and link
        checked: seq -> MAC. `known`: (run key, time) of rows verified in this same snapshot
        (their results are not read again). A named HistoryCorrupt where it is broken."""
        rows = self.conn.execute(
            "SELECT nr.run_key, nr.time, nr.seq, nr.prev, nr.mac FROM node_runs nr "
            "WHERE nr.node_id = ? AND nr.seq IS NOT NULL AND nr.seq >= ? ORDER BY nr.seq DESC"
            + (" LIMIT 1" if down_to is None else ""), (nid, down_to or 0)).fetchall()
        newer: chain.Link | None = None
        out: dict[int, str] = {}
        for run_key, t, *cols in rows:
            link = (cols[0], cols[1], cols[2])
            why: str | None = None
            if (run_key, t) not in known:
                run, *row = self.conn.execute(
                    f"SELECT r.id, {ROW} FROM node_runs nr JOIN runs r ON r.key = nr.run_key "
                    "WHERE nr.node_id = ? AND nr.time = ? AND nr.run_key = ?",
                    (nid, t, run_key)).fetchone()
                why = self.rows.untrusted(node, str(run), int(run_key), int(t), tuple(row))
            if why == "":
                why = f"history row for node {node} (run key {run_key}) failed its " \
                    "integrity check: it is chained but has no signature"
            why = why or (chain.rolled_back(node, self.seal(), link) if newer is None and sealed
                          else chain.broken(node, newer, link) if newer else None)
            if why:
                raise HistoryCorrupt(why)
            out[int(link[0])] = str(link[2])
            newer = link
        why = (chain.rolled_back(node, self.seal(), (None, None, None)) if sealed else None) \
            if newer is None else \
            None if down_to is None or newer[0] == down_to else \
            f"history of node {node} has rows missing: seq {newer[0]} is the oldest the " \
            f"database holds, where seq {down_to} was read with it (rows were deleted; " \
            "restore the database from its backup)"
        if why:
            raise HistoryCorrupt(why)
        return out

    def reseal(self) -> int:
        """A new seal naming each node's newest row as the database holds it now; every chain
        verified down to its first row (signatures and links), so edited rows and deleted
        middle rows are still refused, but deleted newest rows are believed gone: laundering,
        for an operator who knows what happened. Returns the number of nodes sealed."""
        key = self.rows.key(create=False)
        if key is None:
            raise HistoryKeyError(f"history key {integrity.key_path(self.rows.path)} is missing: "
                                  "nothing can be verified, so nothing is sealed")
        with chain.locked(self.rows.path, shared=False):
            new = chain.Seal(present=True)
            for nid, name in self.conn.execute(
                    "SELECT id, name FROM nodes WHERE id IN (SELECT node_id FROM node_runs "
                    "WHERE seq IS NOT NULL) ORDER BY name").fetchall():
                walked = self.walk(str(name), int(nid), 1, sealed=False)
                new.heads[str(name)] = (max(walked), walked[max(walked)])
                pin = self.conn.execute(  # from the rows just verified
                    "SELECT nr.profile, r.id FROM node_runs nr JOIN runs r ON r.key = "
                    "nr.run_key WHERE nr.node_id = ? AND nr.seq IS NOT NULL AND nr.profile "
                    "NOT IN ('', ?) ORDER BY nr.seq DESC LIMIT 1",
                    (nid, DEFAULT_PROFILE)).fetchone()
                if pin:
                    new.pins[str(name)] = (str(pin[0]), str(pin[1]))
            chain.write(self.rows.path, key, new)
            self.seals.remember(new)
        return len(new.heads)

    def pins(self, nodes: list[str], unpinned: frozenset[str] = frozenset()
                        ) -> dict[str, tuple[str, str, str | None]]:
        """Each node's pin: the seal's (the profile its newest chained row other than `generic`
        was recorded with, signed: a row edited or deleted cannot move it), else as
        stetho.history.latest.pinned_profiles finds it in rows from before the chain, each
        row's signature checked: node -> (profile, run, why it cannot be believed or None)."""
        from stetho.history.latest import pinned_profiles

        with chain.locked(self.rows.path, shared=True):
            seal = self.seal()
            out: dict[str, tuple[str, str, str | None]] = {
                n: (seal.pins[n][0], seal.pins[n][1], None) for n in nodes
                if n in seal.pins and seal.pins[n][0] not in unpinned}
            rest = [n for n in nodes if n not in seal.pins]
            out.update(pinned_profiles(self.conn, rest, unpinned, self.rows.untrusted,
                                       pre_chain=True))
        return out

    def seal(self) -> chain.Seal:
        return self.seals.read(self.rows.key(create=False))

    def digests(self, run_key: int, t: int, node_ids: list[int]) -> dict[int, str]:
        """Per node the digest of its metrics of this run, as the database now holds them."""
        found: dict[int, list[tuple[Any, ...]]] = {}
        for chunk in (node_ids[i:i + 500] for i in range(0, len(node_ids), 500)):
            for nid, _rk, *rest in self.conn.execute(
                    chain.METRICS + f"WHERE m.node_id IN ({','.join('?' * len(chunk))}) "
                    "AND m.time = ? AND m.run_key = ?", [*chunk, t, run_key]):
                found.setdefault(nid, []).append(tuple(rest))
        return {nid: chain.digest(rows) for nid, rows in found.items()}

    def to_extend(self, key: bytes) -> chain.Seal:
        """The seal a write extends; none where the database holds chained rows is refused
        (starting a new one would launder whatever happened to the old)."""
        seal = self.seals.read(key)
        db = self.rows.path
        if not seal.present and chain.has_chained_rows(self.conn):
            raise HistoryKeyError(
                f"history seal {chain.seal_path(db)} is missing while {db} holds chained rows; "
                "this run was not recorded: restore the seal from the backup "
                "taken with the database (or `stetho history reseal --launder`, which believes "
                "the rows as they stand)")
        return seal
