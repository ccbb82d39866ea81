"""A node's output speaks only for that node, and one bad output never stops the others
(issue 28), through the real `stetho sweep` CLI and Ansible (local connection): each host's
`stetho` is a stand-in that prints the outcome a broken or lying node would."""

from __future__ import annotations

import base64
import gzip
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.xdist_group("node_output")


def _row(node: str, check: str, status: str, message: str = "") -> dict:
    return {"node": node, "check": check, "subject": "", "status": status,
            "message": message}


def _bundle(node: str, profile: str = "generic") -> dict:
    return {"schema": "stetho.evidence", "schema_version": 1, "node": node,
            "collected_at": "2026-01-01T00:00:00+00:00", "stetho_version": "0.1.0",
            "profile": profile, "sysroot": "/", "probes": {}}


def _outcome(node: str, rows: list[dict], evidence: dict | None = None, **extra) -> str:
    doc = {"schema": "stetho.outcome", "schema_version": 1, "node": node, "exit_code": 0,
           "results": {"schema": "stetho.results", "schema_version": 1, "results": rows},
           "junit": "<testsuite/>", "summary": None, **extra}
    if evidence is not None:
        doc["evidence_gz"] = base64.b64encode(gzip.compress(json.dumps(evidence).encode())
                                              ).decode()
    return json.dumps(doc, separators=(",", ":"))  # compact, as a node prints it


#: host -> what its stetho prints (and, with an exit code, how it ends)
def _outputs() -> dict[str, tuple[str, int]]:
    return {
        "good01": (_outcome("good01", [_row("good01", "cpu_governor", "pass")]), 0),
        # a node with the other node's names in it: its Xid 79 would go GO
        "liar01": (_outcome("liar01", [_row("liar01", "cpu_governor", "pass"),
                                       _row("victim01", "gpu_xid", "pass")]), 0),
        "liarb01": (_outcome("liarb01", [_row("liarb01", "cpu_governor", "pass")],
                             evidence=_bundle("victim01")), 0),
        "status01": (_outcome("status01", [_row("status01", "gpu_xid", "GO")]), 0),
        "surr01": (_outcome("surr01", [_row("surr01", "cpu_governor", "pass", "XSURRX")])
                   .replace("XSURRX", "\\ud800"), 0),
        "deep01": (_outcome("deep01", []).replace('"summary":null',
                                                 '"summary":' + "[" * 5000 + "]" * 5000), 0),
        "huge01": (_outcome("huge01", []).replace('"exit_code":0', '"exit_code":' + "9" * 5000),
                   0),
        "path01": (_outcome("path01", [_row("path01", "cpu_governor", "pass")],
                            evidence=_bundle("path01", "../../../../etc/passwd")), 0),
        "sumpath01": (_outcome("sumpath01", [_row("sumpath01", "cpu_governor", "pass")],
                               summary={"node": "sumpath01", "profile": "/etc/passwd",
                                        "versions": {}, "busbw": {}, "metrics": [],
                                        "collected_at": "2026-01-01T00:00:00+00:00"}), 0),
        "killed01": ("", 124),  # killed: the evidence it left names another node
    }


def _fake_node(home: Path, host: str, text: str, rc: int) -> None:
    """<stetho_venv>/<version id>/bin/stetho as the playbook runs it: prints `text`, or, for
    a killed check, writes the evidence it was collecting (of another node) and exits rc."""
    bin_ = home / "bin"
    bin_.mkdir(parents=True)
    (home / f"out-{host}.txt").write_text(text)
    (home / f"evidence-{host}.json").write_text(json.dumps(_bundle("victim01")))
    (bin_ / "python").symlink_to(sys.executable)
    (bin_ / "stetho").write_text(f"#!/bin/sh\ncat '{home}/out-{host}.txt'\nexit {rc}\n")
    (bin_ / "stetho").chmod(0o755)
    (home / ".installed").touch()  # what the playbook's install leaves: this version is here


@pytest.fixture(scope="module")
def lying_sweep(tmp_path_factory):
    from stetho.fleet import wheels

    root = tmp_path_factory.mktemp("lying")
    version = wheels.build().version_id  # what the playbook runs: <venv>/<version>/bin/stetho
    hosts = {}
    for host, (text, rc) in _outputs().items():
        _fake_node(root / "venvs" / host / version, host, text, rc)
        hosts[host] = {"ansible_connection": "local",
                       "ansible_python_interpreter": sys.executable,
                       "stetho_venv": str(root / "venvs" / host), "stetho_profile": "generic",
                       "stetho_etc": str(root / "etc" / host)}
    hosts["victim01"] = dict(hosts["good01"])  # in the inventory, not in this sweep
    inventory = root / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    db = root / "history.db"
    env = {**os.environ, "STETHO_DB": str(db)}
    limit = ",".join(h for h in hosts if h != "victim01")
    proc = subprocess.run([sys.executable, "-m", "stetho", "sweep", "-i", str(inventory),
                           "--out", str(root / "runs"), "--limit", limit, "-q"],
                          capture_output=True, text=True, timeout=600, env=env)
    runs = sorted((root / "runs").glob("2*"))
    rows = json.loads((runs[-1] / "results.json").read_text())["results"] if runs else []
    return proc, rows, db, runs


