"""`stetho gate replay`: a simulated history with injected faults, overrides valid at known
times, outcomes in a knowledge base and one tampered row, replayed through the CLI; every
figure is checked against ground truth worked out by hand below."""

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

DAY = 86400
HOUR = 3600
NODES = [f"n0{i}" for i in range(1, 7)]
#: ten nightly sweeps at 02:00 UTC, the first 15 days ago (inside --since 30d)
T0 = (int(time.time()) // DAY - 15) * DAY + 2 * HOUR


def at(day: int, hours: float = 0.0) -> int:
    return T0 + day * DAY + int(hours * HOUR)


def stetho(*args, env=None):
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


# -- the injected faults (day -> node -> what differs from a healthy row) ------------------
#: n02 runs hot on days 3 and 4 (85 C: the check passes it, the candidate's max 80 does not);
#: n03 at 82 C on day 6; n04 has an ECC failure on days 2 and 3; n05's governor fails on days
#: 5 and 8; n06's disk check fails on day 1 (only `cur` counts that check) and its governor
#: on day 9, in the row that is then tampered with.
TEMP = {(3, "n02"): 85.0, (4, "n02"): 85.0, (6, "n03"): 82.0}
FAIL = {(2, "n04"): "gpu_ecc", (3, "n04"): "gpu_ecc", (5, "n05"): "cpu_governor",
        (8, "n05"): "cpu_governor", (1, "n06"): "disk_rotational", (9, "n06"): "cpu_governor"}


def results(day: int, node: str, tampered: bool = False) -> list[Result]:
    bad = None if tampered else FAIL.get((day, node))
    out = [Result(node, "gpu_temperature", f"gpu{g}", "pass", "under the limit",
                  TEMP.get((day, node), 60.0) if g == 0 else 60.0, "C") for g in range(2)]
    for check in ("gpu_ecc", "cpu_governor", "disk_rotational"):
        out.append(Result(node, check, "", "fail" if check == bad else "pass",
                          f"{check} is wrong" if check == bad else "ok"))
    return out


POLICY = """policy: {name}
checks: [{checks}]
block_on: [fail]
freshness: 0s
{extra}overrides:
  approvers:
    signers: {signers}
    principals: [bob, carol]
  acknowledgement: I acknowledge this performance degradation risk
  max_lifetime: 24h
"""


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    from tests.signing import make_people

    return make_people(tmp_path_factory.mktemp("people"))


@pytest.fixture(scope="module")
def world(tmp_path_factory, people):
    """The history, the policies, the override repository and the knowledge base."""
    from stetho.gate import overrides
    from stetho.gate.override_store import OverrideStore
    from tests.test_gate import _git, _signed

    root = tmp_path_factory.mktemp("replay")
    gates = root / "gates"
    gates.mkdir()
    (gates / "cur.yml").write_text(POLICY.format(
        name="cur", checks="gpu_temperature, gpu_ecc, cpu_governor, disk_rotational",
        extra="", signers=people.signers))
    (gates / "cand.yml").write_text(POLICY.format(
        name="cand", checks="gpu_temperature, gpu_ecc, cpu_governor", signers=people.signers,
        extra="mode: shadow\ntighten:\n  gpu_temperature:\n    max: 80\n"))
    db = root / "h.db"
    with History(db) as h:
        for day in range(10):
            h.record(f"sweep-{day}", "sweep", [NodeRun(n, "p", results(day, n), [])
                                               for n in NODES], when=at(day))
    # Someone rewrites n06's day-9 failure into a pass, without the key: that row must be
    # left out and counted, never judged GO.
    blob = zlib.compress(json.dumps([r.to_json() for r in results(9, "n06", True)]).encode())
    with sqlite3.connect(db) as conn:
        changed = conn.execute(
            "UPDATE node_runs SET results = ?, fail = 0, pass = 4 WHERE time = ? AND node_id = "
            "(SELECT id FROM nodes WHERE name = 'n06')", (blob, at(9))).rowcount
    assert changed == 1
    repo = root / "overrides"
    repo.mkdir()
    for args in (("init", "-q", "-b", "main"), ("config", "user.name", "t"),
                 ("config", "user.email", "t@example.invalid"),
                 ("commit", "-q", "--allow-empty", "-m", "init")):
        _git(repo, *args)
    pol = overrides.OverridePolicy("cur", ("bob", "carol"), people.signers,
                                   "I acknowledge this performance degradation risk", 86400)

    def override(requested: int, approved: int) -> overrides.Override:
        o = overrides.request(pol, "cpu_governor", ["n05"], "known governor issue",
                              12 * HOUR, _signed(people, "alice"), now=requested)
        o = overrides.with_approval(o, overrides.approval(
            o, pol, pol.acknowledgement, _signed(people, "bob"), now=approved))
        return OverrideStore(str(repo)).save(o, f"override {o.id}")

    first = override(at(5, -1), at(5, -0.5))  # in force at day 5's sweep: n05 passes cur
    # ... and revoked on day 7: the live gate would ignore it from now on, but at day 5 it
    # was in force, so the replay still honours it there (judged at that time, not now)
    OverrideStore(str(repo)).revoke(overrides.revocation(
        first.id, "no longer needed", _signed(people, "bob"), now=at(7)),
        lambda cur, snap: None, "revoke")
    override(at(8, 1), at(8, 1.2))  # approved an hour after day 8's block: a false positive
    kb = root / "kb" / "reports"
    kb.mkdir(parents=True)

    def report(rid: str, node: str, t: int, found: str) -> None:
        iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
        (kb / f"{rid}.md").write_text(
            f"---\nid: {rid}\ndate: {iso}\nnode: {node}\ncause: gpu-thermal\nstatus: "
            f"resolved\nresolution:\n  found: {found}\n  date: {iso}\n  by: alice\n---\n# x\n")

    report("rpt-n02", "n02", at(4, 1), "gpu-thermal")  # a real fault on n02
    report("rpt-n04", "n04", at(3, 1), "gpu-ecc-uncorrectable")  # a real fault on n04
    report("rpt-n03", "n03", at(6, 2), "no-fault-found")  # n03 was fine after all
    (kb / "open.md").write_text("---\nid: rpt-open\ndate: 2026-01-01T00:00:00Z\nnode: n01\n"
                                "cause: x\n---\nstill open: no outcome\n")
    env = {"STETHO_GATES": str(gates), "STETHO_CACHE": str(root / "cache")}
    return {"db": db, "repo": repo, "kb": root / "kb", "env": env, "gates": gates}


def replay(world, *extra):
    return stetho("gate", "replay", "--policy", "cand", "--against", "cur", "--since", "30d",
                  "--db", str(world["db"]), "--override-repo", str(world["repo"]),
                  "--kb", str(world["kb"]), *extra, env=world["env"])


def test_replay_figures_equal_the_hand_worked_truth(world):
    proc = replay(world, "--json", "-")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # 6 nodes x 10 sweeps = 60 rows; n06's tampered day-9 row is excluded: 59 points.
    assert doc["decision_points"] == 59 and doc["nodes"] == 6
    assert doc["excluded"]["total"] == 1 and doc["excluded"]["failed_integrity"] == {"n06": 1}
    assert "failed its integrity check" in doc["excluded"]["why"]["n06"]
    cand, cur = doc["policies"]
    assert (cand["policy"], cand["role"], cur["policy"], cur["role"]) == (
        "cand", "candidate", "cur", "current")
    # cur blocks n04 days 2-3 (ECC), n05 day 8 (the override comes an hour later) and n06
    # day 1 (disk); n05 day 5 passes under the override in force then. 4 blocks, 4 node-days.
    assert cur["decision_points"] == {"block": 4, "go": 55, "unevaluated": 0}
    assert cur["node_days_blocked"] == 4
    # cand: n02 days 3-4 and n03 day 6 (over 80 C), n04 days 2-3, n05 days 5 and 8 (no
    # override names cand); it does not count disk_rotational. 7 blocks on 7 node-days.
    assert cand["decision_points"] == {"block": 7, "go": 52, "unevaluated": 0}
    assert cand["node_days_blocked"] == 7
    added = {(a["node"], a["time"], tuple(a["checks"]), a["was"]) for a in cand["added"]}
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    assert added == {("n02", iso(at(3)), ("gpu_temperature",), "go"),
                     ("n02", iso(at(4)), ("gpu_temperature",), "go"),
                     ("n03", iso(at(6)), ("gpu_temperature",), "go"),
                     ("n05", iso(at(5)), ("cpu_governor",), "go")}
    assert [(r["node"], r["time"], r["checks"], r["now"]) for r in cand["removed"]] == [
        ("n06", iso(at(1)), ["disk_rotational"], "go")]
    # Outcomes, horizon 48 h. cur: n04's blocks on days 2 and 3 precede its incident (day 3
    # +1h): 2 TP. n05 day 8 is overridden 1.2 h later: FP. n06 day 1: no event, unknown.
    # n02 was GO on days 3 and 4, and its incident (day 4 +1h) came within 48 h of both:
    # 2 misses (day 2 is 49 h before: outside). precision 2/3, recall 2/4.
    assert cur["outcomes"] == {"true_positive": 2, "false_positive": 1, "miss": 2,
                               "unknown_blocks": 1, "precision": 0.6667, "recall": 0.5}
    # cand: n02 days 3-4 and n04 days 2-3: 4 TP; n03 day 6 (no-fault-found 2 h later) and
    # n05 day 8 (overridden): 2 FP; n05 day 5 (the override was in force before it, not
    # after): unknown. No GO precedes an incident within 48 h (n04 day 1 is 49 h before).
    assert cand["outcomes"] == {"true_positive": 4, "false_positive": 2, "miss": 0,
                                "unknown_blocks": 1, "precision": 0.6667, "recall": 1.0}
    assert doc["outcome_sources"] == {"knowledge_base": True, "overrides": True}
    assert "TP / (TP + FP)" in doc["definitions"]["precision"]


def test_replay_text_lists_the_changes_and_says_how_it_counts(world):
    proc = replay(world)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "59 decision points on 6 nodes" in out
    assert "EXCLUDED 1 rows, never judged: 1 failed their integrity check (nodes: n06)" in out
    assert "policy cand (candidate" in out and "7 node-days blocked; 7 blocks, 52 go" in out
    assert "versus cur: 4 blocks added, 1 removed" in out
    assert out.count("  ADDED ") == 4 and "ADDED n05 " in out and "cpu_governor (cur: go)" in out
    assert "REMOVED n06 " in out and "disk_rotational (cand: go)" in out
    assert "TP 4, FP 2, miss 0, unknown 1 blocks; precision 0.67 (4/6), recall 1.00 (4/4)" in out
    assert "TP 2, FP 1, miss 2, unknown 1 blocks; precision 0.67 (2/3), recall 0.50 (2/4)" in out
    assert "unknown outcomes are never counted correct" in out


def test_without_outcome_sources_nothing_is_scored(world):
    """No kb, no overrides: every block is unknown and there is no precision at all (the
    day-5 override is then not in force either, so cur blocks n05 that day too)."""
    proc = stetho("gate", "replay", "--policy", "cand", "--against", "cur", "--db",
                  str(world["db"]), "--json", "-", env=world["env"])
    assert proc.returncode == 0, proc.stderr
    cand, cur = json.loads(proc.stdout)["policies"]
    assert cur["decision_points"]["block"] == 5
    assert cand["outcomes"] == {"true_positive": 0, "false_positive": 0, "miss": 0,
                                "unknown_blocks": 7, "precision": None, "recall": None}


def test_a_short_window_replays_only_its_rows(world):
    """A window that starts an hour before sweep 6: sweeps 6 to 9 only, less the tampered
    row (and the overrides of spans no decision point fell in still judged: scoring asks)."""
    proc = replay(world, "--since", f"{(int(time.time()) - at(6)) // HOUR + 1}h", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["decision_points"] == 6 * 4 - 1


@pytest.mark.parametrize("args, said", [
    (("--policy", "nope"), "unknown gate policy 'nope'"),
    (("--policy", "cand", "--since", "banana"), "--since 'banana': expected a duration"),
    (("--policy", "cand", "--horizon", "soon"), "--horizon 'soon': expected a duration"),
])
def test_bad_input_is_exit_2_named(world, args, said):
    proc = stetho("gate", "replay", *args, "--db", str(world["db"]), env=world["env"])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr


def test_an_unreadable_knowledge_base_is_exit_3_named(world):
    """Outcomes that cannot be read are not "no incidents": the replay stops, naming it."""
    proc = stetho("gate", "replay", "--policy", "cand", "--kb", "/nonexistent/kb", "--db",
                  str(world["db"]), env=world["env"])
    assert proc.returncode == 3 and "/nonexistent/kb" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_policy_with_an_unknown_mode_is_refused_at_its_line(world, tmp_path):
    bad = tmp_path / "banana.yml"
    bad.write_text("policy: banana\nblock_on: [fail]\nmode: banana\n")
    proc = stetho("gate", "replay", "--policy", str(bad), "--db", str(world["db"]),
                  env=world["env"])
    assert proc.returncode == 2
    assert f"{bad}:3" in proc.stderr and "mode: 'banana' is not one of enforce, shadow" \
        in proc.stderr


def test_nothing_to_replay_is_exit_3(world, tmp_path):
    empty = tmp_path / "empty.db"
    History(empty).close()
    proc = stetho("gate", "replay", "--policy", "cand", "--db", str(empty), env=world["env"])
    assert proc.returncode == 3 and "nothing to replay" in proc.stderr


def test_the_last_replayed_point_is_what_the_live_gate_says_now(tmp_path):
    """Parity: with a freshness window that reaches back over the rows, the live gate now and
    the replay at each node's newest row read the same results (newest per check, a narrow
    run replacing only its checks, a `sweep` error only from the newest row) and must agree."""
    from stetho.gate import policy as gatepolicy
    from stetho.gate import replay as engine

    pol = tmp_path / "wide.yml"
    pol.write_text("policy: wide\nchecks: [gpu_ecc, cpu_governor, gpu_temperature]\n"
                   "block_on: [fail]\nfreshness: 3d\ntighten:\n  gpu_temperature:\n"
                   "    max: 80\n")
    db = tmp_path / "h.db"
    now = time.time()

    def rs(node, **status):
        return [Result(node, c, "", status.get(c, "pass"), "x",
                       81.0 if c == "gpu_temperature" and status.get("hot") else 50.0)
                for c in ("gpu_ecc", "cpu_governor", "gpu_temperature")]

    with History(db) as h:
        h.record("old", "sweep", [
            NodeRun("a1", "p", rs("a1", gpu_ecc="fail"), []),  # replaced by the newer sweep
            NodeRun("a2", "p", rs("a2"), []),
            NodeRun("a3", "p", [Result("a3", "sweep", "", "error", "unreachable")], []),
            NodeRun("a4", "p", rs("a4", hot=True), [])], when=now - 2 * DAY)
        h.record("new", "sweep", [
            NodeRun("a1", "p", rs("a1"), []),
            NodeRun("a3", "p", rs("a3"), []),  # reached again: the old sweep error is gone
            NodeRun("a5", "p", rs("a5", cpu_governor="error"), [])], when=now - DAY)
        h.record("prolog", "gate", [  # a narrow run: only the governor, failing on a2
            NodeRun("a2", "p", [Result("a2", "cpu_governor", "", "fail", "powersave")], []),
            NodeRun("a6", "p", [Result("a6", "cpu_governor", "", "pass", "ok")], [])],
            when=now - 3600)
    proc = stetho("gate", "--policy", str(pol), "--nodes", "a[1-6]", "--db", str(db),
                  "--no-reports", "--out", str(tmp_path / "runs"), "--json", "-", "-q")
    live = json.loads(proc.stdout[:proc.stdout.rindex("}") + 1])
    result = engine.run(db, [gatepolicy.load(str(pol))], int(now - 3 * DAY), int(now))
    last = {node: verdict for (node, _t, _r), (verdict, _c)
            in zip(result.points, result.policies[0].verdicts, strict=True)}
    # by hand: a2's governor fails (prolog), a4 runs hot (81 > 80), a5's governor errored,
    # a6 has only the governor (the rest missing), a1 and a3 are clean in their newest rows
    assert last == {"a1": "go", "a2": "block", "a3": "go", "a4": "block",
                    "a5": "unevaluated", "a6": "unevaluated"}
    assert sorted(live["blocked"]) == [n for n, v in sorted(last.items()) if v == "block"]
    assert sorted(live["could_not_evaluate"]) == [n for n, v in sorted(last.items())
                                                  if v == "unevaluated"]


def _run_folder(tmp_path):
    from stetho.sinks import json_out

    folder = tmp_path / "run"
    folder.mkdir()
    ok = [Result(n, "cpu_governor", "", "pass", "ok") for n in NODES]
    (folder / "results.json").write_text(json.dumps(json_out.document(ok), default=str))
    return folder


def test_the_run_page_shows_the_replay(world, tmp_path):
    """`stetho report RUN_DIR --replay FILE`: the page gets the replay's figures and its
    added/removed blocks, the same numbers as the JSON (checked by hand above)."""
    import html

    replay_json = tmp_path / "replay.json"
    assert replay(world, "--json", str(replay_json)).returncode == 0
    folder = _run_folder(tmp_path)
    proc = stetho("report", str(folder), "--replay", str(replay_json), "--db",
                  str(tmp_path / "other.db"), env=world["env"])
    assert proc.returncode == 0, proc.stderr
    page = html.unescape((folder / "index.html").read_text())
    assert 'id="replay" data-points="59" data-excluded="1"' in page
    assert ('<tr data-policy="cand"><td>cand</td><td>candidate</td><td>7</td><td>7</td>'
            '<td>52</td><td>0</td><td>4</td><td>2</td><td>0</td><td>1</td><td>67%</td>'
            '<td>100%</td></tr>') in page
    assert ('<tr data-policy="cur"><td>cur</td><td>current</td><td>4</td><td>4</td><td>55</td>'
            '<td>0</td><td>2</td><td>1</td><td>2</td><td>1</td><td>67%</td><td>50%</td></tr>'
            ) in page
    assert "cand against cur: 4 blocks added, 1 removed." in page
    assert page.count('<tr class="added">') == 4 and page.count('<tr class="removed">') == 1


def test_a_garbage_replay_file_is_exit_2_named(world, tmp_path):
    folder = _run_folder(tmp_path)
    for text in ("not json at all", json.dumps({"policies": [{"policy": "x"}]})):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        proc = stetho("report", str(folder), "--replay", str(bad), "--db",
                      str(tmp_path / "o.db"), env=world["env"])
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert str(bad) in proc.stderr and "stetho gate replay" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_a_candidate_named_as_the_policy_it_replaces_inherits_its_overrides(world, tmp_path):
    """The README's advice: a candidate file with `policy: cur` is compared by position, not
    by name, and honours cur's overrides at the time they were in force. By hand: as `cand`,
    but n05 day 5 passes under the override, so 3 blocks added (n02 days 3-4, n03 day 6) and
    n06's disk block removed; 6 blocks, TP 4 (n02 x2, n04 x2), FP 2 (n03, n05 day 8)."""
    text = (world["gates"] / "cand.yml").read_text().replace("policy: cand", "policy: cur")
    candidate = tmp_path / "cur-tight.yml"
    candidate.write_text(text)
    proc = stetho("gate", "replay", "--policy", str(candidate), "--against", "cur", "--db",
                  str(world["db"]), "--override-repo", str(world["repo"]), "--kb",
                  str(world["kb"]), "--json", "-", env=world["env"])
    assert proc.returncode == 0, proc.stderr
    new, cur = json.loads(proc.stdout)["policies"]
    assert (new["role"], new["source"], cur["role"]) == ("candidate", str(candidate), "current")
    assert sorted((a["node"], tuple(a["checks"])) for a in new["added"]) == [
        ("n02", ("gpu_temperature",)), ("n02", ("gpu_temperature",)),
        ("n03", ("gpu_temperature",))]
    assert [r["node"] for r in new["removed"]] == ["n06"]
    assert new["decision_points"]["block"] == 6
    assert (new["outcomes"]["true_positive"], new["outcomes"]["false_positive"],
            new["outcomes"]["unknown_blocks"]) == (4, 2, 0)


def test_workers_give_the_same_replay(world, stetho_env):
    """Split over processes by node range, the replay is the same, in the same order."""
    from stetho.gate import policy as gatepolicy
    from stetho.gate import replay as engine

    for name, value in world["env"].items():
        stetho_env.setenv(name, value)
    pols = [gatepolicy.load("cand"), gatepolicy.load("cur")]
    args = (world["db"], pols, at(0) - HOUR, int(time.time()), str(world["repo"]))
    one = engine.run(*args)
    two = engine.run(*args, workers=3, parallel_rows=0)
    assert len(one.points) == 59 and two.points == one.points
    assert [v.verdicts for v in two.policies] == [v.verdicts for v in one.policies]
    assert two.excluded.distrusted == one.excluded.distrusted == {"n06": 1}
    # the day-5 override reached the workers: cur lets n05 pass there
    assert ("go", ()) == two.policies[1].verdicts[one.points.index(("n05", at(5), "sweep-5"))]


def test_workers_end_when_the_caller_catches_sigterm(world, stetho_env, tmp_path):
    """A caller with its own SIGTERM handler (a CLI that finishes its batch first) still gets
    its replay back, and the pool's forked workers die when the pool terminates them instead
    of running the caller's handler: a worker that ran it went on waiting on the task queue,
    and the pool's exit then joined it forever (seen once as a hung suite)."""
    import signal

    from stetho.gate import policy as gatepolicy
    from stetho.gate import replay as engine

    for name, value in world["env"].items():
        stetho_env.setenv(name, value)
    pols = [gatepolicy.load("cand"), gatepolicy.load("cur")]
    args = (world["db"], pols, at(0) - HOUR, int(time.time()), str(world["repo"]))
    me = os.getpid()

    def on_term(_sig, _frame):  # in whichever process it runs: a worker leaves its pid
        if os.getpid() != me:
            (tmp_path / f"term-{os.getpid()}").touch()

    def hung(*_):
        raise AssertionError("the replay's pool did not end within 60 s")

    old_term = signal.signal(signal.SIGTERM, on_term)
    old_alarm = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        got = engine.run(*args, workers=3, parallel_rows=0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old_alarm)
        signal.signal(signal.SIGTERM, old_term)
    assert len(got.points) == 59
    time.sleep(1.0)  # a worker that kept the handler runs it as the pool ends, or just after
    assert sorted(p.name for p in tmp_path.glob("term-*")) == []


def test_a_node_whose_rows_were_deleted_is_left_out_named(world, tmp_path):
    """Deleting rows (the history's chain, stetho.history.chain) is not a healthier past: n02
    missing its day-4 row (a gap) and n03 its newest (the seal names it) are each left out
    with the reason, never replayed from what remains."""
    import shutil

    db = tmp_path / "h.db"
    for suffix in (".key", ".seal"):
        shutil.copy2(str(world["db"]) + suffix, str(db) + suffix)
    with sqlite3.connect(world["db"]) as src, sqlite3.connect(db) as dst:
        src.backup(dst)  # the write-ahead log's pages too
    with sqlite3.connect(db) as conn:
        for node, day in (("n02", 4), ("n03", 9)):
            assert conn.execute("DELETE FROM node_runs WHERE time = ? AND node_id = (SELECT id "
                                "FROM nodes WHERE name = ?)", (at(day), node)).rowcount == 1
    proc = stetho("gate", "replay", "--policy", "cand", "--against", "cur", "--since", "30d",
                  "--db", str(db), "--json", "-", env=world["env"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # 60 rows less the 2 deleted; n02's and n03's remaining 9 each and n06's edited one out
    assert doc["excluded"]["failed_integrity"] == {"n02": 9, "n03": 9, "n06": 1}
    assert doc["decision_points"] == 58 - 9 - 9 - 1
    assert "missing" in doc["excluded"]["why"]["n02"]
    assert "rolled back" in doc["excluded"]["why"]["n03"]
