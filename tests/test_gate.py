"""`stetho gate`: policies, fresh history vs live, tightened thresholds, overrides end to end
with a real git repository, and --local on a simulated node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from stetho.errors import ConfigError
from stetho.gate import catalogue
from stetho.gate import decision as gate
from stetho.gate import policy as gatepolicy
from stetho.history.store import History, NodeRun
from stetho.results import Result


def stetho(*args, env=None, timeout=300):
    # blocked gates write reports under --out: keep them out of the working directory
    out = os.path.join(os.environ["STETHO_TEST_HOME"], "gate-runs")
    if args and args[0] == "gate" and "--out" not in args:  # every gate run writes a folder
        args = (*args, "--out", out)
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "STETHO_GATE_OUT": out, **(env or {})})


def _results(node, bad=None):
    rows = [Result(node, "gpu_clocks", f"gpu{g}", "pass", "clocks locked") for g in range(2)]
    rows.append(Result(node, "nccl_busbw", "allreduce@8GiB", "pass", "ok", 460.0, "GB/s",
                       reference=479.0))
    if bad:
        rows.append(Result(node, bad, "", "fail", f"{bad} is wrong", remediation=f"fix {bad}"))
    # a whole run: a result for every node check (the gate refuses partial results)
    ran = {r.check for r in rows}
    rows += [Result(node, c, "", "pass", "ok") for c in NODE_CHECKS if c not in ran]
    return rows


NODE_CHECKS = sorted(catalogue.load().node)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "h.db"
    with History(path) as h:
        h.record("r-old", "sweep", [NodeRun(f"n{i:03d}", "p", _results(f"n{i:03d}"), [])
                                    for i in range(1, 5)], when=time.time() - 3 * 86400)
        h.record("r-now", "sweep", [NodeRun(f"n{i:03d}", "p",
                                            _results(f"n{i:03d}", "cpu_governor" if i == 7
                                                     else None), [])
                                    for i in range(1, 65)], when=time.time() - 600)
    return path


def test_policies_ship_and_load():
    for name in ("pre-job", "release", "nightly"):
        p = gatepolicy.load(name)
        assert p.name == name and p.overrides.acknowledgement
    pre = gatepolicy.load("pre-job")
    assert pre.block_on == ("fail", "error") and pre.freshness_s == 6 * 3600
    rel = gatepolicy.load("release")
    assert rel.tighten[0].check == "nccl_busbw" and rel.tighten[0].max_drop_pct == 5
    assert rel.overrides.max_lifetime_s == 72 * 3600
    assert rel.overrides.principals == ("release-manager", "perf-lead")
    assert rel.overrides.signers == gatepolicy.find("release").parent / "allowed_signers"
    assert rel.overrides.signers.is_file() and rel.overrides.disabled() is None


def test_malformed_policy_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("policy: x\nblock_on: [fail, explode]\n")
    with pytest.raises(ConfigError, match=r"bad\.yml:2: block_on: 'explode' is not a status"):
        gatepolicy.load(str(bad))


@pytest.mark.parametrize(("rule", "line", "why"), [
    ("max: -5", 4, r"tighten\.gpu_temperature\.max must be at least 0, not -5"),
    ("max: .nan", 4, r"tighten\.gpu_temperature\.max must be a finite number"),
    ("max: .inf", 4, r"tighten\.gpu_temperature\.max must be a finite number"),
    ("min: -1", 4, r"tighten\.gpu_temperature\.min must be at least 0, not -1"),
    ("max: 80\n    min: 90", 5, r"tighten\.gpu_temperature: min 90 is above max 80"),
    ("max_drop_pct: 150", 4,
     r"tighten\.gpu_temperature\.max_drop_pct must be between 0 and 100, not 150"),
])
def test_tighten_bounds_out_of_range_name_file_and_line(tmp_path, rule, line, why):
    bad = tmp_path / "bad.yml"
    bad.write_text(f"policy: x\ntighten:\n  gpu_temperature:\n    {rule}\n")
    with pytest.raises(ConfigError, match=rf"bad\.yml:{line}: {why}"):
        gatepolicy.load(str(bad))


def test_tighten_bounds_in_range_load(tmp_path):
    ok = tmp_path / "ok.yml"
    ok.write_text("policy: x\ntighten:\n  gpu_temperature:\n    max: 85\n    min: 0\n")
    t = gatepolicy.load(str(ok)).tighten[0]
    assert (t.check, t.max, t.min) == ("gpu_temperature", 85.0, 0.0)


def test_release_tightens_busbw_to_5_percent():
    rel = gatepolicy.load("release")
    d = gate.decide(rel, _results("n1"))  # 460 vs 479: 4.0% under: passes
    assert d.exit_code == 0
    slow = [Result("n1", "nccl_busbw", "allreduce@8GiB", "pass", "ok", 450.0, "GB/s",
                   reference=479.0)]
    d = gate.decide(rel, slow)  # 6.1% under the baseline: the profile said pass, release blocks
    assert d.exit_code == 1 and d.blocking[0].status == "fail"
    assert "6.1% under the baseline 479" in d.blocking[0].message


def test_errors_block_pre_job_but_not_nightly():
    err = [Result("n1", "versions", "driver", "error", "nvidia-smi missing")]
    assert gate.decide(gatepolicy.load("pre-job"), err).exit_code == 1
    assert gate.decide(gatepolicy.load("nightly"), err).exit_code == 3


def test_gate_from_fresh_history(db, tmp_path):
    proc = stetho("gate", "--policy", "pre-job", "--nodes", "n[001-064]", "--db", str(db),
                  "--out", str(tmp_path / "runs"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "BLOCK n007 cpu_governor: cpu_governor is wrong -> fix cpu_governor" in proc.stdout
    assert "gate pre-job: BLOCKED: 64 nodes, 63 go, 1 blocked (n007)" in proc.stdout
    (report,) = (tmp_path / "runs").glob("gate-*/reports/n007-cpu-governor-*.md")
    assert "CPU frequency governor" in report.read_text()
    ok = stetho("gate", "--policy", "pre-job", "--nodes", "n[001-006]", "--db", str(db))
    assert ok.returncode == 0 and "GO: 6 nodes, 6 go, 0 blocked" in ok.stdout


def test_stale_history_without_inventory_cannot_go(db, tmp_path):
    out = tmp_path / "g.json"
    proc = stetho("gate", "--policy", "pre-job", "--nodes", "n[001-002],n099", "--db",
                  str(db), "--json", str(out))
    assert proc.returncode == 1  # pre-job blocks on errors
    doc = json.loads(out.read_text())
    assert doc["blocked"] == ["n099"] and doc["sources"]["n099"] == "missing"
    assert doc["sources"]["n001"].startswith("history r-now")
    err = [r for r in doc["results"] if r["node"] == "n099"][0]
    assert "no results younger than 6 h" in err["message"]


def test_unsafe_node_names_are_refused(db):
    proc = stetho("gate", "--policy", "pre-job", "--nodes", "n001;reboot", "--db", str(db))
    assert proc.returncode == 2 and "invalid node name" in proc.stderr


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture(scope="session")
def people(tmp_path_factory):
    from tests.signing import make_people

    return make_people(tmp_path_factory.mktemp("people"))


@pytest.fixture
def override_repo(tmp_path):
    repo = tmp_path / "overrides"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.name", "t")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "init")
    return repo


@pytest.fixture
def trusted(people, tmp_path):
    """The environment of a gate runner whose policies trust the people's signers file."""
    return {"STETHO_GATES": str(people.gates), "STETHO_CACHE": str(tmp_path / "cache")}


