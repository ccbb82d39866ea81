"""Values from outside (a bundle, a results row, a node's outcome) that are malformed make
their node could-not-evaluate with the reason, and every other node is still judged
(issue 28): the replay and the gate through the CLI, each loader on seeded garbage."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import zlib

import pytest

from stetho.history.store import History, NodeRun
from stetho.results import Result


def stetho(*args, env=None):
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


# -- replay: one bad bundle among good ones ----------------------------------------------------

def _variants(base: dict) -> dict[str, tuple[str, str]]:
    """node -> (bundle text, what its error must say)."""
    def edit(node: str, change) -> str:
        d = json.loads(json.dumps(base))
        d["node"] = node
        change(d)
        return json.dumps(d)

    smi = "nvidia_smi"
    return {
        "status01": (edit("status01", lambda d: d["probes"][smi].update(status="GO")),
                     "unknown status 'GO'"),
        "rc01": (edit("rc01", lambda d: d["probes"][smi].update(rc=10**30)),
                 "is not an exit code"),
        "neg01": (edit("neg01", lambda d: d["probes"][smi].update(rc=-10**30)),
                  "is not an exit code"),
        "bigint01": (edit("bigint01", lambda d: d["probes"][smi].update(rc=12345))
                     .replace("12345", "9" * 5000), "digits"),
        "nan01": (edit("nan01", lambda d: d["probes"][smi].update(duration_s=1.5))
                  .replace("1.5", "NaN"), "NaN"),
        "surr01": (edit("surr01", lambda d: d["probes"][smi].update(stdout="XSURRX"))
                   .replace('"XSURRX"', '"\\udc80"'), "lone surrogate"),
        "deep01": (edit("deep01", lambda d: d["probes"][smi].update(files="XDEEPX"))
                   .replace('"XDEEPX"', "[" * 100000 + "]" * 100000), "nested deeper"),
        "path01": (edit("path01", lambda d: d.update(profile="../../../../etc/passwd")),
                   "profile must be a name"),
        "abs01": (edit("abs01", lambda d: d.update(profile="/etc/hostname")),
                  "profile must be a name"),
        "yml01": (edit("yml01", lambda d: d.update(profile="evil.yml")),
                  "profile must be a name"),
        "prof01": (edit("prof01", lambda d: d.update(profile="no-such-profile")),
                   "unknown profile 'no-such-profile'"),
    }


@pytest.mark.xdist_group("faultsim")
def test_a_replay_judges_every_good_node_beside_bad_bundles(fault_bundles, tmp_path):
    base = json.loads((fault_bundles / "healthy.json").read_text())
    folder = tmp_path / "bundles"
    folder.mkdir()
    (folder / "healthy.json").write_text(json.dumps(base))
    variants = _variants(base)
    for node, (text, _) in variants.items():
        (folder / f"{node}.json").write_text(text)
    out = tmp_path / "r.json"
    proc = stetho("check", "--evidence", str(folder), "--json", str(out), "-q")
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(out.read_text())["results"]
    healthy = [r for r in rows if r["node"] == "healthy"]
    assert len(healthy) > 90 and {r["status"] for r in healthy} <= {"pass", "skip"}
    assert not [r for r in rows if r["node"] == "*"]  # nothing killed the whole run
    for node, (_, why) in variants.items():
        mine = [r for r in rows if r["node"] == node]
        assert mine and {r["status"] for r in mine} == {"error"}, node
        assert why in mine[0]["message"], (node, mine[0]["message"])
    assert "passwd" not in out.read_text() and "root:" not in out.read_text()


# -- the gate over history rows whose status is unknown ----------------------------------------

@pytest.mark.parametrize("status", ["GO", "PASS", "", "pass ", ["pass"], None])
def test_an_unknown_status_in_history_is_never_go(tmp_path, status):
    db = tmp_path / "h.db"
    with History(db) as h:
        h.record("r1", "sweep", [
            NodeRun(n, "generic", [Result(n, "gpu_count", "", "pass", "8 GPUs")], [])
            for n in ("n1", "n2")], when=time.time() - 60)
    with sqlite3.connect(db) as c:
        (node_id,) = c.execute("SELECT id FROM nodes WHERE name = 'n2'").fetchone()
        (blob,) = c.execute("SELECT results FROM node_runs WHERE node_id = ?",
                            (node_id,)).fetchone()
        rows = json.loads(zlib.decompress(blob))
        rows[0]["status"] = status
        c.execute("UPDATE node_runs SET results = ? WHERE node_id = ?",
                  (zlib.compress(json.dumps(rows).encode()), node_id))
    policy = tmp_path / "ops.yml"
    policy.write_text("policy: ops\nchecks: [gpu_count]\nblock_on: [fail]\nfreshness: 6h\n")
    proc = stetho("gate", "--policy", str(policy), "--nodes", "n[1-2]", "--db", str(db),
                  "--no-reports", "--json", str(tmp_path / "g.json"))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 3, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gate ops: COULD NOT EVALUATE"), last
    assert "1 go" in last, last
    assert "unknown status" in proc.stdout
