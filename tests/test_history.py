"""The history database with real files and real processes: schema, migrations, concurrent
writers, a writer killed mid-transaction, and the `stetho history` command."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stetho.errors import ConfigError
from stetho.history.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    History,
    HistoryError,
    NodeRun,
    parse_since,
)
from stetho.results import Result


def _node(name, n_metrics=5, value=1.0, status="pass"):
    results = [Result(name, "gpu_temperature", f"gpu{i}", status, "ok", 40.0 + i, "C")
               for i in range(2)]
    metrics = [["gpu", f"gpu{i % 8}", f"m{i}", value + i, "C"] for i in range(n_metrics)]
    return NodeRun(name, "h100-sxm-8gpu", results, metrics)


def test_record_and_read_back(tmp_path):
    with History(tmp_path / "h.db") as h:
        assert h.schema_version() == SCHEMA_VERSION
        h.record("run1", "sweep", [_node("n1"), _node("n2", value=5)], when=1000)
        h.record("run2", "sweep", [_node("n1", value=2)], when=2000)
        series = h.series_of("n1", metric="m0")
        assert [s[1:] for s in series] == [("gpu", "gpu0", "m0", "C")]
        samples = h.samples("n1", [series[0][0]], since=0)[series[0][0]]
        assert [(s.time, s.value, s.run) for s in samples] == [(1000, 1.0, "run1"),
                                                               (2000, 2.0, "run2")]
        latest = h.latest_results(["n1", "n2"], max_age_s=10**9, now=2500)
        assert latest["n1"][0] == 2000 and latest["n1"][1] == "run2"
        assert latest["n2"][1] == "run1" and latest["n2"][2][0].value == 40.0
        assert h.latest_results(["n1"], max_age_s=100, now=2500) == {}
        long = list(h.conn.execute("SELECT run, time, node, \"check\", subject, metric, value, "
                                   "unit FROM metrics_long WHERE node='n2' AND metric='m1'"))
        assert long == [("run1", 1000, "n2", "gpu", "gpu1", "m1", 6.0, "C")]


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "h.db"
    History(path).close()
    with sqlite3.connect(path) as c:
        c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                  (str(SCHEMA_VERSION + 1),))
    with pytest.raises(HistoryError, match="newer than this stetho"):
        History(path)


def test_not_a_stetho_database(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE runs (x)")
    with pytest.raises(HistoryError, match="no stetho schema version"):
        History(path)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(HistoryError):
        History(garbage)


def test_migrations_apply_in_order_from_an_empty_database(tmp_path):
    with History(tmp_path / "h.db") as h:
        tables = {r[0] for r in h.conn.execute("SELECT name FROM sqlite_master")}
    assert {"meta", "runs", "nodes", "series", "metrics", "node_runs", "metrics_long"} <= tables


_WRITER = textwrap.dedent("""
    import sys, time
    from stetho.history.store import History, NodeRun
    from stetho.results import Result
    path, who, runs, metrics = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    h = History(path)
    for i in range(runs):
        nodes = [NodeRun(f"{who}-n{k}", "p", [Result(f"{who}-n{k}", "c", "", "pass")],
                         [["c", f"s{j % 10}", f"m{j}", float(i), ""] for j in range(metrics)])
                 for k in range(4)]
        h.record(f"{who}-run{i}", "check", nodes, when=1000 + i)
        print("recorded", i, flush=True)
