"""From node_runs to incidents, in one scan.

A year of nightly sweeps of 1,024 nodes is ~373k rows. What keeps it fast is one pass over
the table in its own order (node, then time: no sort) in one tight loop that keeps, per node,
just the rows where its state changes, its last row and its warning rows (plain tuples, no
object per row). Blobs are decoded only for the run that opens each incident (its cause) and
for a warning before one (time to detect).

Every row is verified in that pass (its MAC, stetho.history.integrity, computed inline with
the key's pads precomputed: ~3 us a row). Verifying only the rows where the state changes is
not enough: a lone failure edited into a pass leaves no change behind, and the incident would
vanish unseen. A row that fails its check (or predates signing) is left out and counted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import zlib
from dataclasses import dataclass, field

from stetho.history.integrity import ROW, key_path, pruned, results_digest
from stetho.history.store import History, HistoryCorrupt, HistoryKeyError

PASS, UNKNOWN, FAIL = 0, 1, 2
#: a warning this long before a failure still counts as its early sign (time to detect)
WARN_LOOKBACK_S = 30 * 86400

#: (time, run key, state) where a node's state changes
Mark = tuple[int, int, int]


@dataclass
class Incident:
    """One incident: a node's failing stretch (few per node: a dataclass costs nothing here)."""

    node: str
    opened: int
    run_key: int
    run: str
    closed: int | None
    causes: tuple[str, ...] = ()
    first_warn: int | None = None
    parts: frozenset[str] = frozenset()  # the failing subjects' devices (gpu0, mlx5_4)


@dataclass
class Timeline:
    """What the scan found: incidents, each node's observed span, and what was left out."""

    since: int
    until: int
    incidents: list[Incident] = field(default_factory=list)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)  # node -> first, last run
    rows: int = 0
    excluded: int = 0
    why: list[str] = field(default_factory=list)  # the first few reasons, for the output


def scan(h: History, since: int, until: int) -> Timeline:
    """Every node's incidents between `since` and `until` (POSIX seconds)."""
    tl = Timeline(since, until)
    names = dict(h.conn.execute("SELECT id, name FROM nodes"))
    runs = dict(h.conn.execute("SELECT key, id FROM runs WHERE time >= ? AND time <= ?",
                               (since, until)))
    _need_key(h)
    blobs: dict[tuple[int, int, int], bytes] = {}
    marks, last, warns = _fold(h, tl, names, runs, blobs)
    for nid, ms in marks.items():
        node = names.get(nid, f"#{nid}")
        tl.spans[node] = (ms[0][0], last[nid][0])
        _incidents(h, tl, nid, node, ms, warns.get(nid, []), runs, blobs)
    return tl


