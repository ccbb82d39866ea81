"""The release gate's verdict is recorded in history (a `gate-release` run, a row per canary
in gate_decisions) and `stetho history decisions` shows it, beside the shadow decisions.
Real CLI and SQLite; the release gate here cannot evaluate (one control, below the policy's
two), which it decides before asking Slurm for anything."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stetho.gate.release.ledger import decisions
from stetho.gate.release.run import ReleaseOutcome
from tests.conftest import REPO


def _stetho(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env=dict(os.environ))


def _release_gate(tmp_path: Path) -> Path:
    """A release gate that cannot evaluate (one control) recorded in a new history: its path."""
    topo = tmp_path / "topology.conf"
    topo.write_text("SwitchName=leaf1 Nodes=n[01-04]\nSwitchName=leaf2 Nodes=n[05-08]\n"
                    "SwitchName=spine Switches=leaf[1-2]\n")
    db = tmp_path / "h.db"
    gate = _stetho("gate", "--policy", "release", "--canaries", "n[01,05]", "--controls",
                   "n07", "--topology", str(topo), "--gpus-per-node", "1", "--db", str(db))
    assert gate.returncode == 3, gate.stdout + gate.stderr
    return db


def test_the_release_gates_verdict_is_shown_by_history_decisions(tmp_path: Path) -> None:
    db = _release_gate(tmp_path)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT kind, exit_code, nodes FROM runs").fetchall() == [
            ("gate-release", 3, 2)]
    shown = _stetho("history", "decisions", "--db", str(db))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert [ln.split()[1:3] for ln in lines] == [["HOLD", "*"], ["UNEVALUATED", "n01"],
                                                 ["UNEVALUATED", "n05"]]
    assert all("policy release (release): single-node all_reduce" in ln for ln in lines)
    # the release's own decision says why it is held, in words
    assert "why: COULD NOT EVALUATE: release gate, canaries against controls" in lines[0]
    assert "canaries n[01,05] vs controls n07" in lines[0]
    assert "single-node all_reduce: unknown: " in lines[0]
    one = _stetho("history", "decisions", "--db", str(db), "--node", "n05")
    # the node's own row, and the verdict on the release it was part of
    assert [ln.split()[1:3] for ln in one.stdout.splitlines()] == [["HOLD", "*"],
                                                                  ["UNEVALUATED", "n05"]]
    none = _stetho("history", "decisions", "--db", str(db), "--node", "n02")
    assert none.stdout.strip() == "no gate decisions in the last 30d for node n02"


def test_history_decisions_json_has_the_tables_fields_and_the_raw_ones(tmp_path: Path) -> None:
    import json

    db = _release_gate(tmp_path)
    table = _stetho("history", "decisions", "--db", str(db)).stdout.splitlines()
    shown = _stetho("history", "decisions", "--db", str(db), "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert len(doc) == len(table) and doc
    for row, line in zip(doc, table, strict=True):
        # every field the table shows, as it shows it, and the raw epoch and verdict
        assert line.startswith(f"{row['time']}  {row['verdict'].upper()}")
        assert f" {row['node']}  policy {row['policy']} ({row['mode']})" in line
        assert line.endswith(f"[run {row['run']}]") and row["reason"] in line
        assert all(c in line for c in row["checks"])
        assert isinstance(row["epoch"], int) and row["time"].endswith("Z")
    assert [(r["node"], r["verdict"]) for r in doc if r["node"] == "*"] == [("*", "hold")]
    assert doc[0]["reason"].startswith("COULD NOT EVALUATE: release gate")
    canaries = [r for r in doc if r["node"] != "*"]
    assert [(r["node"], r["verdict"], r["mode"]) for r in canaries] == [
        ("n01", "unevaluated", "release"), ("n05", "unevaluated", "release")]
    assert canaries[0]["checks"][0] == "single-node all_reduce"
    one = json.loads(_stetho("history", "decisions", "--db", str(db), "--node", "n05",
                             "--json").stdout)
    assert [r["node"] for r in one] == ["*", "n05"]
    from stetho.history.store import History

    with History(tmp_path / "empty.db"):
        pass
    empty = _stetho("history", "decisions", "--db", str(tmp_path / "empty.db"), "--json")
    assert empty.returncode == 0 and json.loads(empty.stdout) == []


def test_no_database_is_said_with_what_to_do(tmp_path: Path) -> None:
    shown = _stetho("history", "decisions", "--db", str(tmp_path / "none.db"))
    assert shown.returncode == 2 and "no history database" in shown.stderr


@pytest.mark.parametrize(("verdict", "expected", "release"), [
    ("pass", "go", "promote"), ("fail", "block", "hold"), ("unknown", "unevaluated", "hold")])
def test_each_canary_gets_the_releases_verdict_never_go_when_unknown(
        verdict: str, expected: str, release: str) -> None:
    out = ReleaseOutcome("rel", ["n1", "n2"], ["c1", "c2"], None, [], [], verdict,
                         stage="stage canary blocked: no further stage may proceed")
    made = decisions(out)
    assert [(d.node, d.verdict, d.mode) for d in made] == [
        ("*", release, "release"), ("n1", expected, "release"), ("n2", expected, "release")]
    assert made[0].reason.startswith(out.summary() + "; canaries n[1-2] vs controls c[1-2]")
    assert made[0].reason.endswith("; stage canary blocked: no further stage may proceed")
