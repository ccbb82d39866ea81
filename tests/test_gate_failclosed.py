"""The gate fails closed: no partial, future-dated or unevaluated result turns a node GO, a
policy's check names are real, history faults keep the verdict line, and a node name can never
forge an output line. Real simulated nodes, real SQLite files, the real CLI."""

from __future__ import annotations

import json
import os
import re
import resource
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from stetho.history.store import History, NodeRun
from stetho.results import Result
from tests import slurm_testbed as testbed

PROFILE = "h100-sxm-8gpu"


def stetho(*args, env=None, timeout=300, preexec_fn=None):
    out = os.path.join(os.environ["STETHO_TEST_HOME"], "gate-runs")
    if args and args[0] == "gate" and "--out" not in args:  # every gate run writes a folder
        args = (*args, "--out", out)
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec_fn,
                          env={**os.environ, "STETHO_GATE_OUT": out, "STETHO_PROFILE": PROFILE,
                               **(env or {})})


@pytest.fixture(scope="module")
def rot(tmp_path_factory):
    """A simulated node whose NVMe disk reports rotational=1 (only disk_rotational fails)."""
    from stetho.sim.builder import build_node

    return build_node(tmp_path_factory.mktemp("sim") / "rot", "rot", ["nvme-rotational"])


def _on_node(sim: Path, db: Path) -> dict[str, str]:
    """The environment of `stetho gate --local` running on that node (its prolog)."""
    return {"STETHO_SYSROOT": str(sim / "sysroot"), "PATH": f"{sim / 'bin'}:{os.environ['PATH']}",
            "STETHO_DB": str(db)}


def _gate(db, nodes="rot", policy="pre-job", *extra, env=None):
    return stetho("gate", "--policy", policy, "--nodes", nodes, "--db", str(db),
                  "--no-reports", *extra, env=env)


def _full_run(rot, db):
    """The nightly's whole check of the node, recorded: disk_rotational fails."""
    proc = stetho("check", "--sim", str(rot), "--db", str(db), "-q")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    blocked = _gate(db)
    assert blocked.returncode == 1 and "BLOCK rot/nvme3n1 disk_rotational" in blocked.stdout


# -- completeness --------------------------------------------------------------------------------

def test_a_narrow_run_does_not_hide_a_failing_check(rot, tmp_path):
    db = tmp_path / "h.db"
    _full_run(rot, db)
    narrow = stetho("check", "--sim", str(rot), "--db", str(db), "-k", "cpu_governor", "-q")
    assert narrow.returncode == 0, narrow.stdout + narrow.stderr
    proc = _gate(db)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "BLOCK rot/nvme3n1 disk_rotational: nvme3n1 reports rotational=1" in proc.stdout
    assert "gate pre-job: BLOCKED: 1 nodes, 0 go, 1 blocked (rot)" in proc.stdout


def test_prolog_quick_checks_then_the_central_gate(rot, tmp_path):
    db = tmp_path / "h.db"
    _full_run(rot, db)
    prolog = stetho("gate", "--local", "--policy", "pre-job", "--node", "rot",
                    "--no-reports", env=_on_node(rot, db))
    assert prolog.returncode == 0, prolog.stdout + prolog.stderr  # its quick checks pass
    central = _gate(db)
    assert central.returncode == 1, central.stdout + central.stderr
    assert "BLOCK rot/nvme3n1 disk_rotational" in central.stdout


def test_a_check_with_no_fresh_result_cannot_go(tmp_path):
    db = tmp_path / "h.db"
    policy = tmp_path / "ops.yml"
    policy.write_text("policy: ops\nchecks: [gpu_count, disk_rotational]\nblock_on: [fail]\n"
                      "freshness: 6h\n")
    with History(db) as h:
        h.record("r1", "check", [NodeRun("n1", PROFILE, [
            Result("n1", "gpu_count", "", "pass", "8 GPUs")], [])], when=time.time() - 60)
    proc = _gate(db, "n1", str(policy))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert ("gate ops: COULD NOT EVALUATE: 1 nodes, 0 go, 0 blocked; could not evaluate 1 "
            "(n1; n1: no result younger than 6 h for disk_rotational in /") in proc.stdout