def _fold(h: History, tl: Timeline, names: dict[int, str], runs: dict[int, str],
          blobs: dict[tuple[int, int, int], bytes]
          ) -> tuple[dict[int, list[Mark]], dict[int, tuple[int, int]],
                     dict[int, list[tuple[int, int]]]]:
    """The one scan: every row verified; per node its state changes (with the blob of each
    change to fail), its last row and its warning rows."""
    marks: dict[int, list[Mark]] = {}
    last: dict[int, tuple[int, int]] = {}
    warns: dict[int, list[tuple[int, int]]] = {}
    key = h.rows.key(create=False) or b""
    pads = [hashlib.sha256(bytes(b ^ x for b in key.ljust(64, b"\0"))) for x in (0x36, 0x5C)]
    inner, outer = pads
    node_js = {i: json.dumps(n) for i, n in names.items()}
    run_js = {k: json.dumps(r) for k, r in runs.items()}
    prof_js: dict[object, str] = {}
    same = hmac.compare_digest
    prev_nid, prev_s, lt, lrk = -1, -1, 0, 0
    link: tuple[object, object] = (None, None)  # the node's previous chained row: seq, MAC
    link_nid = -1
    broken: dict[int, str] = {}  # node id -> why its chain cannot be believed
    counted: dict[int, int] = {}
    m: list[Mark] = []
    for (nid, t, rk, prof, code, f, e, w, sk, p, seq, prv, digest, blob,
         mac) in h.conn.execute(
            f"SELECT nr.node_id, nr.time, nr.run_key, {ROW} FROM node_runs nr "
            "WHERE time >= ? AND time <= ? ORDER BY node_id, time, run_key",
            (tl.since, tl.until)):
        tl.rows += 1
        counted[nid] = counted.get(nid, 0) + 1
        pj = prof_js.get(prof)
        if pj is None:
            pj = prof_js[prof] = json.dumps(prof)
        ih = inner.copy()
        if seq is None:  # signed before rows were chained (schema 3)
            ih.update(f'["stetho-node-run-1",{node_js.get(nid)},{run_js.get(rk)},{t},{pj},'
                      f'{"null" if code is None else code},[{f},{e},{w},{sk},{p}]]\0'.encode())
        elif isinstance(blob, bytes):  # stetho.history.integrity.mac, v3: over the blob's
            # digest, with the row's place in its node's chain (older v2 rows: _bad decides)
            ih.update(f'["stetho-node-run-3",{node_js.get(nid)},{run_js.get(rk)},{t},{pj},'
                      f'{"null" if code is None else code},[{f},{e},{w},{sk},{p}],{seq},'
                      f'{json.dumps(str(prv))},{json.dumps(str(digest))},'
                      f'"{results_digest(blob)}"]\0'.encode())
        if seq is None:
            ih.update(blob if isinstance(blob, bytes) else b"")
        oh = outer.copy()
        oh.update(ih.digest())
        if nid != prev_nid and nid != link_nid:
            link, link_nid = (None, None), nid
        if not (key and isinstance(mac, str) and same(oh.hexdigest(), mac)) and _bad(
                h, tl, names.get(nid, f"#{nid}"), runs, rk, t,
                (prof, code, f, e, w, sk, p, seq, prv, digest, blob, mac)):
            # left out and counted; the next row still links to its stored place
            link = (seq, mac) if seq is not None else (None, None)
            continue
        if seq is not None and link[0] is not None and (seq != link[0] + 1  # type: ignore[operator]
                                                        or prv != link[1]):
            # a gap or a foreign link in time order: the chain's own walk decides (rows
            # written out of time order are fine there; deleted ones are named)
            broken.setdefault(nid, "")
        link = (seq, mac) if seq is not None else (None, None)
        s = FAIL if f else UNKNOWN if e else PASS
        if nid != prev_nid:
            if prev_nid != -1:
                last[prev_nid] = (lt, lrk)
            m = marks[nid] = []
            prev_nid, prev_s = nid, -1
        if s != prev_s:
            m.append((t, rk, s))
            prev_s = s
            if s == FAIL:
                blobs[(nid, t, rk)] = blob
        if w and s != FAIL:
            warns.setdefault(nid, []).append((t, rk))
        lt, lrk = t, rk
    if prev_nid != -1:
        last[prev_nid] = (lt, lrk)
    _check_chains(h, tl, names, marks, broken)
    for nid, why in broken.items():  # a node whose chain is broken is left out, named
        if nid in marks:
            del marks[nid]
            last.pop(nid, None)
            warns.pop(nid, None)
            tl.excluded += counted.get(nid, 0)
            if len(tl.why) < 5:
                tl.why.append(why)
    return marks, last, warns


def _check_chains(h: History, tl: Timeline, names: dict[int, str],
                  marks: dict[int, list[Mark]], broken: dict[int, str]) -> None:
    """Each node's chain: its newest row must be the seal's head (newest rows deleted, or an
    older database put back, are named), and where the scan saw a gap or a foreign link, the
    window walked through stetho.history.chained decides. One query a node, not one a row."""
    for nid in marks:
        node = names.get(nid, f"#{nid}")
        try:
            if nid in broken:
                h.chained.window(node, nid, tl.since, tl.until)
                del broken[nid]  # rows written out of time order: the chain holds
            h.chained.walk(node, nid, None)
        except HistoryCorrupt as exc:
            broken[nid] = str(exc)


def _bad(h: History, tl: Timeline, node: str, runs: dict[int, str], rk: int, t: int,
         row: tuple[object, ...]) -> bool:
    """The authoritative check (stetho.history.integrity) of a row the inline one refused:
    True, counted and its reason kept, when it cannot be believed."""
    why = h.rows.untrusted(node, runs.get(rk, "?"), rk, t, row)
    if why is None:
        return False
    tl.excluded += 1
    if len(tl.why) < 5:
        tl.why.append(why or f"history row for node {node} (run {runs.get(rk, '?')}) "
                      "predates signing: unverified")
    return True


def _need_key(h: History) -> None:
    """Signed rows without their key cannot be verified: a named error, not zero figures."""
    if h.rows.key(create=False) is None and h.conn.execute(
            "SELECT 1 FROM node_runs WHERE mac IS NOT NULL LIMIT 1").fetchone():
        raise HistoryKeyError(f"history key {key_path(h.path)} is missing: the history's rows "
                              "cannot be verified, so no figure can be given; restore the key "
                              "beside the database")