def _signed(people, name):
    from stetho.gate import signatures

    return lambda message: signatures.sign(message, people.key(name))


def _override(people, repo, policy_name, check, nodes, approver="bob"):
    from stetho.gate import overrides
    from stetho.gate.override_store import OverrideStore

    pol = overrides.OverridePolicy(policy_name, ("bob", "carol"), people.signers,
                                   "I acknowledge this performance degradation risk", 86400)
    o = overrides.request(pol, check, nodes, "known issue, ticket 123", 3600,
                          _signed(people, "alice"))
    o = overrides.with_approval(o, overrides.approval(o, pol, pol.acknowledgement,
                                                      _signed(people, approver)))
    OverrideStore(str(repo)).save(o, f"override {o.id}")
    return o


def _gate(db, repo, env, junit=None):
    extra = ["--junit", str(junit)] if junit else []
    return stetho("gate", "--policy", "pre-job", "--nodes", "n[001-064]", "--db", str(db),
                  "--override-repo", str(repo), *extra, env=env)


def test_override_lets_exactly_its_scope_pass(db, override_repo, tmp_path, people, trusted):
    blocked = _gate(db, override_repo, trusted)
    assert blocked.returncode == 1 and "BLOCKED" in blocked.stdout
    o = _override(people, override_repo, "pre-job", "cpu_governor", ["n007"])
    junit = tmp_path / "g.xml"
    proc = _gate(db, override_repo, trusted, junit=junit)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"OVERRIDE n007/- cpu_governor: passed with override {o.id} approved by bob" \
        in proc.stdout
    case = next(c for c in ET.parse(junit).getroot().iter("testcase")
                if c.get("name") == "cpu_governor[n007]")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["status"] == "passed-with-override" and props["override_approver"] == "bob"
    assert props["override_reason"] == "known issue, ticket 123"
    # a runner whose policy trusts another signers file: ignored, with why, and blocked again
    other = tmp_path / "other-gates"
    other.mkdir()
    (other / "allowed_signers").write_text(people.line("carol"))
    (other / "pre-job.yml").write_text((people.gates / "pre-job.yml").read_text().replace(
        "../allowed_signers", "allowed_signers"))
    proc = _gate(db, override_repo, {**trusted, "STETHO_GATES": str(other)})
    assert proc.returncode == 1 and f"IGNORED override {o.id}: the request's signature " \
        "does not verify" in proc.stdout