# -- time ----------------------------------------------------------------------------------------

def _bundle(sim: Path, out: Path, collected_at: str) -> Path:
    from dataclasses import replace

    from stetho import profiles
    from stetho.evidence import collect

    env, node = collect.sim_environment(str(sim))
    bundle = collect.collect(profiles.load(PROFILE), env, node)
    replace(bundle, collected_at=collected_at).save(out)
    return out


def test_a_future_dated_bundle_is_refused_at_record_time(rot, tmp_path):
    db = tmp_path / "h.db"
    future = _bundle(rot, tmp_path / "future.json", "2099-01-01T00:00:00+00:00")
    proc = stetho("check", "--evidence", str(future), "--history", "--db", str(db), "-q")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the verdict stands
    assert "history did not record rot: its bundle is dated 2099-01-01T00:00:00+00:00" \
        in proc.stderr
    assert "in the future of this controller (now 20" in proc.stderr
    with History(db) as h:
        assert h.conn.execute("SELECT count(*) FROM node_runs").fetchone()[0] == 0
    gate = _gate(db)
    assert gate.returncode == 1 and "BLOCKED" in gate.stdout  # nothing fresh: not GO


def test_a_bundle_older_than_any_freshness_is_refused(rot, tmp_path):
    db = tmp_path / "h.db"
    old = _bundle(rot, tmp_path / "old.json", "2020-01-01T00:00:00+00:00")
    proc = stetho("check", "--evidence", str(old), "--history", "--db", str(db), "-q")
    assert "history did not record rot: its bundle is dated 2020-01-01T00:00:00+00:00" \
        in proc.stderr and "older than the 6.0 h the policy calls fresh" in proc.stderr


# -- policies ------------------------------------------------------------------------------------

def test_a_misspelled_check_in_a_policy_is_refused(tmp_path):
    policy = tmp_path / "typo.yml"
    policy.write_text("policy: typo\nchecks:\n  - gpu_count\n  - disk_rotatonal\n"
                      "block_on: [fail]\n")
    proc = _gate(tmp_path / "h.db", "n1", str(policy))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (f"{policy}:4: checks: unknown check 'disk_rotatonal'; did you mean "
            "disk_rotational?") in proc.stderr
    local = tmp_path / "local.yml"
    local.write_text("policy: local\nlocal_checks: [fleet_versions]\n")
    proc = _gate(tmp_path / "h.db", "n1", str(local))
    assert proc.returncode == 2 and "'fleet_versions' is not a node check" in proc.stderr


def test_fleet_and_drift_checks_gate_only_when_listed():
    from stetho.gate import decision, policy

    pre = policy.load("pre-job")
    drift = [Result("n1", "drift_shift", "gpu0", "fail", "shifted")]
    assert not pre.counts("drift_shift") and not pre.counts("fleet_versions")
    assert decision.decide(pre, drift).blocking == []
    assert policy.load("nightly").counts("drift_shift")  # lists none: every check counts


def test_a_listed_fleet_check_that_skipped_is_never_go(tmp_path):
    """Too few peers in the run: the fleet check skipped, so it did not evaluate the node."""
    from stetho.checking import fleet
    from stetho.gate import decision, policy

    nodes = [{"node": f"n{i}", "profile": "p", "versions": {"driver": ["535.161.08"]},
              "busbw": {}} for i in range(3)]
    skips = fleet.evaluate(nodes)
    assert {r.status for r in skips} == {"skip"}
    listed = tmp_path / "fleet.yml"
    listed.write_text("policy: fleet\nchecks: [versions, fleet_versions]\nblock_on: [fail]\n")
    ok = [Result(f"n{i}", "versions", "driver", "pass", "ok") for i in range(3)]
    d = decision.decide(policy.load(str(listed)), ok + skips)
    assert d.exit_code == 3 and d.go_nodes == set()
    assert d.unevaluated["n0"] == ("fleet_versions error: not compared: 3 p nodes in this run; "
                                   "fleet comparison needs at least 8 (profile fleet.min_peers)")
    # not listed (pre-job) or every check counting (nightly): a skip blocks nothing
    for name in ("pre-job", "nightly"):
        assert decision.decide(policy.load(name), ok + skips).exit_code == 0


