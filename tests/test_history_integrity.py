"""History rows are signed with the controller's key: a results blob edited from fail to
pass, a signature stripped, a row moved to another node, or rows from before signing never
make a node GO. Real simulated node, real SQLite files edited with sqlite3, the real CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from stetho.history.store import MIGRATIONS, SCHEMA_VERSION, History, NodeRun
from stetho.results import Result

PROFILE = "h100-sxm-8gpu"


def stetho(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    out = os.path.join(os.environ["STETHO_TEST_HOME"], "gate-runs")
    if args and args[0] == "gate":
        args = (*args, "--out", out, "--no-reports")
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "STETHO_GATE_OUT": out, "STETHO_PROFILE": PROFILE,
                               **(env or {})})


@pytest.fixture(scope="module")
def rot(tmp_path_factory):
    """A simulated node whose NVMe disk reports rotational=1 (only disk_rotational fails)."""
    from stetho.sim.builder import build_node

    return build_node(tmp_path_factory.mktemp("sim") / "rot", "rot", ["nvme-rotational"])


@pytest.fixture
def ops(tmp_path: Path) -> Path:
    policy = tmp_path / "ops.yml"
    policy.write_text("policy: ops\nchecks: [gpu_count]\nblock_on: [fail]\nfreshness: 6h\n")
    return policy


def _gate(db: Path, nodes: str, policy: str) -> subprocess.CompletedProcess[str]:
    return stetho("gate", "--policy", policy, "--nodes", nodes, "--db", str(db))


def _launder(db: Path) -> None:
    """What someone with write access to the database but not the key does: every result
    of every row made a pass, the counts and exit code to match."""
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT run_key, node_id, time, results FROM node_runs").fetchall()
        for run_key, node_id, t, blob in rows:
            results = json.loads(zlib.decompress(blob))
            for r in results:
                r["status"] = "pass"
            c.execute("UPDATE node_runs SET results = ?, fail = 0, error = 0, warn = 0, "
                      "skip = 0, pass = ?, exit_code = 0 WHERE run_key = ? AND node_id = ? "
                      "AND time = ?", (zlib.compress(json.dumps(results).encode()),
                                       len(results), run_key, node_id, t))


def _summary(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout.strip().splitlines()[-1]


def test_a_failing_row_edited_to_pass_is_not_go(rot, tmp_path):
    db = tmp_path / "h.db"
    check = stetho("check", "--sim", str(rot), "--db", str(db), "-q")
    assert check.returncode == 1, check.stdout + check.stderr
    blocked = _gate(db, "rot", "pre-job")
    assert blocked.returncode == 1 and "BLOCK rot/nvme3n1 disk_rotational" in blocked.stdout
    _launder(db)
    proc = _gate(db, "rot", "pre-job")  # pre-job blocks on error: drained, never GO
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _summary(proc).startswith("gate pre-job: BLOCKED: 1 nodes, 0 go, 1 blocked (rot)")
    assert "BLOCK rot gate: history row for node rot (run " in proc.stdout
    assert ") failed its integrity check: its content is not what stetho wrote (the database " \
        "was edited) -> find who could write the history database" in proc.stdout
    assert "disk_rotational" not in proc.stdout  # the edited row is not read at all


def _signed(db: Path, node: str = "n1", status: str = "fail", run: str = "r1") -> None:
    with History(db) as h:
        h.record(run, "check", [NodeRun(node, PROFILE, [
            Result(node, "gpu_count", "", status, "7 GPUs")], [])], when=time.time() - 60)


def test_a_stripped_signature_is_not_go(tmp_path, ops):
    db = tmp_path / "h.db"
    _signed(db)
    _launder(db)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE node_runs SET mac = NULL")
    proc = _gate(db, "n1", str(ops))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert ("could not evaluate 1 (n1; n1: history row for node n1 (run r1) failed its "
            "integrity check: it has no signature where the database signs every row"
            ) in _summary(proc)


def test_a_row_moved_to_another_node_is_not_go(tmp_path, ops):
    db = tmp_path / "h.db"
    _signed(db, "good", "pass")
    _signed(db, "bad", "fail", "r2")
    with sqlite3.connect(db) as c:  # bad's name given to good's row, and good's to bad's
        c.execute("UPDATE nodes SET name = 'tmp' WHERE name = 'good'")
        c.execute("UPDATE nodes SET name = 'good' WHERE name = 'bad'")
        c.execute("UPDATE nodes SET name = 'bad' WHERE name = 'tmp'")
    proc = _gate(db, "bad", str(ops))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "bad: history row for node bad (run r1) failed its integrity check" in _summary(proc)


def test_an_untouched_signed_row_is_believed(tmp_path, ops):
    db = tmp_path / "h.db"
    _signed(db, status="pass")
    key = db.with_name("h.db.key")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == 32
    proc = _gate(db, "n1", str(ops))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _summary(proc).startswith("gate ops: GO: 1 nodes, 1 go")


def test_a_missing_key_makes_signed_rows_unverifiable(tmp_path, ops):
    db = tmp_path / "h.db"
    _signed(db, status="pass")
    db.with_name("h.db.key").unlink()
    proc = _gate(db, "n1", str(ops))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "(n1; n1: history row for node n1 (run r1) failed its integrity check: the key " \
        f"{db.parent}" in _summary(proc)


def test_a_key_file_others_can_read_or_a_planted_link_is_refused(tmp_path, ops):
    db = tmp_path / "h.db"
    _signed(db, status="pass")
    key = db.with_name("h.db.key")
    key.chmod(0o644)
    proc = _gate(db, "n1", str(ops))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "mode 0644 lets others read or change it; it must be 0600" in _summary(proc)
    key.chmod(0o600)
    other = tmp_path / "fresh.db"
    planted = other.with_name("fresh.db.key")
    planted.symlink_to(key)  # a link planted where the first write will make the key
    with pytest.raises(Exception, match="a symbolic link is refused"):
        _signed(other, status="pass")
    assert planted.is_symlink() and key.stat().st_size == 32


def _old_database(db: Path, status: str) -> None:
    """A database stetho wrote before rows were signed (schema 2), holding one fresh row."""
    with sqlite3.connect(db) as c:
        for version in (1, 2):
            for stmt in MIGRATIONS[version]:
                c.execute(stmt)
        c.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', '2')")
        t = int(time.time()) - 60
        c.execute("INSERT INTO runs (key, id, kind, time) VALUES (1, 'old', 'check', ?)", (t,))
        c.execute("INSERT INTO nodes (id, name) VALUES (1, 'n1')")
        blob = zlib.compress(json.dumps([Result("n1", "gpu_count", "", status, "8 GPUs")
                                         .to_json()]).encode())
        c.execute("INSERT INTO node_runs VALUES (1, 1, ?, ?, 0, 0, 0, 0, 0, 1, ?)",
                  (t, PROFILE, blob))


def test_rows_from_before_signing_are_unverified_and_new_ones_count(tmp_path, ops):
    db = tmp_path / "old.db"
    _old_database(db, "pass")
    proc = _gate(db, "n1", str(ops))
    assert proc.returncode == 3, proc.stdout + proc.stderr  # an unsigned pass is no pass
    assert "could not evaluate 1 (n1; n1: no result younger than 6 h for gpu_count" \
        in _summary(proc)
    with History(db) as h:
        assert h.schema_version() == SCHEMA_VERSION
        assert h.conn.execute("SELECT mac FROM node_runs").fetchone()[0] is None  # not laundered
    _signed(db, status="pass", run="new")  # a run recorded after the upgrade is signed and believed
    assert _gate(db, "n1", str(ops)).returncode == 0