def test_override_for_another_node_does_not_cover(db, override_repo, people, trusted):
    _override(people, override_repo, "pre-job", "cpu_governor", ["n0070"])
    proc = _gate(db, override_repo, trusted)
    assert proc.returncode == 1 and "BLOCK n007 cpu_governor" in proc.stdout


def test_override_edited_after_signing_is_ignored(db, override_repo, people, trusted):
    o = _override(people, override_repo, "pre-job", "cpu_governor", ["n008"])
    path = override_repo / "overrides" / f"{o.id}.json"
    data = json.loads(path.read_text())
    data["nodes"] = ["n007", "n008"]  # widen the scope by hand
    path.write_text(json.dumps(data))
    proc = _gate(db, override_repo, trusted)
    assert proc.returncode == 1
    assert f"IGNORED override {o.id}: the request's signature does not verify" in proc.stdout
    assert "incorrect signature" in proc.stdout


def test_a_revocation_turns_the_gate_back_to_blocked(db, override_repo, people, trusted):
    from stetho.gate import overrides
    from stetho.gate.override_store import OverrideStore

    o = _override(people, override_repo, "pre-job", "cpu_governor", ["n007"])
    assert _gate(db, override_repo, trusted).returncode == 0
    r = overrides.revocation(o.id, "fixed the governor", _signed(people, "carol"))
    OverrideStore(str(override_repo)).revoke(r, lambda cur, snap: None, "revoke")
    _git(override_repo, "revert", "--no-edit", "HEAD")  # and someone reverts the revocation
    proc = _gate(db, override_repo, trusted)
    assert proc.returncode == 1, proc.stdout
    assert f"IGNORED override {o.id}: revoked by carol at {r.revoked_at} (fixed the governor)" \
        in proc.stdout


