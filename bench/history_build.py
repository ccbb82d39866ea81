"""A year of nightly history for a fleet, written fast but exactly as History.record writes it.

History.record takes ~30 s for one sweep of 10,240 real-size nodes, so a year through it is
three hours. This writes the same rows (the same runs, nodes, series and metrics tables; each
node_runs row signed with stetho.history.integrity.mac, chained by seq and prev, its metrics'
digest from stetho.history.chain.digest, and the seal naming each node's newest row), in
primary-key order (node by node), which SQLite appends instead of scattering. The gate, stats
and drift read it back through the same verifying code as any other history.

What a node-night holds is measured, not invented: `real_node()` runs `stetho check --sim` on
a healthy simulated 8x H100 node and takes its results (about 227) and metrics (about 264) as
recorded. Every night repeats them (a healthy node's results are the same check by check; its
values vary a little, which does not change a blob's size by much). `metric_days` limits the
nights that carry metric rows (a year of 264 metrics x 10,240 nodes is ~1 billion rows): the
older nights' rows are chained with the digest of no metrics, as a run that measured none.
`full_days` keeps the full results of the newest nights only, the older ones as retention
(stetho.history.prune) leaves them; tests/test_history_prune.py checks the two write the same.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stetho import __version__
from stetho.history import chain, integrity
from stetho.history.blob import encode as results_blob
from stetho.history.store import History
from stetho.results import Result, counts, exit_code

DAY = 86400
PROFILE = "h100-sxm-8gpu"


@dataclass(frozen=True)
class NodeNight:
    """One real healthy node's run: its results (as Result.to_json wrote them) and metrics
    ([check, subject, metric, value, unit])."""

    node: str
    results: list[dict[str, Any]]
    metrics: list[list[Any]]


def real_node() -> NodeNight:
    """A healthy simulated 8x H100 node checked for real (`stetho sim build`, `stetho check
    --sim`), read back from the history it recorded into."""
    work = Path(tempfile.mkdtemp(prefix="stetho-real-node-"))
    try:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
        stetho = [sys.executable, "-m", "stetho"]
        subprocess.run([*stetho, "sim", "build", str(work / "sim"), "--nodes", "1"], env=env,
                       check=True, capture_output=True)
        db = work / "h.db"
        subprocess.run([*stetho, "check", "--sim", str(work / "sim" / "node01"), "--profile",
                        PROFILE, "--db", str(db), "--quiet"], env=env, capture_output=True)
        conn = sqlite3.connect(db)
        blob = conn.execute("SELECT results FROM node_runs").fetchone()[0]
        metrics = [list(r) for r in conn.execute(
            "SELECT s.check_name, s.subject, s.metric, m.value, s.unit FROM metrics m "
            "JOIN series s ON s.id = m.series_id ORDER BY 1, 2, 3")]
        conn.close()
        return NodeNight("node01", json.loads(zlib.decompress(blob)), metrics)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build(path: Path, n_nodes: int, days: int, night: NodeNight, end: float,
          metric_days: int = 30, full_days: int | None = None, say: Any = print
          ) -> dict[str, int]:
    """Write `days` nightly sweeps of `n_nodes` nodes (gpu0001...), the last at `end`, into a
    new database at `path` (its .key and .seal beside it). Nights older than `full_days`
    (None: none) are written as `stetho history prune` leaves them: the blob's digest in
    place of the blob (the MAC computed over the full blob first, as record() signs it).
    Returns row counts."""
    full_days = days if full_days is None else full_days
    for p in path.parent.glob(path.name + "*"):
        p.unlink()
    names = [f"gpu{i:04d}" for i in range(1, n_nodes + 1)]
    template = [Result.from_json(d) for d in night.results]
    tally = counts(template)
    tally_t = (tally["fail"], tally["error"], tally["warn"], tally["skip"], tally["pass"])
    code = exit_code(template)
    times = [int(end - (days - 1 - d) * DAY) for d in range(days)]
    with History(path) as h:
        key = h.rows.key(create=True)
        assert key is not None
        conn = h.conn
        conn.execute("PRAGMA journal_mode = OFF")  # a scratch build: no journal, one writer
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("BEGIN")
        run_ids = [f"night-{d:04d}" for d in range(days)]
        run_keys = []
        for run_id, t in zip(run_ids, times, strict=True):
            cur = conn.execute(
                "INSERT INTO runs (id, kind, time, started, host, stetho_version, command, "
                "exit_code, nodes, run_dir) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (run_id, "sweep", t, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)),
                 socket.gethostname(), __version__, "stetho sweep (bench/history_build.py)",
                 code, n_nodes, ""))
            run_keys.append(int(cur.lastrowid or 0))
        conn.executemany("INSERT INTO nodes (name) VALUES (?)", [(n,) for n in names])
        ids = dict(conn.execute("SELECT name, id FROM nodes"))
        conn.execute("COMMIT")
        seal = chain.Seal(present=True)
        metric_rows_total = 0
        none = chain.digest([])
        start = time.perf_counter()
        first_metric_day = days - min(metric_days, days)
        first_full_day = days - min(full_days, days)
        for i, name in enumerate(names):
            nid = ids[name]
            conn.execute("BEGIN")
            blob = results_blob([Result.from_json({**d, "node": name})  # as History.record
                                 for d in night.results])
            sids: list[int] = []
            if metric_days:
                conn.executemany(
                    "INSERT INTO series (node_id, check_name, subject, metric, unit) "
                    "VALUES (?,?,?,?,?)", [(nid, m[0], m[1], m[2], m[4] or "")
                                           for m in night.metrics])
                found = {tuple(r[1:]): r[0] for r in conn.execute(
                    "SELECT id, check_name, subject, metric FROM series WHERE node_id = ?",
                    (nid,))}
                sids = [found[(m[0], m[1], m[2])] for m in night.metrics]
            stub = integrity.PRUNED + integrity.results_digest(blob).encode()
            digest = chain.digest([(m[0], m[1], m[2], m[3]) for m in night.metrics])
            rows, metric_rows = [], []
            prev = ""
            for d in range(days):
                t, rk, run_id = times[d], run_keys[d], run_ids[d]
                measured = d >= first_metric_day
                link = (d + 1, prev, digest if measured else none)
                mac = integrity.mac(key, name, run_id, t, PROFILE, code, tally_t, blob, link,
                                    by_digest=True)
                kept = blob if d >= first_full_day else stub
                rows.append((rk, nid, t, PROFILE, code, *tally_t, kept, mac, *link))
                if measured:
                    metric_rows += [(nid, t, rk, sid, m[3])
                                    for sid, m in zip(sids, night.metrics, strict=True)]
                prev = mac
            conn.executemany(
                "INSERT INTO node_runs (run_key, node_id, time, profile, exit_code, fail, "
                "error, warn, skip, pass, results, mac, seq, prev, metrics_digest) VALUES "
                "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            conn.executemany("INSERT INTO metrics VALUES (?,?,?,?,?)", metric_rows)
            conn.execute("COMMIT")
            metric_rows_total += len(metric_rows)
            seal.heads[name] = (days, prev)
            seal.pins[name] = (PROFILE, run_ids[-1])
            if i % 1024 == 1023:
                say(f"  {i + 1} nodes x {days} nights, {time.perf_counter() - start:.0f} s",
                    flush=True)
        conn.execute("PRAGMA journal_mode = WAL")
        with chain.locked(path, shared=False):
            chain.write(path, key, seal)
    return {"nodes": n_nodes, "runs": days, "node_runs": n_nodes * days,
            "results": n_nodes * days * len(night.results), "metric_rows": metric_rows_total}