""")


def test_four_processes_writing_at_once_lose_no_rows(tmp_path):
    path = tmp_path / "h.db"
    History(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), f"w{w}", "15", "50"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    with History(path) as h:
        assert h.conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 60
        assert h.conn.execute("SELECT count(*) FROM metrics").fetchone()[0] == 60 * 4 * 50
        assert h.conn.execute("SELECT count(*) FROM node_runs").fetchone()[0] == 60 * 4
        assert h.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_writer_killed_mid_write_leaves_the_database_consistent(tmp_path):
    path = tmp_path / "h.db"
    History(path).close()
    # Big runs, so the kill lands inside a transaction more often than not.
    p = subprocess.Popen([sys.executable, "-c", _WRITER, str(path), "k", "1000", "20000"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("recorded 0")
    time.sleep(0.3)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with History(path) as h:
        assert h.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        runs = h.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
        metrics = h.conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
        node_runs = h.conn.execute("SELECT count(*) FROM node_runs").fetchone()[0]
        assert runs >= 1
        assert metrics == runs * 4 * 20000 and node_runs == runs * 4  # whole runs only
        h.record("after-kill", "check", [_node("n1")])  # and it is still writable


@pytest.mark.parametrize("text, seconds", [("30d", 30 * 86400), ("12h", 43200),
                                           ("90m", 5400), ("2w", 14 * 86400)])
def test_parse_since(text, seconds):
    assert parse_since(text) == seconds


@pytest.mark.parametrize("bad", ["", "30", "d", "-1d", "1y"])
def test_parse_since_refuses(bad):
    with pytest.raises(ConfigError):
        parse_since(bad)


def test_history_cli(tmp_path):
    path = tmp_path / "h.db"
    now = time.time()
    with History(path) as h:
        for i in range(10):
            h.record(f"r{i}", "sweep", [_node("gpu001", value=float(i))],
                     when=now - (10 - i) * 86400)
    env = {**os.environ, "STETHO_DB": str(path)}
    proc = subprocess.run([sys.executable, "-m", "stetho", "history", "gpu001", "--since", "30d"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "gpu001: 5 metrics" in proc.stdout and "▁" in proc.stdout and "█" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "stetho", "history", "gpu001", "--metric", "m2",
                           "--since", "108h", "--json"], capture_output=True, text=True, env=env,
                          timeout=60)
    doc = json.loads(proc.stdout)
    (row,) = doc["series"]
    assert row["metric"] == "m2" and row["n"] == 4 and row["last"] == 11.0  # days -4..-1
    proc = subprocess.run([sys.executable, "-m", "stetho", "history", "gpu001;ls"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and "invalid node name" in proc.stderr


def test_history_piped_prints_whole_rows(tmp_path):
    """Piped into a file or grep, a row is never cut to a terminal's width (there is none)."""
    path = tmp_path / "h.db"
    subject = "mlx5_0/port1/" + "x" * 90  # a row well past 80 and 220 columns
    now = time.time()
    with History(path) as h:
        for i in range(3):
            h.record(f"r{i}", "sweep", [NodeRun("gpu001", "h100-sxm-8gpu", [],
                                                [["ib", subject, "SymbolErrorCounter", i, ""]])],
                     when=now - (3 - i) * 3600)
    env = {**os.environ, "STETHO_DB": str(path), "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "stetho", "history", "gpu001"],
                          capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith("ib ")]
    assert subject in row and row.rstrip().endswith("▁▅█"), row
    assert len(row) > 80


def _schema5(db: Path, with_table: bool) -> None:
    """A database an older stetho wrote (schema 5); `with_table`: it had recorded shadow
    decisions, making gate_decisions outside the migrations as it then did."""
    with sqlite3.connect(db) as c:
        for version in range(1, 6):
            for stmt in MIGRATIONS[version]:
                c.execute(stmt)
        c.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', '5')")
        if with_table:
            c.execute("INSERT INTO runs (key, id, kind, time) VALUES (1, 'g', 'gate-shadow', 5)")
            c.execute(MIGRATIONS[6][0])
            c.execute("INSERT INTO gate_decisions VALUES (1, 5, 'tight', 'shadow', 'n1', "
                      "'block', '[\"gpu_ecc\"]')")


@pytest.mark.parametrize("with_table", [False, True])
def test_an_old_database_gains_gate_decisions_through_the_migration(tmp_path, with_table):
    from stetho.history import decisions

    db = tmp_path / "h.db"
    _schema5(db, with_table)
    with History(db) as h:
        assert h.schema_version() == SCHEMA_VERSION >= 6
        tables = {r[0] for r in h.conn.execute("SELECT name FROM sqlite_master")}
        assert "gate_decisions" in tables
        kept = [(run, d.node, d.verdict, d.reason) for run, _, d in decisions.read(h)]
    assert kept == ([("g", "n1", "block", "")] if with_table else [])  # no reason then