def _verified(h: History, nid: int, node: str, runs: dict[int, str], t: int, rk: int
              ) -> tuple[bytes, str | None]:
    """A row's blob and why it cannot be believed (None: it can)."""
    row = h.conn.execute(f"SELECT {ROW} FROM node_runs nr WHERE node_id = ? AND time = ? "
                         "AND run_key = ?", (nid, t, rk)).fetchone()
    if row is None:
        return b"", f"history row for node {node} at {t} vanished while reading"
    run = runs.get(rk, "?")
    why = h.rows.untrusted(node, run, rk, t, tuple(row))
    if why == "":
        why = f"history row for node {node} (run {run}) predates signing: unverified"
    return row[-2], why


def _incidents(h: History, tl: Timeline, nid: int, node: str, marks: list[Mark],
               warns: list[tuple[int, int]], runs: dict[int, str],
               blobs: dict[tuple[int, int, int], bytes]) -> None:
    """Open at a failing run after a non-failing one, close at the next passing run."""
    opened: tuple[int, int] | None = None
    after = tl.since - 1  # the previous incident's close: warnings before it are its own
    found: list[tuple[Incident, int]] = []
    for t, rk, s in marks:
        if s == FAIL and opened is None:
            opened = (t, rk)
        elif s == PASS and opened is not None:
            found.append((_incident(node, nid, opened, t, runs, blobs), after))
            after, opened = t, None
    if opened is not None:
        found.append((_incident(node, nid, opened, None, runs, blobs), after))
    for inc, since in found:
        inc.first_warn = _first_warn(h, tl, nid, node, inc, since, warns, runs)
        tl.incidents.append(inc)


def _incident(node: str, nid: int, opened: tuple[int, int], closed: int | None,
              runs: dict[int, str], blobs: dict[tuple[int, int, int], bytes]) -> Incident:
    """The incident opened at `opened`, its cause the checks failing there (decoded here)."""
    run = runs.get(opened[1], "?")
    blob = blobs[(nid, opened[0], opened[1])]
    failing = [d for d in _decode(node, run, blob) if d.get("status") == "fail"]
    causes = tuple(sorted({str(d.get("check")) for d in failing}))
    return Incident(node, opened[0], opened[1], run, closed, causes or ("unknown",),
                    parts=frozenset(_part(d) for d in failing) - {""})


def _part(d: dict[str, object]) -> str:
    """A result's device: its subject up to a colon (`gpu0:ecc_sbe` -> `gpu0`, `mlx5_4:1` ->
    `mlx5_4`), which is how a drift result names what it measured."""
    return str(d.get("subject") or "").split(":", 1)[0]


def _early_sign(d: dict[str, object], inc: Incident) -> bool:
    """A warning of one of the incident's checks, or a drift warning (drift_counter,
    drift_shift, drift_trend) on one of the devices that then failed."""
    if d.get("status") != "warn":
        return False
    check = str(d.get("check"))
    return check in inc.causes or (check.startswith("drift_") and _part(d) in inc.parts)


def _first_warn(h: History, tl: Timeline, nid: int, node: str, inc: Incident, since: int,
                warns: list[tuple[int, int]], runs: dict[int, str]) -> int | None:
    """The earliest early sign (`_early_sign`) on the node since its previous incident
    closed (at most WARN_LOOKBACK_S before), oldest first: decoded only here."""
    after = max(since, inc.opened - WARN_LOOKBACK_S)
    for t, rk in warns:
        if t <= after or t >= inc.opened:
            continue
        blob, why = _verified(h, nid, node, runs, t, rk)
        if why is not None:  # verified in the scan, changed since: not used (counted there)
            continue
        if any(_early_sign(d, inc) for d in _decode(node, runs.get(rk, "?"), blob)):
            return t
    return None


def _decode(node: str, run: str, blob: bytes) -> list[dict[str, object]]:
    if pruned(blob):  # verified counts, its results pruned: no early sign to find
        return []
    try:
        out = json.loads(zlib.decompress(blob))
        if not isinstance(out, list) or not all(isinstance(d, dict) for d in out):
            raise ValueError("not a list of results")
        return out
    except (zlib.error, ValueError, TypeError) as exc:
        raise HistoryCorrupt(f"the results of {node} in run {run} are unreadable "
                             f"({type(exc).__name__}: {exc})") from None