def test_an_old_hmac_override_is_ignored_with_a_line(db, override_repo, trusted):
    old = {"schema": "stetho.override/1", "id": "ovr-20261202T101500Z-abcdef",
           "policy": "pre-job", "check": "cpu_governor", "nodes": ["n007"], "reason": "x",
           "requester": "alice", "requested_at": "2026-12-02T10:15:00Z",
           "expires_at": "2099-12-03T10:15:00Z", "approver": "bob",
           "approved_at": "2026-12-02T10:16:00Z", "signature": "5e" * 32,
           "acknowledgement": "I acknowledge this performance degradation risk",
           "revoked_by": None, "revoked_at": None}
    (override_repo / "overrides").mkdir()
    (override_repo / "overrides" / f"{old['id']}.json").write_text(json.dumps(old))
    _git(override_repo, "add", "-A")
    _git(override_repo, "commit", "-qm", "an override from before")
    proc = _gate(db, override_repo, trusted)
    assert proc.returncode == 1
    assert "old shared-key (HMAC) format" in proc.stdout and "ignored" in proc.stdout


@pytest.mark.parametrize("pseudo", ["gate", "sweep"])
def test_an_override_of_a_pseudo_check_never_makes_a_node_go(db, override_repo, people,
                                                             trusted, pseudo):
    """n099 has no results at all (a `gate` error); an override of the pseudo-check, signed
    and approved outside the CLI, is ignored with a named line and n099 stays blocked."""
    o = _override(people, override_repo, "pre-job", pseudo, ["n099"])
    proc = stetho("gate", "--policy", "pre-job", "--nodes", "n[001-003],n099", "--db", str(db),
                  "--override-repo", str(override_repo), env=trusted)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "BLOCK n099 gate: " in proc.stdout and "1 blocked (n099)" in proc.stdout
    assert f"IGNORED override {o.id}: override of {pseudo!r} is not a check: it is the gate's " \
        "own result for a node it could not check at all" in proc.stdout
    assert "OVERRIDE n099" not in proc.stdout
    assert "resume n099" not in proc.stdout  # --act would not resume it either


def test_decide_never_lets_an_override_pass_a_pseudo_check(people):
    from stetho.gate.override_check import Honoured
    from stetho.gate.overrides import OverridePolicy, approval, request, with_approval

    pol = OverridePolicy("pre-job", ("bob",), people.signers, "ack", 86400)
    o = request(pol, "gate", ["n099"], "x", 3600, _signed(people, "alice"))
    o = with_approval(o, approval(o, pol, "ack", _signed(people, "bob")))
    missing = gate.missing(["n099"], "no results younger than 6 h")
    d = gate.decide(gatepolicy.load("pre-job"), missing, [Honoured(o, "alice", "bob", "t")])
    assert d.blocked_nodes == ["n099"] and d.go_nodes == set()


def test_a_pattern_in_the_signers_file_is_a_named_error_and_the_gate_still_judges(
        db, override_repo, people, trusted, tmp_path):
    """bob's key listed under `*@corp` (a pattern stetho does not read): the gate neither
    crashes nor honours bob's approval; it names the file and line, and judges every node."""
    gates = tmp_path / "gates"
    gates.mkdir()
    signers = gates / "allowed_signers"
    signers.write_text("# team\n" + people.line("alice") + people.line("carol")
                       + people.line("bob", "*@corp"))
    (gates / "pre-job.yml").write_text((people.gates / "pre-job.yml").read_text().replace(
        "../allowed_signers", "allowed_signers"))
    o = _override(people, override_repo, "pre-job", "cpu_governor", ["n007"])
    proc = _gate(db, override_repo, {**trusted, "STETHO_GATES": str(gates)})
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gate pre-job: BLOCKED: 64 nodes, 63 go, 1 blocked (n007)" in proc.stdout
    assert f"IGNORED override {o.id}: policy 'pre-job': {signers}:4: principal '*@corp' is not " \
        "supported" in proc.stdout and "overrides are disabled" in proc.stdout