def test_a_listed_drift_check_without_history_is_never_go(tmp_path):
    """Too little history: drift skipped, so the comparison the policy asks for was not made."""
    from stetho.gate import decision, policy

    listed = tmp_path / "drift.yml"
    listed.write_text("policy: drift\nchecks: [versions, drift_counter]\nblock_on: [fail]\n")
    ok = [Result("n1", "versions", "driver", "pass", "ok")]
    skip = [Result("n1", "drift_counter", "", "skip",
                   "needs 1 earlier run with these counters; the history has none")]
    d = decision.decide(policy.load(str(listed)), ok + skip)
    assert d.exit_code == 3 and d.go_nodes == set()
    assert "not compared: needs 1 earlier run" in d.unevaluated["n1"]
    assert decision.decide(policy.load("nightly"), ok + skip).exit_code == 0


# -- unevaluated is never go ---------------------------------------------------------------------

def test_act_never_resumes_unevaluated_nodes(tmp_path):
    fake = testbed.fake_scontrol(tmp_path / "fake")
    for n in testbed.FAKE_NODES:
        fake.set_node(n, "IDLE+DRAIN", "stetho: gpu_bus_loss: a GPU fell off the bus")
    policy = tmp_path / "ops.yml"
    policy.write_text("policy: ops\nchecks: [gpu_count, gpu_bus_loss]\nblock_on: [fail]\n"
                      "freshness: 6h\n")
    db = tmp_path / "h.db"
    ok = [Result("x", "gpu_count", "", "pass", "8 GPUs")]

    def run(node, results):
        return NodeRun(node, PROFILE, [Result(node, r.check, r.subject, r.status, r.message)
                                       for r in results], [])

    now = time.time()
    with History(db) as h:
        h.record("stale", "sweep", [run("gpu03", [*ok, Result("x", "gpu_bus_loss", "", "pass",
                                                                "ok")])], when=now - 86400)
        h.record("fresh", "sweep", [
            run("gpu01", [*ok, Result("x", "gpu_bus_loss", "", "error", "nvidia-smi: GPU "
                                      "00000000:1B:00.0 has fallen off the bus")]),
            run("gpu02", ok),  # partial: no gpu_bus_loss result
            run("gpu04", [*ok, Result("x", "gpu_bus_loss", "", "pass", "all GPUs present")])],
            when=now - 60)
    proc = _gate(db, "gpu[01-04]", str(policy), "--act", env=fake.env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    resumed = [c for c in fake.calls() if c[0] == "update"]
    assert resumed == [["update", "NodeName=gpu04", "State=RESUME"]]
    assert {n: s["state"] for n, s in fake.nodes().items()} == {
        "gpu01": "IDLE+DRAIN", "gpu02": "IDLE+DRAIN", "gpu03": "IDLE+DRAIN", "gpu04": "IDLE"}
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("gate ops: COULD NOT EVALUATE: 4 nodes, 1 go, 0 blocked; "
                              "could not evaluate 3 (gpu[01-03]; gpu01: gpu_bus_loss error: "
                              "nvidia-smi: GPU 00000000:1B:00.0 has fallen off the bus; "
                              "gpu02: no result younger than 6 h"), summary
    assert "gpu03: no results younger than 6 h" in summary
    _gate(db, "gpu[01-04]", str(policy), "--json", str(tmp_path / "g.json"), env=fake.env)
    doc = json.loads((tmp_path / "g.json").read_text())
    assert sorted(doc["could_not_evaluate"]) == ["gpu01", "gpu02", "gpu03"]
    assert doc["sources"]["gpu02"] == "partial" and doc["sources"]["gpu03"] == "missing"


# -- history faults ------------------------------------------------------------------------------

@pytest.fixture
def good_db(tmp_path):
    db = tmp_path / "h.db"
    with History(db) as h:
        h.record("r1", "sweep", [NodeRun("n1", PROFILE, [
            Result("n1", "gpu_count", "", "pass", "8 GPUs")], [])], when=time.time() - 60)
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


@pytest.fixture
def ops(tmp_path):
    policy = tmp_path / "ops.yml"
    policy.write_text("policy: ops\nchecks: [gpu_count]\nblock_on: [fail]\nfreshness: 6h\n")
    return str(policy)


def _unavailable(proc, verdict="COULD NOT EVALUATE"):
    assert proc.returncode == 3, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f"gate ops: {verdict}: 1 nodes"), last
    assert "; history unavailable: " in last
    return last.split("; history unavailable: ", 1)[1]