def _by_node(rows):
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["node"], []).append(r)
    return out


def test_one_bad_output_is_that_nodes_error_and_the_others_are_judged(lying_sweep):
    proc, rows, _, _ = lying_sweep
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    nodes = _by_node(rows)
    assert [r["status"] for r in nodes["good01"]] == ["pass"]
    why = {n: " ".join(r["message"] for r in nodes[n] if r["status"] == "error")
           for n in nodes}
    assert "lone surrogate" in why["surr01"]
    assert "nested deeper than" in why["deep01"]
    assert "4300 digits" in why["huge01"] or "digits" in why["huge01"]
    assert "unknown status 'GO'" in why["status01"]
    for node in ("path01", "sumpath01"):
        assert "profile must be a name" in why[node] and "passwd" not in why[node]
    for node in ("surr01", "deep01", "huge01", "path01", "sumpath01", "status01"):
        assert not [r for r in nodes[node] if r["status"] == "pass"], node


def test_a_hosts_output_never_speaks_for_another_node(lying_sweep):
    proc, rows, db, runs = lying_sweep
    nodes = _by_node(rows)
    assert "victim01" not in nodes
    assert not (runs[-1] / "hosts" / "victim01").exists()
    for liar, what in (("liar01", "results for victim01"),
                       ("liarb01", "its evidence is of victim01"),
                       ("killed01", "names node 'victim01'")):
        (err,) = nodes[liar]
        assert err["status"] == "error" and what in err["message"], err
    with sqlite3.connect(db) as conn:
        recorded = {n for (n,) in conn.execute("SELECT name FROM nodes")}
    assert "victim01" not in recorded and "good01" in recorded


def _verdict(spool: Path, node: str, rows: list[dict], run_id: str) -> Path:
    """A verdict as a node's hook spools it (stetho.spool), in its own folder."""
    from stetho import spool as spool_mod
    from stetho.fleet.outcome import Outcome
    from stetho.results import Result

    results = [Result.from_json(r) for r in rows]
    return spool_mod.write(spool, Outcome(node, 0, results, "", None), run_id=run_id,
                           kind="prolog", when=1_700_000_000.0)


def test_a_spooled_verdict_speaks_only_for_its_node(tmp_path):
    """`stetho history ingest` (= `stetho ingest`): each node's file is taken only if all of
    it is about that node and readable; the rest are their own node's error, moved to bad/
    with why, and the good one is recorded. No node's file is ever a result for another."""
    spool = tmp_path / "spool"
    edits = {
        "good01": ([_row("good01", "gpu_count", "pass")], None),
        "liar01": ([_row("victim01", "gpu_xid", "pass")], None),
        "surr01": ([_row("surr01", "gpu_count", "pass", "XSURRX")],
                   ('"XSURRX"', '"\\ud800"')),
        "huge01": ([_row("huge01", "gpu_count", "pass")], ("1700000000.0", "9" * 5000)),
        "deep01": ([_row("deep01", "gpu_count", "pass")],
                   ('"kind":"prolog"', '"kind":' + "[" * 5000 + "]" * 5000)),
        "nan01": ([_row("nan01", "gpu_count", "pass")], ("1700000000.0", "NaN")),
    }
    for i, (node, (rows, edit)) in enumerate(edits.items()):
        path = _verdict(spool, node, rows, f"r{i}")
        if edit is not None:
            text = path.read_text()
            assert edit[0] in text, (node, text[:300])
            path.write_text(text.replace(edit[0], edit[1], 1))
    db = tmp_path / "h.db"
    proc = subprocess.run([sys.executable, "-m", "stetho", "history", "ingest", str(spool),
                           "--db", str(db), "--out", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert [p.parent.parent.name for p in spool.glob("*/ingested/*.json")] == ["good01"]
    bad = {p.parent.parent.name: p.read_text() for p in spool.glob("*/bad/*.why")}
    assert sorted(bad) == ["deep01", "huge01", "liar01", "nan01", "surr01"], proc.stdout
    assert "claims node 'victim01'" in bad["liar01"]
    assert "lone surrogate" in bad["surr01"]
    with sqlite3.connect(db) as conn:
        recorded = {n for (n,) in conn.execute("SELECT name FROM nodes")}
    assert recorded == set(edits)  # each its own verdict or its own error; victim01 nothing
