"""Retention (`stetho history prune`): old results go, every row stays verifiable, and a pruned
row is never evidence: a node whose only fresh rows were pruned is not GO. Real SQLite files,
the real CLI."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import zlib

import pytest

from stetho.history import integrity
from stetho.history.errors import HistoryCorrupt
from stetho.history.store import History, NodeRun
from stetho.results import Result

PROFILE = "h100-sxm-8gpu"


def stetho(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=120)


def _record(db, run, when, status="pass", nodes=("n1", "n2")):
    with History(db) as h:
        h.record(run, "sweep", [NodeRun(n, PROFILE, [Result(n, "gpu_count", "", status,
                                                            "8 GPUs")], [])
                                for n in nodes], when=when)


def _policy(tmp_path):
    p = tmp_path / "ops.yml"
    p.write_text("policy: ops\nchecks: [gpu_count]\nblock_on: [fail]\nfreshness: 6h\n")
    return p


def test_prune_drops_old_results_and_every_row_still_verifies(tmp_path):
    db = tmp_path / "h.db"
    now = time.time()
    for day in (40, 35, 1):
        _record(db, f"r{day}", now - day * 86400)
    with History(db) as h:
        done = h.prune(30 * 86400, now=now)
        assert (done.rows, done.already, done.kept_old_format) == (4, 0, 0)
        assert h.prune(30 * 86400, now=now).already == 4  # idempotent
        blobs = [b for (b,) in h.conn.execute("SELECT results FROM node_runs ORDER BY time")]
        assert all(integrity.pruned(b) for b in blobs[:4]) and not integrity.pruned(blobs[4])
        # the whole chain, pruned rows included, verifies down to seq 1
        assert h.reseal() == 2
        assert len(h.clean_runs("n1")) == 3  # the verdict counts of pruned rows still count
        latest = h.latest_per_check(["n1"], 60 * 86400, now=now)["n1"]
        assert latest.distrusted is None and latest.runs() == ["r1"]


def test_a_node_whose_only_fresh_rows_are_pruned_is_not_go(tmp_path):
    db = tmp_path / "h.db"
    _record(db, "r", time.time() - 2 * 3600)
    gate = ["gate", "--policy", str(_policy(tmp_path)), "--nodes", "n[1-2]", "--db", str(db),
            "--no-reports", "--out", str(tmp_path / "runs")]
    assert stetho(*gate).returncode == 0
    proc = stetho("history", "prune", "--keep-results", "1h", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "pruned the results of 2 node-runs older than 1h" in proc.stdout
    proc = stetho(*gate)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gate ops: COULD NOT EVALUATE") and "0 go" in last, last


def test_prune_refuses_an_edited_row_and_a_forged_pruned_row_is_refused(tmp_path):
    db = tmp_path / "h.db"
    _record(db, "old", time.time() - 3 * 86400, status="fail")
    _record(db, "new", time.time() - 60, status="fail")
    with sqlite3.connect(db) as c:  # old: fail -> pass, without the key
        (blob,) = c.execute("SELECT results FROM node_runs WHERE run_key = 1 LIMIT 1"
                            ).fetchone()
        c.execute("UPDATE node_runs SET results = ? WHERE run_key = 1",
                  (zlib.compress(zlib.decompress(blob).replace(b'"fail"', b'"pass"')),))
    with History(db) as h, pytest.raises(HistoryCorrupt, match="prune refused: history row "
                                         "for node n1 .* failed its integrity check"):
        h.prune(86400)
    # the newest, failing row swapped for a "pruned" stub: its MAC does not cover that
    with sqlite3.connect(db) as c:
        c.execute("UPDATE node_runs SET results = ? WHERE run_key = 2",
                  (integrity.PRUNED + b"0" * 64,))
    proc = stetho("gate", "--policy", str(_policy(tmp_path)), "--nodes", "n[1-2]", "--db",
                  str(db), "--no-reports", "--out", str(tmp_path / "runs"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "failed its integrity check" in proc.stdout


def test_rows_signed_before_schema_5_are_kept_whole(tmp_path):
    db = tmp_path / "h.db"
    _record(db, "old", time.time() - 3 * 86400)
    with History(db) as h:  # re-sign the rows the schema-4 way (over the blob's bytes)
        key = h.rows.key(create=False)
        for _key, nid, t, prof, code, *rest in h.conn.execute(
                "SELECT nr.run_key, nr.node_id, nr.time, nr.profile, nr.exit_code, nr.fail, "
                "nr.error, nr.warn, nr.skip, nr.pass, nr.seq, nr.prev, nr.metrics_digest, "
                "nr.results, n.name FROM node_runs nr JOIN nodes n ON n.id = nr.node_id"
                ).fetchall():
            *tally, seq, prev, digest, blob, name = rest
            assert key is not None
            sig = integrity.mac(key, name, "old", t, prof, code, tuple(tally), blob,
                                (seq, prev, digest))
            h.conn.execute("UPDATE node_runs SET mac = ? WHERE node_id = ?", (sig, nid))
        h.reseal()
        done = h.prune(86400)
        assert (done.rows, done.kept_old_format) == (0, 2)
        assert h.latest_per_check(["n1"], 7 * 86400)["n1"].distrusted is None
