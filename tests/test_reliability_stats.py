"""`stetho stats` on a history with a known timeline: every figure against arithmetic done
here by hand, through the CLI as a subprocess. The history is written through the store's
own API (rows signed), the drain ledger through the drain budget, the override through the
override store into a real git repository, the knowledge base as report files."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from stetho.gate.breaker import Circuit
from stetho.gate.budget import DrainBudget
from stetho.history import remedies
from stetho.history.store import History, NodeRun
from stetho.publish.reports import Resolution
from stetho.publish.resolve import NO_FAULT_FOUND, with_resolution
from stetho.results import Result
from tests.conftest import StethoEnv
from tests.signing import People, make_people
from tests.test_kb import make_report

DAY = 86400
NOW = int(time.time())
T0 = NOW - 40 * DAY
NODES = ["n01", "n02", "n03", "n04"]
#: (node, night) -> (status, check); every other node-night passes
PLAN = {("n01", 3): ("warn", "gpu_xid"),
        ("n01", 5): ("fail", "gpu_xid"), ("n01", 6): ("fail", "gpu_xid"),
        ("n01", 10): ("fail", "ib_port_state"), ("n02", 10): ("fail", "ib_port_state"),
        ("n03", 15): ("fail", "gpu_xid"), ("n03", 19): ("warn", "drift_shift"),
        ("n03", 20): ("fail", "gpu_xid"),
        ("n03", 25): ("fail", "gpu_xid")}
TOPOLOGY = ("SwitchName=spine Switches=leafA,leafB\n"
            "SwitchName=leafA Nodes=n[01-02]\nSwitchName=leafB Nodes=n[03-04]\n")


def t(night: int) -> int:
    return T0 + night * DAY


def results(node: str, night: int) -> list[Result]:
    status, check = PLAN.get((node, night), ("pass", "gpu_xid"))
    subject = {"gpu_xid": "gpu0", "drift_shift": "gpu0:temperature_c"}.get(check, "mlx5_0:1")
    out = [Result(node, check, subject, status, "")]
    other = "ib_port_state" if check == "gpu_xid" else "gpu_xid"
    return out + [Result(node, other, "x", "pass", "")]


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> People:
    return make_people(tmp_path_factory.mktemp("people"))


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, people: People,
          stetho_env: StethoEnv) -> dict[str, Path]:
    cfg = tmp_path / "gitconfig"
    cfg.write_text("[user]\n\tname = T\n\temail = t@example.invalid\n[init]\n\t"
                   "defaultBranch = main\n")
    for k, v in {"GIT_CONFIG_GLOBAL": str(cfg), "GIT_CONFIG_NOSYSTEM": "1",
                 "STETHO_CACHE": str(tmp_path / "cache"), "STETHO_GATES": str(people.gates),
                 "STETHO_DB": str(tmp_path / "history.db"),
                 "XDG_DATA_HOME": str(tmp_path / "xdg")}.items():
        stetho_env.setenv(k, v)
    for k in ("STETHO_KB_REPO", "STETHO_OVERRIDE_REPO", "STETHO_DRAIN_LEDGER"):
        monkeypatch.delenv(k, raising=False)
    db = tmp_path / "history.db"
    with History(db) as h:
        for night in range(30):
            h.record(f"run-{night:02d}", "sweep",
                     [NodeRun(n, "h100", results(n, night), []) for n in NODES], when=t(night))
        # what stetho did by itself: one GPU reset on n01 that worked, one that failed
        for outcome in ("done", "failed"):
            remedies.record(h, remedies.Record(t(5) + 900, "n01", "gpu0", "gpu_xid",
                                               "gpu_reset", outcome))
    # someone edits n04's pass on night 12 into a fail: its MAC no longer matches
    con = sqlite3.connect(db)
    con.execute("UPDATE node_runs SET fail = 1 WHERE time = ? AND node_id = "
                "(SELECT id FROM nodes WHERE name = 'n04')", (t(12),))
    con.commit()
    con.close()
    # stetho drained n01 10 min after its first gpu_xid failure, resumed it 5 min after it
    # passed again (night 7)
    budget = DrainBudget(tmp_path / "drain-ledger.db", Circuit(window_s=10 * DAY))
    budget.request(["n01"], scope="c", scope_size=4, who="gate", reasons={"n01": "gpu_xid"},
                   now=t(5) + 600)
    budget.release("n01", now=t(7) + 300)
    # a person overrode n02's ib_port_state block an hour after it failed
    from stetho.gate.override_store import OverrideStore
    from stetho.gate.overrides import approval, request, with_approval
    from stetho.gate.policy import load_override_policy
    from stetho.gate.signatures import sign

    remote = tmp_path / "overrides.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    policy = load_override_policy("release")
    o = request(policy, "ib_port_state", ["n02"], "RMA 1", 3600, lambda m: sign(m, people.key(
        "alice")), now=t(10) + 3600)
    o = with_approval(o, approval(o, policy, policy.acknowledgement,
                                  lambda m: sign(m, people.key("bob")), now=t(10) + 3700))
    OverrideStore(str(remote)).save(o, "override n02")
    # the report on n03's first gpu_xid came 2 h after it failed; the technician found nothing
    kb = tmp_path / "kb"
    path = make_report(kb, "n03", "gpu-xid", datetime.fromtimestamp(t(15) + 7200, timezone.utc),
                       checks=["gpu_xid"])
    res = Resolution(NO_FAULT_FOUND, datetime.fromtimestamp(t(17), timezone.utc), by="tech")
    path.write_text(with_resolution(path.read_text(), res))
    topo = tmp_path / "topology.conf"
    topo.write_text(TOPOLOGY)
    return {"db": db, "ledger": tmp_path / "drain-ledger.db", "remote": remote, "kb": kb,
            "topology": topo}


def stats(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", "stats", *args], text=True,
                          capture_output=True, env=os.environ.copy())


def test_every_figure_equals_the_hand_computed_timeline(world: dict[str, Path]) -> None:
    p = stats("--json", "--db", str(world["db"]), "--ledger", str(world["ledger"]),
              "--kb", str(world["kb"]), "--override-repo", str(world["remote"]),
              "--gpus-per-job", "64", "--checkpoint", "30m", "--restart", "10m")
    assert p.returncode == 0, p.stderr
    f = json.loads(p.stdout)
    # 4 nodes x 30 nights; n04's edited row fails its MAC and is left out
    assert f["rows"]["read"] == 120
    assert f["rows"]["excluded"] == 1 and "n04" in f["rows"]["why"][0]
    # incidents: n01 gpu_xid (nights 5-6), n01 ib_port_state (10), n02 ib_port_state (10),
    # n03 gpu_xid (15, 20, 25); n04's edited fail is not one
    assert f["incidents"] == 6 and f["open"] == 0
    assert f["by_cause"] == {"gpu_xid": 4, "ib_port_state": 2}
    # every node observed night 0 .. night 29: 29 d = 696 h, x4 nodes = 2784 node-hours
    assert f["node_hours"] == pytest.approx(2784)
    assert f["mtbf_hours"]["per_node"] == pytest.approx(2784 / 6)  # 464 h
    assert f["mtbf_hours"]["per_1000_gpus"] == pytest.approx(464 * 8 / 1000)  # 3.712 h
    # MTTR: n01's gpu_xid from its drain (t5+600) to its resume (t7+300) = 2 d - 300 s
    # = 172500 s; the other five fail -> next pass = 1 d = 86400 s each
    mttr = f["mttr_hours"]
    assert (mttr["n"], mttr["from_drains"], mttr["from_passes"]) == (6, 1, 5)
    assert mttr["mean"] == pytest.approx((172500 + 5 * 86400) / 6 / 3600)  # 27.99 h
    assert mttr["median"] == pytest.approx(24)
    # detect: n01 warned of gpu_xid on night 3, failed on night 5 (its drain came after):
    # 48 h; n03's gpu0 drifted on night 19 and failed gpu_xid on night 20: 24 h; mean 36 h;
    # the other four had no warning
    ttd = f["time_to_detect_hours"]
    assert (ttd["n"], ttd["mean"], ttd["without_warning"]) == (2, pytest.approx(36), 4)
    # localize: n03's report 2 h after its first failure
    ttl = f["time_to_localize_hours"]
    assert (ttl["n"], ttl["mean"], ttl["without_report"]) == (1, pytest.approx(2), 5)
    # false positives: n02's overridden block and n03's no-fault-found: 2 of 6
    fp = f["false_positives"]
    assert (fp["count"], fp["overridden"], fp["no_fault_found"]) == (2, 1, 1)
    assert fp["rate"] == pytest.approx(2 / 6, abs=1e-6)
    # lemons (>= 3 in 30 d): n03's three within 10 days; n01's two are not enough
    assert f["lemons"]["nodes"] == {"n03": 3}
    # ETTR: 64 GPUs = 8 nodes; rate = 8 / 464 per h; loss = 0.25 h + 1/6 h
    e = f["ettr"]
    assert e["nodes"] == 8
    assert e["ettr"] == pytest.approx(1 / (1 + 8 / 464 * (0.25 + 1 / 6)), abs=1e-6)
    assert "HPCA 2025" in e["source"]
    assert f["notes"] == []
    assert f["remedies"] == {"gpu_reset": {"done": 1, "failed": 1}}


def test_absent_sources_are_said_and_figures_rest_on_what_is_given(
        world: dict[str, Path]) -> None:
    world["ledger"].rename(world["ledger"].with_name("elsewhere.db"))
    p = stats("--json", "--db", str(world["db"]), "--override-repo", str(world["remote"]))
    assert p.returncode == 0, p.stderr
    f = json.loads(p.stdout)
    assert any("no knowledge base given" in n and "overrides only" in n for n in f["notes"])
    # without the kb only n02's override counts: 1 of 6
    assert f["false_positives"]["count"] == 1
    assert f["false_positives"]["rate"] == pytest.approx(1 / 6, abs=1e-6)
    assert f["time_to_localize_hours"]["mean"] is None
    # no ledger beside the database: every repair is fail -> next pass, n01's 2 d included
    assert any(n.startswith("no drain ledger at") for n in f["notes"])
    assert f["mttr_hours"]["from_drains"] == 0
    assert f["mttr_hours"]["mean"] == pytest.approx((2 * DAY + 5 * DAY) / 6 / 3600)
    table = stats("--db", str(world["db"]))
    assert table.returncode == 0, table.stderr
    assert "no knowledge base given" in table.stdout
    assert "1 row unverified, excluded" in table.stdout
    assert "false positives   unknown (no source given)" in table.stdout
    assert "time to localize  not measured (no knowledge base given (--kb))" in table.stdout
    assert "stetho acted      gpu_reset: done 1, failed 1" in table.stdout


def test_by_node_gives_each_nodes_mtbf_worst_first(world: dict[str, Path]) -> None:
    p = stats("--json", "--by", "node", "--db", str(world["db"]))
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["groups"]["rows"]
    # n03: 3 incidents in its 696 h -> 232 h; n01: 2 -> 348 h; n02: 1 -> 696 h; n04: none
    assert [(r["node"], r["incidents"]) for r in rows] == [("n03", 3), ("n01", 2), ("n02", 1),
                                                            ("n04", 0)]
    assert [r["mtbf_hours"] for r in rows] == [pytest.approx(232), pytest.approx(348),
                                               pytest.approx(696), None]


def test_a_broken_source_is_named_and_its_figures_unknown(world: dict[str, Path]) -> None:
    world["ledger"].write_bytes(b"this is not a sqlite file" * 100)
    p = stats("--json", "--db", str(world["db"]), "--ledger", str(world["ledger"]))
    assert p.returncode == 3
    f = json.loads(p.stdout)
    assert f["mttr_hours"]["mean"] is None
    assert str(world["ledger"]) in f["mttr_hours"]["unknown"]


def test_by_switch_counts_a_leaf_event_once(world: dict[str, Path]) -> None:
    p = stats("--json", "--by", "switch", "--topology", str(world["topology"]),
              "--db", str(world["db"]))
    assert p.returncode == 0, p.stderr
    rows = {r["switch"]: r for r in json.loads(p.stdout)["groups"]["rows"]}
    # leafA: n01 alone on night 5, n01 + n02 together on night 10 -> 2 switch incidents
    assert (rows["leafA"]["incidents"], rows["leafA"]["shared"],
            rows["leafA"]["node_incidents"]) == (2, 1, 3)
    assert (rows["leafB"]["incidents"], rows["leafB"]["shared"]) == (3, 0)
    assert stats("--by", "switch", "--db", str(world["db"])).returncode == 2


@pytest.mark.parametrize("args", [["--since", "garbage"], ["--since", "-3d"],
                                  ["--lemon", "three/30d"], ["--checkpoint", "0m"]])
def test_garbage_values_are_exit_2_without_a_traceback(world: dict[str, Path],
                                                       args: list[str]) -> None:
    p = stats(*args, "--db", str(world["db"]))
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and args[0] in p.stderr


def test_textfile_is_valid_prometheus(world: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "stats.prom"
    p = stats("--db", str(world["db"]), "--kb", str(world["kb"]), "--textfile", str(out))
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert 'stetho_incidents{cause="gpu_xid"} 4' in text
    assert 'stetho_lemon_node{node="n03"} 1' in text
    assert f"stetho_mtbf_seconds{{scope=\"node\"}} {2784 / 6 * 3600:.0f}" in text
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                               capture_output=True)
        assert check.returncode == 0, check.stdout + check.stderr


def test_an_override_that_does_not_verify_makes_the_false_positive_rate_unknown(
        world: dict[str, Path], people: People) -> None:
    from stetho.gate.override_store import OverrideStore
    from stetho.gate.overrides import approval, request, with_approval
    from stetho.gate.policy import load_override_policy
    from stetho.gate.signatures import sign

    policy = load_override_policy("release")
    alice = people.key("alice")
    o = request(policy, "gpu_xid", ["n03"], "self-approved", 3600, lambda m: sign(m, alice),
                now=t(20) + 60)
    # alice approves her own request: the gate would never honour it
    o = with_approval(o, approval(o, policy, policy.acknowledgement, lambda m: sign(m, alice),
                                  now=t(20) + 120))
    OverrideStore(str(world["remote"])).save(o, "self-approved")
    p = stats("--json", "--db", str(world["db"]), "--override-repo", str(world["remote"]),
              "--kb", str(world["kb"]))
    assert p.returncode == 3
    fp = json.loads(p.stdout)["false_positives"]
    assert fp["count"] is None and fp["rate"] is None
    assert o.id in fp["unknown"]


def test_the_run_page_of_stetho_report_shows_the_figures(world: dict[str, Path],
                                                        tmp_path: Path) -> None:
    from stetho.sinks import json_out

    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "results.json").write_text(json_out.render(results("n04", 0)))
    p = subprocess.run([sys.executable, "-m", "stetho", "report", str(run_dir), "--db",
                        str(world["db"])], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    page = (run_dir / "index.html").read_text()
    assert 'id="reliability" data-known="yes"' in page
    assert "1 row unverified, excluded" in page
    assert "<tr><th>incidents</th><td>6 (0 still open)</td></tr>" in page
    assert "<tr><th>lemon nodes</th><td>n03 (3) (&gt;= 3 incidents in 30 d)</td></tr>" in page
    # without a history database the page has no figures block
    empty = subprocess.run([sys.executable, "-m", "stetho", "report", str(run_dir), "--db",
                            str(tmp_path / "none.db")], capture_output=True, text=True,
                           timeout=120)
    assert empty.returncode == 0, empty.stderr
    assert 'id="reliability"' not in (run_dir / "index.html").read_text()


def test_unusable_inputs_are_named_errors(world: dict[str, Path], tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not sqlite" * 500)
    p = stats("--db", str(garbage))
    assert p.returncode == 3 and str(garbage) in p.stderr and "Traceback" not in p.stderr
    bad_topo = tmp_path / "topo.conf"
    bad_topo.write_text("Nodes=n01\n")
    p = stats("--by", "switch", "--topology", str(bad_topo), "--db", str(world["db"]))
    assert p.returncode == 2 and str(bad_topo) in p.stderr
    # the key that signed the rows is gone: nothing can be verified, so no figure is given
    key = world["db"].with_name(world["db"].name + ".key")
    key.rename(tmp_path / "kept.key")
    p = stats("--json", "--db", str(world["db"]))
    assert p.returncode == 3 and p.stdout == ""
    assert str(key) in p.stderr and "cannot be verified" in p.stderr


def test_a_lone_failure_edited_into_a_pass_is_caught_not_believed(
        world: dict[str, Path]) -> None:
    # n02's only failure (night 10) made a pass: its neighbours pass too, so no state change
    # is left to see; the row's MAC still gives it away
    con = sqlite3.connect(world["db"])
    con.execute("UPDATE node_runs SET fail = 0, pass = pass + 1 WHERE time = ? AND node_id = "
                "(SELECT id FROM nodes WHERE name = 'n02')", (t(10),))
    con.commit()
    con.close()
    f = json.loads(stats("--json", "--db", str(world["db"])).stdout)
    assert f["rows"]["excluded"] == 2  # n04's night 12 and n02's night 10
    assert any("n02" in why for why in f["rows"]["why"])
    assert f["incidents"] == 5  # n02's incident rests on an excluded row: not counted


def test_deleted_rows_are_named_not_a_healthier_fleet(world: dict[str, Path]) -> None:
    """The rows' chain (stetho.history.chain): n02's only failure (night 10) deleted leaves a
    gap in its chain, n03's newest rows (nights 25-29, its last incident) deleted leave the
    seal's head missing. Each node is left out and named; neither reads as fewer incidents."""
    con = sqlite3.connect(world["db"])
    for node, where in (("n02", "time = ?"), ("n03", "time >= ?")):
        night = 10 if node == "n02" else 25
        con.execute(f"DELETE FROM node_runs WHERE {where} AND node_id = "
                    "(SELECT id FROM nodes WHERE name = ?)", (t(night), node))
    con.commit()
    con.close()
    p = stats("--json", "--db", str(world["db"]))
    f = json.loads(p.stdout)
    whys = " ".join(f["rows"]["why"])
    assert "n02" in whys and "missing" in whys  # the gap below night 11
    assert "n03" in whys and "rolled back" in whys  # the seal names night 29's row
    # n04's edited row (1) + n02's 29 remaining rows + n03's 25 remaining rows
    assert f["rows"]["excluded"] == 1 + 29 + 25
    # only n01's two incidents remain countable: n02's and n03's are not guessed at
    assert f["incidents"] == 2