def test_an_old_approvers_list_leaves_overrides_off_saying_why(tmp_path):
    old = tmp_path / "old.yml"
    old.write_text("policy: old\noverrides:\n  approvers: [sre-lead]\n"
                   "  acknowledgement: I agree\n")
    p = gatepolicy.load(str(old)).overrides
    assert p.disabled() == (f"policy 'old': {old}:3: approvers is a list of names (the old "
                            "format, which proves nothing); write approvers: {signers: <allowed "
                            "signers file>, principals: [...]}: overrides are disabled")
    bad = tmp_path / "bad.yml"
    bad.write_text("policy: bad\noverrides:\n  approvers:\n    signers: s\n"
                   "    principals: ['*']\n")
    with pytest.raises(ConfigError, match=r"bad\.yml:5: principal '\*' is not a plain name"):
        gatepolicy.load(str(bad))


@pytest.mark.xdist_group("faultsim")
@pytest.mark.parametrize("node, code", [("healthy", 0), ("clocks", 1)])
def test_local_gate_in_a_prolog(fault_cluster, tmp_path, node, code):
    sim = fault_cluster / node
    env = {"STETHO_SYSROOT": str(sim / "sysroot"),
           "PATH": f"{sim / 'bin'}:{os.environ['PATH']}", "STETHO_DB": str(tmp_path / "h.db"),
           "STETHO_PROFILE": "h100-sxm-8gpu"}
    proc = stetho("gate", "--local", "--policy", "pre-job", "--node", node, env=env)
    assert proc.returncode == code, proc.stdout + proc.stderr
    if code:
        assert f"BLOCK {node}/gpu3 gpu_clocks" in proc.stdout
    with History(tmp_path / "h.db") as h:  # the prolog's run is in the node's history
        assert h.conn.execute("SELECT kind FROM runs").fetchone()[0] == "gate"


def test_results_json_of_a_gate_from_history_holds_each_result_as_recorded(tmp_path):
    """A gate from history copies each result's stored line into results.json
    (stetho.history.blob) instead of encoding it again: the document reads back the same as
    the one `--json` encodes from the results themselves, in order, text that JSON must
    escape included."""
    path = tmp_path / "h.db"
    tricky = Result("n002", "gpu_clocks", "gpu1", "pass",
                    'clocks "locked"\n\tat 1980 MHz \u00e9\u2603', 1980.0, "MHz",
                    expected={"min": 1980, "note": "<&>"})
    runs = []
    for i in (1, 2, 3):
        rows = [r for r in _results(f"n{i:03d}") if not (i == 2 and r.subject == "gpu1")]
        runs.append(NodeRun(f"n{i:03d}", "p", rows + ([tricky] if i == 2 else []), []))
    with History(path) as h:
        h.record("r-now", "sweep", runs, when=time.time() - 600)
    out, encoded = tmp_path / "runs", tmp_path / "decision.json"
    proc = stetho("gate", "--policy", "pre-job", "--nodes", "n[001-003]", "--db", str(path),
                  "--out", str(out), "--json", str(encoded))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (folder,) = out.glob("gate-*")
    copied = json.loads((folder / "results.json").read_text())["results"]
    assert copied == json.loads(encoded.read_text())["results"]
    recorded = {(r.node, r.check, r.subject): r.to_json() for run in runs for r in run.results}
    kept = [(d["node"], d["check"], d["subject"]) for d in copied]
    assert len(kept) == len(set(kept)) and {k[0] for k in kept} == {"n001", "n002", "n003"}
    changed = [k for k, d in zip(kept, copied, strict=True) if k in recorded and d != recorded[k]]
    assert changed == []
    assert tricky.to_json() in copied