def test_truncated_history_is_exit_3_with_the_verdict_line(good_db, ops, tmp_path):
    data = good_db.read_bytes()
    good_db.write_bytes(data[: len(data) // 3])
    why = _unavailable(_gate(good_db, "n1", ops))
    assert str(good_db) in why and ("malformed" in why or "not a database" in why), why
    # pre-job blocks on the node it could not evaluate, and its report is still written
    proc = stetho("gate", "--policy", "pre-job", "--nodes", "n1", "--db", str(good_db),
                  "--out", str(tmp_path / "runs"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gate pre-job: BLOCKED: 1 nodes, 0 go, 1 blocked (n1); history "
                           "unavailable: "), last
    assert list((tmp_path / "runs").glob("gate-*/reports/n1-*.md"))


def test_future_and_non_numeric_schema_versions(good_db, ops):
    for version in ("99", "one"):
        with sqlite3.connect(good_db) as c:
            c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
        why = _unavailable(_gate(good_db, "n1", ops))
        assert ("newer than this stetho" if version == "99" else "is not a number") in why


def test_a_corrupt_results_row(good_db, ops):
    """A blob stetho did not write fails the row's signature: that node's error, named."""
    with sqlite3.connect(good_db) as c:
        c.execute("UPDATE node_runs SET results = ?", (zlib.compress(b"[{not json"),))
    proc = _gate(good_db, "n1", ops)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == (
        "gate ops: COULD NOT EVALUATE: 1 nodes, 0 go, 0 blocked; could not evaluate 1 (n1; n1: "
        "history row for node n1 (run r1) failed its integrity check: its content is not what "
        "stetho wrote (the database was edited)); profile h100-sxm-8gpu (n1)")


def _small_files(limit: int):
    """RLIMIT_FSIZE in the child: any file write past `limit` bytes fails (EFBIG; Python
    ignores SIGXFSZ), the way a full disk fails a write."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_disk_full_check_keeps_its_verdict_and_the_gate_says_why(rot, tmp_path):
    db = tmp_path / "h.db"
    History(db).close()
    with sqlite3.connect(db) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    full = _small_files(db.stat().st_size)
    proc = stetho("check", "--sim", str(rot), "--db", str(db), "-q", preexec_fn=full)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the verdict stands
    assert "history unavailable, this run was not recorded" in proc.stderr
    assert re.search(r"1 node, \d+ results: 1 fail", proc.stdout), proc.stdout
    prolog = stetho("gate", "--local", "--policy", "pre-job", "--node", "rot", "--no-reports",
                    env=_on_node(rot, db), preexec_fn=full)
    assert prolog.returncode == 3, prolog.stdout + prolog.stderr
    last = prolog.stdout.strip().splitlines()[-1]
    assert last.startswith("gate pre-job: GO: 1 nodes, 1 go, 0 blocked; history unavailable: "
                           "history unavailable, this run was not recorded"), last


# -- names ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["check", "gate"])
def test_a_node_name_with_a_newline_is_refused(rot, tmp_path, command):
    forged = "rot\ngate pre-job: GO: 1 nodes, 1 go, 0 blocked"
    args = (["check", "--sim", str(rot)] if command == "check"
            else ["gate", "--local", "--policy", "pre-job", "--no-reports"])
    proc = stetho(*args, "--node", forged, env=_on_node(rot, tmp_path / "h.db"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "invalid node name 'rot\\ngate pre-job" in proc.stderr
    assert "GO" not in proc.stdout


def test_a_bundle_or_outcome_naming_a_forged_node_is_refused(rot, tmp_path):
    from stetho.evidence.bundle import Bundle, BundleError
    from stetho.fleet.outcome import OutcomeError, parse

    path = _bundle(rot, tmp_path / "b.json", "2026-01-01T00:00:00+00:00")
    doc = json.loads(path.read_text())
    doc["node"] = "rot\nBLOCK other"
    with pytest.raises(BundleError, match=r"invalid node name 'rot\\nBLOCK other'"):
        Bundle.from_json(doc, source=str(path))
    line = json.dumps({"schema": "stetho.outcome", "schema_version": 1, "node": "a b",
                       "exit_code": 0, "results": {"results": []}}, separators=(",", ":"))
    with pytest.raises(OutcomeError, match="invalid node name 'a b'"):
        parse(line)


def test_latest_per_check_folds_runs_newest_first(tmp_path):
    now = 1_000_000.0

    def run(h, name, when, *checks):
        h.record(name, "check", [NodeRun("n1", PROFILE, [
            Result("n1", c, "", "error" if c == "sweep" else "pass", c) for c in checks], [])],
            when=when)

    with History(tmp_path / "h.db") as h:
        run(h, "unreachable", now - 300, "sweep")
        run(h, "whole", now - 200, "gpu_count", "disk_rotational")
        run(h, "narrow", now - 100, "gpu_count")
        run(h, "too-new", now + 3600, "disk_rotational")  # written with a clock far ahead
        run(h, "too-old", now - 90_000, "cpu_governor")
        latest = h.latest_per_check(["n1"], 86400, now=now)["n1"]
    assert latest.checks == {"gpu_count": (now - 100, "narrow"),
                             "disk_rotational": (now - 200, "whole")}
    assert [r.check for r in latest.results] == ["gpu_count", "disk_rotational"]
    assert latest.runs() == ["narrow", "whole"] and latest.oldest == now - 200


def test_unevaluated_follows_the_decisions_results_when_they_change():
    """`unevaluated` is worked out once per results (a gate asks five times); a result added,
    the results or the blocking replaced: asked again, it says so. What it hands out is a
    copy: changing it changes nothing the next caller sees."""
    from stetho.gate import policy as policies
    from stetho.gate.decision import Decision
    from stetho.results import Result

    d = Decision(policies.load("pre-job"), [Result("a", "gpu_xid", "", "error", "boom")], [],
                 {})
    assert d.unevaluated == {"a": "gpu_xid error: boom"}
    d.results.append(Result("b", "gpu_ecc", "", "error", "x"))
    assert set(d.unevaluated) == {"a", "b"}
    d.results = [Result("c", "gpu_xid", "", "error", "y")]
    got = d.unevaluated
    got["z"] = "changed by a caller"
    assert d.unevaluated == {"c": "gpu_xid error: y"} and "c" not in d.go_nodes
    d.blocking = [d.results[0]]  # blocked, so not also "not evaluated"
    assert d.unevaluated == {} and d.blocked_nodes == ["c"]
