"""A node's history rows are a hash chain with a seal beside the key: deleting a node's newest
rows, restoring an older copy of the database, deleting a row in the middle, editing a metric
or tampering with the seal never leaves an older pass standing as GO. Real simulated nodes, the
real CLI, SQLite files edited with sqlite3."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import pytest

from stetho.history import integrity
from stetho.history.store import MIGRATIONS, SCHEMA_VERSION, History, NodeRun
from stetho.results import Result

PROFILE = "h100-sxm-8gpu"


def stetho(*args: str) -> subprocess.CompletedProcess[str]:
    out = os.path.join(os.environ["STETHO_TEST_HOME"], "gate-runs")
    if args and args[0] == "gate":
        args = (*args, "--out", out, "--no-reports")
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "STETHO_GATE_OUT": out, "STETHO_PROFILE": PROFILE})


def _summary(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout.strip().splitlines()[-1]


def _errors(*args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, list[str]]]:
    """Run a `check` or `gate` with --json; its error messages per node, whole (the summary
    line shortens them)."""
    fd, out = tempfile.mkstemp(suffix=".json", dir=os.environ["STETHO_TEST_HOME"])
    os.close(fd)
    proc = stetho(*args, "--json", out)
    doc = json.loads(Path(out).read_text() or "{}")
    found: dict[str, list[str]] = {}
    for r in doc.get("results", []):
        if r["status"] == "error":
            found.setdefault(r["node"], []).append(f"{r['check']}: {r['message']}")
    return proc, found


def _copy(src: Path, dst: Path) -> Path:
    """A database with its key and seal, as a backup of all three would hold them."""
    for suffix in ("", ".key", ".seal"):
        shutil.copy2(src.with_name(src.name + suffix), dst.with_name(dst.name + suffix))
    return dst


@pytest.fixture(scope="module")
def sims(tmp_path_factory) -> Path:
    """nA healthy, nA with a rotational NVMe disk (disk_rotational fails), nB healthy."""
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("chain-sims")
    build_node(root / "pass" / "nA", "nA", [])
    build_node(root / "fail" / "nA", "nA", ["nvme-rotational"])
    build_node(root / "pass" / "nB", "nB", [])
    return root


@pytest.fixture(scope="module")
def recorded(sims, tmp_path_factory) -> tuple[Path, Path]:
    """(history after nA pass, nB pass, nA fail; a copy of all three files before the fail)."""
    root = tmp_path_factory.mktemp("chain-db")
    db = root / "h.db"
    for sim in ("pass/nA", "pass/nB"):
        proc = stetho("check", "--sim", str(sims / sim), "--db", str(db), "-q")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    before = _copy(db, root / "before.db")
    proc = stetho("check", "--sim", str(sims / "fail/nA"), "--db", str(db), "-q")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return db, before


def _gate(db: Path, policy: str = "pre-job") -> subprocess.CompletedProcess[str]:
    return stetho("gate", "--policy", policy, "--nodes", "nA,nB", "--db", str(db))


def _newest_key(db: Path, node: str) -> int:
    with sqlite3.connect(db) as c:
        return int(c.execute("SELECT max(run_key) FROM node_runs nr JOIN nodes n ON "
                             "n.id = nr.node_id WHERE n.name = ?", (node,)).fetchone()[0])


def _delete_run(db: Path, node: str, run_key: int) -> None:
    """What someone with write access to the database does to hide a run of a node: its row
    and its metrics gone."""
    with sqlite3.connect(db) as c:
        nid = c.execute("SELECT id FROM nodes WHERE name = ?", (node,)).fetchone()[0]
        assert c.execute("DELETE FROM node_runs WHERE node_id = ? AND run_key = ?",
                         (nid, run_key)).rowcount == 1
        c.execute("DELETE FROM metrics WHERE node_id = ? AND run_key = ?", (nid, run_key))


@pytest.fixture
def ops(tmp_path: Path) -> str:
    policy = tmp_path / "ops.yml"
    policy.write_text("policy: ops\nchecks: [disk_rotational, gpu_count]\nblock_on: [fail]\n"
                      "freshness: 6h\n")
    return str(policy)


def test_untouched_history_is_judged_from_its_newest_rows(recorded, ops):
    db, before = recorded
    proc = _gate(db)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "BLOCK nA/nvme3n1 disk_rotational" in proc.stdout
    assert _summary(proc).startswith("gate pre-job: BLOCKED: 2 nodes, 1 go, 1 blocked (nA)")
    healthy = _gate(before, ops)  # the copy before the failure, with its own seal: all GO
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert _summary(healthy).startswith("gate ops: GO: 2 nodes, 2 go")
    with sqlite3.connect(db) as c:  # nA's rows chained 1, 2 (the second links the first)
        rows = c.execute("SELECT nr.seq, nr.prev, nr.mac FROM node_runs nr JOIN nodes n ON "
                         "n.id = nr.node_id WHERE n.name = 'nA' ORDER BY nr.time").fetchall()
    assert [r[0] for r in rows] == [1, 2] and rows[0][1] == "" and rows[1][1] == rows[0][2]
    assert (db.with_name("h.db.seal").stat().st_mode & 0o777) == 0o600


def test_deleting_the_failing_run_does_not_bring_back_the_pass(recorded, tmp_path, ops):
    db = _copy(recorded[0], tmp_path / "h.db")
    _delete_run(db, "nA", _newest_key(db, "nA"))
    named = ("history of node nA was rolled back or its newest rows deleted (seal says seq 2, "
             "db has 1)")
    proc = _gate(db)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"BLOCK nA gate: {named}" in proc.stdout
    assert _summary(proc).startswith("gate pre-job: BLOCKED: 2 nodes, 1 go, 1 blocked (nA)")
    # a policy blocking on failures only: nA cannot be evaluated, nB is judged
    proc, errors = _errors("gate", "--policy", ops, "--nodes", "nA,nB", "--db", str(db))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert _summary(proc).startswith("gate ops: COULD NOT EVALUATE: 2 nodes, 1 go, 0 blocked; "
                                     "could not evaluate 1 (nA; nA: history of node nA was ")
    assert list(errors) == ["nA"] and errors["nA"][0].startswith(f"gate: {named} (restore the "
                                                                 "database from the backup")


def test_restoring_an_older_copy_of_the_database_is_detected(recorded, tmp_path, ops):
    db, before = recorded
    restored = _copy(db, tmp_path / "h.db")
    shutil.copy2(before, restored)  # the database from before the failure, today's seal kept
    proc, errors = _errors("gate", "--policy", ops, "--nodes", "nA,nB", "--db", str(restored))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert errors == {"nA": ["gate: history of node nA was rolled back or its newest rows "
                             "deleted (seal says seq 2, db has 1) (restore the database from "
                             "the backup taken with its seal, or record a fresh result: stetho "
                             "sweep --limit nA)"]}


def _narrow(db: Path, run: str, status: dict[str, str], when: float) -> None:
    with History(db) as h:
        h.record(run, "check", [NodeRun("nA", PROFILE, [
            Result("nA", check, "", s, s) for check, s in status.items()], [])], when=when)


def test_deleting_a_middle_row_the_gate_reads_is_detected(tmp_path, ops):
    db = tmp_path / "h.db"
    now = time.time()
    _narrow(db, "full", {"disk_rotational": "pass", "gpu_count": "pass"}, now - 300)
    _narrow(db, "narrow-fail", {"disk_rotational": "fail"}, now - 200)
    _narrow(db, "narrow-pass", {"gpu_count": "pass"}, now - 100)
    blocked = stetho("gate", "--policy", ops, "--nodes", "nA", "--db", str(db))
    assert blocked.returncode == 1 and "BLOCK nA disk_rotational" in blocked.stdout
    with sqlite3.connect(db) as c:
        key = c.execute("SELECT key FROM runs WHERE id = 'narrow-fail'").fetchone()[0]
    _delete_run(db, "nA", key)
    proc, errors = _errors("gate", "--policy", ops, "--nodes", "nA", "--db", str(db))
    assert proc.returncode == 3, proc.stdout + proc.stderr  # not the older pass
    assert errors == {"nA": ["gate: history of node nA has a row missing: seq 3 follows seq 1 "
                             "(a row between was deleted; restore the database from its "
                             "backup)"]}


def _check(sims: Path, sim: str, db: Path
           ) -> tuple[subprocess.CompletedProcess[str], dict[str, list[str]]]:
    return _errors("check", "--sim", str(sims / sim), "--db", str(db), "-q")


def test_deleting_a_middle_run_breaks_drift_with_a_named_error(sims, tmp_path):
    db = tmp_path / "h.db"
    for _ in range(3):
        assert _check(sims, "pass/nB", db)[0].returncode == 0
    with sqlite3.connect(db) as c:
        keys = [k for (k,) in c.execute("SELECT run_key FROM node_runs ORDER BY seq")]
    _delete_run(db, "nB", keys[1])
    proc, errors = _check(sims, "pass/nB", db)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert errors == {"nB": ["drift_shift: history of node nB has a row missing: seq 3 follows "
                             "seq 1 (a row between was deleted; restore the database from its "
                             "backup)"]}


def test_an_edited_metric_is_a_named_error_where_drift_reads_it(sims, tmp_path):
    db = tmp_path / "h.db"
    for _ in range(2):
        assert _check(sims, "pass/nB", db)[0].returncode == 0
    with sqlite3.connect(db) as c:  # one measured value of the first run changed
        run_key, run = c.execute("SELECT key, id FROM runs ORDER BY key LIMIT 1").fetchone()
        sid = c.execute("SELECT min(series_id) FROM metrics WHERE run_key = ?",
                        (run_key,)).fetchone()[0]
        assert c.execute("UPDATE metrics SET value = value + 1 WHERE run_key = ? AND "
                         "series_id = ?", (run_key, sid)).rowcount == 1
    proc, errors = _check(sims, "pass/nB", db)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert errors == {"nB": [f"drift_shift: metrics of node nB in run {run} failed their "
                             "integrity check: they are not what stetho wrote (the database "
                             "was edited): restore it from its backup"]}
    with sqlite3.connect(db) as c:  # the verdict was still recorded, with the error in it
        assert c.execute("SELECT count(*) FROM node_runs WHERE error > 0").fetchone()[0] == 1


@pytest.mark.parametrize("moved", ["all", "one"])
def test_readings_moved_in_time_are_a_named_error_where_drift_reads_them(sims, tmp_path,
                                                                          moved):
    """The digest holds the values, not their time: a run's readings moved to another
    time (all of them, so its digest still matches; or one) would change the span a
    counter's growth and a gauge's trend are judged over."""
    db = tmp_path / "h.db"
    for _ in range(2):
        assert _check(sims, "pass/nB", db)[0].returncode == 0
    with sqlite3.connect(db) as c:
        run_key, run = c.execute("SELECT key, id FROM runs ORDER BY key LIMIT 1").fetchone()
        one = "" if moved == "all" else (
            " AND series_id = (SELECT min(series_id) FROM metrics WHERE run_key = ?)")
        assert c.execute("UPDATE metrics SET time = time - 3600 WHERE run_key = ?" + one,
                         (run_key,) * (1 if moved == "all" else 2)).rowcount >= 1
    proc, errors = _check(sims, "pass/nB", db)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert errors == {"nB": [f"drift_shift: metrics of node nB in run {run} are not at the "
                             "time its signed row holds (the database was edited): restore "
                             "it from its backup"]}


@pytest.mark.parametrize("tamper, named", [
    ("link", "cannot open it (Too many levels of symbolic links; a symbolic link is refused)"),
    ("mode", "mode 0644 lets others read or change it; it must be 0600"),
    ("edit", "its signature does not match (it was edited or made without the key)"),
    ("garbage", "not a seal stetho wrote (unreadable)"),
])
def test_a_tampered_seal_is_a_named_error(recorded, tmp_path, tamper, named):
    db = _copy(recorded[0], tmp_path / "h.db")
    seal = db.with_name("h.db.seal")
    if tamper == "link":
        real = seal.rename(tmp_path / "elsewhere")
        seal.symlink_to(real)
    elif tamper == "mode":
        seal.chmod(0o644)
    elif tamper == "edit":  # nA's head put back to its passing row, signature kept
        doc = json.loads(seal.read_bytes())
        with sqlite3.connect(db) as c:
            first = c.execute("SELECT nr.mac FROM node_runs nr JOIN nodes n ON n.id = "
                              "nr.node_id WHERE n.name = 'nA' AND nr.seq = 1").fetchone()[0]
        doc["heads"]["nA"] = [1, first]
        seal.write_bytes(json.dumps(doc).encode())
    else:
        seal.write_bytes(b"\x00not json")
    proc = _gate(db)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert _summary(proc).startswith("gate pre-job: BLOCKED: 2 nodes, 0 go, 2 blocked (nA,nB); "
                                     f"history unavailable: history seal {seal}: {named}")


def test_a_missing_seal_is_named_and_no_run_is_recorded_over_it(recorded, sims, tmp_path, ops):
    db = _copy(recorded[0], tmp_path / "h.db")
    db.with_name("h.db.seal").unlink()
    proc, errors = _errors("gate", "--policy", ops, "--nodes", "nA,nB", "--db", str(db))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert sorted(errors) == ["nA", "nB"]
    assert errors["nA"][0].startswith(f"gate: history of node nA cannot be verified: its seal "
                                      f"{db}.seal is missing while the database holds chained "
                                      "rows (restore the .seal file from the backup")
    check, _ = _check(sims, "pass/nB", db)
    assert f"history seal {db}.seal is missing while {db} holds chained rows; this run was " \
        "not recorded" in check.stderr
    assert not db.with_name("h.db.seal").exists()  # not laundered by the next write
    refused = stetho("history", "reseal", "--db", str(db))
    assert refused.returncode == 2 and "--launder" in refused.stderr
    resealed = stetho("history", "reseal", "--db", str(db), "--launder")
    assert resealed.returncode == 0, resealed.stdout + resealed.stderr
    assert "sealed 2 nodes" in resealed.stdout
    after = _gate(db)  # believed again, as the rows stand: nA's failure among them
    assert "BLOCK nA/nvme3n1 disk_rotational" in after.stdout


def _schema3(db: Path) -> None:
    """A database stetho wrote with signed but unchained rows (schema 3), one fresh pass."""
    with sqlite3.connect(db) as c:
        for version in (1, 2, 3):
            for stmt in MIGRATIONS[version]:
                c.execute(stmt)
        c.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', '3')")
        t = int(time.time()) - 600
        c.execute("INSERT INTO runs (key, id, kind, time) VALUES (1, 'old', 'check', ?)", (t,))
        c.execute("INSERT INTO nodes (id, name) VALUES (1, 'nA')")
        blob = zlib.compress(json.dumps([Result("nA", "gpu_count", "", "pass", "8 GPUs")
                                         .to_json()]).encode())
        key = integrity.load_or_create(integrity.key_path(db))
        sig = integrity.mac(key, "nA", "old", t, PROFILE, 0, (0, 0, 0, 0, 1), blob)
        c.execute("INSERT INTO node_runs VALUES (1, 1, ?, ?, 0, 0, 0, 0, 0, 1, ?, ?)",
                  (t, PROFILE, blob, sig))


def test_the_chain_starts_at_the_upgrade_and_covers_what_follows(tmp_path):
    db = tmp_path / "h.db"
    _schema3(db)
    policy = tmp_path / "p.yml"
    policy.write_text("policy: p\nchecks: [gpu_count]\nblock_on: [fail]\nfreshness: 6h\n")
    gate = ["gate", "--policy", str(policy), "--nodes", "nA", "--db", str(db)]
    assert stetho(*gate).returncode == 0  # a signed row from before the chain: as before
    _narrow(db, "new", {"gpu_count": "fail"}, time.time() - 60)
    with History(db) as h:
        assert h.schema_version() == SCHEMA_VERSION
        assert h.conn.execute("SELECT seq FROM node_runs ORDER BY time").fetchall() == \
            [(None,), (1,)]
    assert stetho(*gate).returncode == 1
    _delete_run(db, "nA", _newest_key(db, "nA"))
    proc = stetho(*gate)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "history of node nA was rolled back or its newest rows deleted (seal says seq 1, " \
        "the database's newest row is from before the chain)" in _summary(proc)


@pytest.mark.parametrize("tamper", ["untouched", "edited to generic", "deleted"])
def test_the_profile_pin_cannot_be_moved_by_editing_or_deleting_rows(tmp_path, tamper):
    """nA was last recorded as an H100 two days ago; its fresh pass was judged as generic,
    so it cannot be evaluated. Making the old row name generic, or deleting it, would leave
    no pin, and the generic pass would count: the seal keeps the pin."""
    db = tmp_path / "h.db"
    with History(db) as h:
        h.record("old", "check", [NodeRun("nA", PROFILE, [
            Result("nA", "gpu_count", "", "pass", "8 GPUs")], [])], when=time.time() - 2 * 86400)
        h.record("new", "check", [NodeRun("nA", "generic", [
            Result("nA", "gpu_count", "", "pass", "8 GPUs")], [])], when=time.time() - 60)
    with sqlite3.connect(db) as c:
        if tamper == "edited to generic":
            c.execute("UPDATE node_runs SET profile = 'generic' WHERE profile = ?", (PROFILE,))
        elif tamper == "deleted":
            c.execute("DELETE FROM node_runs WHERE profile = ?", (PROFILE,))
    policy = tmp_path / "p.yml"
    policy.write_text("policy: p\nchecks: [gpu_count]\nblock_on: [fail]\nfreshness: 6h\n")
    proc, errors = _errors("gate", "--policy", str(policy), "--nodes", "nA", "--db", str(db))
    assert proc.returncode == 3, proc.stdout + proc.stderr  # never GO
    assert errors == {"nA": [f"gate: judged as generic, pinned {PROFILE} (last recorded with "
                             "it in run old): gpu_count"]}


def test_a_seal_verifies_whichever_encoder_writes_its_text_and_never_once_edited(tmp_path):
    """The seal's MAC is checked against orjson's text of its heads and pins, and where
    that differs from json's (a name past ASCII, which json escapes) against json's: a seal
    stetho wrote always reads; an edited head, pin or MAC never does."""
    import orjson

    from stetho.history import chain
    from stetho.history.errors import HistoryKeyError

    key = b"k" * 32
    path = tmp_path / "h.db.seal"
    for profile, same in (("h100-sxm-8gpu", True), ("h100-\u00e9t\u00e9", False)):
        seal = chain.Seal({"gpu01": (7, "ab" * 32), "gpu02": (3, "cd" * 32)}, True, str(path),
                          {"gpu01": (profile, "run-1")})
        texts = chain._canonical(seal)
        assert (orjson.dumps(texts) == json.dumps(texts, separators=(",", ":")).encode()) \
            is same
        data = chain.dump(key, seal)
        got = chain.parse(path, data, key)
        assert (got.heads, got.pins) == (seal.heads, seal.pins)
        for edit in (data.replace(b"[7,", b"[8,"), data.replace(b"h100-", b"h200-"),
                     data.replace(b'"mac":"', b'"mac":"0')):
            assert edit != data
            with pytest.raises(HistoryKeyError):
                chain.parse(path, edit, key)
        with pytest.raises(HistoryKeyError):
            chain.parse(path, data, b"x" * 32)  # another key
