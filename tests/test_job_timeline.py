"""A job's timeline and its one-line answer, on a real history file written with known
results at known times: what is in the window and what is not, absence, tampered rows, drift,
drains, reports and the leaf switches."""

from __future__ import annotations

import sqlite3
import time
import zlib
from pathlib import Path

import pytest

from stetho.history.store import History, NodeRun
from stetho.jobs import screen, timeline
from stetho.jobs.sacct import Job
from stetho.localize.topology import from_slurm
from stetho.results import Result

NODES = ("n01", "n02", "n03", "n04")
START = 1_780_000_000.0  # the job's start; window [START - 3600, START + 4 h]
END = START + 4 * 3600
TOPOLOGY = ("SwitchName=leafA Nodes=n[01-02],n05\nSwitchName=leafB Nodes=n[03-04],n06\n"
            "SwitchName=spine Switches=leafA,leafB\n")


def _job(nodes: tuple[str, ...] = NODES) -> Job:
    return Job("77", "train", "alice", "gpu", "COMPLETED", START, END, nodes, 32, "sacct")


def _ok(node: str) -> list[Result]:
    return [Result(node, "gpu_clocks", f"gpu{g}", "pass", "locked") for g in range(2)]


def _record(db: Path, when: float, runs: dict[str, list[Result]], run_dir: str = "",
            kind: str = "sweep") -> None:
    with History(db) as h:
        h.record(f"r{int(when)}-{kind}", kind, [NodeRun(n, "h100", rs, []) for n, rs in
                                                runs.items()], when=when, run_dir=run_dir)


def _build(db: Path, nodes: tuple[str, ...] = NODES, **kw: object) -> timeline.Timeline:
    with History(db) as h:
        return timeline.build(h, nodes, START - 3600, END, **kw)  # type: ignore[arg-type]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Every node clean an hour before the job (inside the margin) and in its middle."""
    path = tmp_path / "h.db"
    for t in (START - 1800, START + 7200):
        _record(path, t, {n: _ok(n) for n in NODES})
    return path


def test_a_clean_window_is_no_finding_and_says_how_many_nodes_had_history(db: Path) -> None:
    tl = _build(db)
    v = screen.verdict(_job(), tl)
    assert v.code == screen.NO_FINDING
    assert v.headline.startswith("no hardware finding on any of the job's 4 nodes in the "
                                 "window ")
    assert v.headline.endswith("(4 had history; 0 missing)")
    assert tl.events == []


def test_a_failing_port_is_the_answer_with_time_report_and_shared_leaf(db: Path,
                                                                        tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "sweep-1"
    (run_dir / "reports").mkdir(parents=True)
    report = run_dir / "reports" / "n03-ib-link-degraded-abc123.md"
    report.write_text("# n03\n")
    (run_dir / "reports" / "n030-other-x.md").write_text("not n03's\n")
    t_fail = START + 3 * 3600 + 420
    bad = [Result("n03", "ib_port_state", "mlx5_0:1", "fail",
                  "mlx5_0 port at 200 Gb/s, expected 400 Gb/s"),
           Result("n03", "gpu_clocks", "gpu0", "pass", "locked")]
    _record(db, t_fail, {"n03": bad, **{n: _ok(n) for n in NODES if n != "n03"}},
            str(run_dir))
    _record(db, t_fail + 600, {"n03": bad})  # still failing, no report this time
    tl = _build(db, topology=from_slurm(TOPOLOGY))
    v = screen.verdict(_job(), tl)
    since = time.strftime("%H:%M %Z", time.localtime(t_fail))
    assert v.code == screen.FINDING
    assert v.headline == (f"likely hardware: node n03's mlx5_0:1 (ib_port_state): mlx5_0 port "
                          f"at 200 Gb/s, expected 400 Gb/s since {since} (report {report}), "
                          "shared leaf leafB with 1 other node of this job")
    fails = tl.of("fail")
    assert [(e.time, e.node) for e in fails] == [(t_fail, "n03"), (t_fail + 600, "n03")]
    assert fails[0].reports == (str(report),) and fails[1].reports == ()
    text = screen.render(_job(), tl, v)
    assert "leaves: leafA: 2 of the job's nodes; leafB: 2 of the job's nodes" in text
    assert f"report {report}" in text


def test_a_fault_already_there_at_the_first_record_is_not_said_to_begin_then(
        tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    t = START - 1200
    _record(db, t, {"n01": [Result("n01", "gpu_xid", "gpu1", "fail", "Xid 79")],
                    **{n: _ok(n) for n in NODES[1:]}})
    v = screen.verdict(_job(), _build(db))
    since = time.strftime("%H:%M %Z", time.localtime(t))
    assert f"Xid 79 since at least {since} (its first record in the window)" in v.headline


def test_results_outside_the_window_are_not_on_it(db: Path) -> None:
    for t in (START - 3600 - 1, END + 1):
        _record(db, t, {"n02": [Result("n02", "gpu_xid", "gpu1", "fail", "Xid 79")]})
    tl = _build(db)
    assert tl.events == [] and screen.verdict(_job(), tl).code == screen.NO_FINDING


def test_a_node_without_history_is_no_evidence_not_clean(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _record(db, START + 60, {n: _ok(n) for n in NODES[:3]})
    tl = _build(db)
    v = screen.verdict(_job(), tl)
    assert tl.missing == ["n04"]
    assert v.code == screen.CANNOT_TELL
    assert v.headline.endswith("(3 had history; 1 missing: n04 — no evidence)")
    assert "no history in the window (no evidence): n04" in screen.render(_job(), tl, v)


def test_a_window_with_no_record_at_all_is_not_no_finding(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _record(db, START - 86400, {n: _ok(n) for n in NODES})  # a day before: outside
    v = screen.verdict(_job(), _build(db))
    assert v.code == screen.CANNOT_TELL
    assert v.headline.startswith("cannot tell: no history record for any of the job's 4 "
                                 "nodes in the window")


def test_a_tampered_row_is_reported_never_clean(db: Path) -> None:
    t = START + 600
    _record(db, t, {"n02": [Result("n02", "gpu_ecc", "gpu3", "fail", "uncorrectable")]})
    con = sqlite3.connect(db)  # someone edits the failure into a pass and the counts with it
    blob = zlib.compress(b'[{"node": "n02", "check": "gpu_ecc", "subject": "gpu3", '
                         b'"status": "pass"}]')
    con.execute("UPDATE node_runs SET results = ?, fail = 0, pass = 1 WHERE time = ?",
                (blob, int(t)))
    con.commit()
    con.close()
    tl = _build(db)
    assert tl.distrusted == ["n02"]
    (bad,) = tl.of("integrity")
    assert bad.node == "n02" and "failed its integrity check" in bad.message
    v = screen.verdict(_job(), tl)
    assert v.code == screen.CANNOT_TELL
    assert "history rows of n02 failed their integrity check" in v.headline


@pytest.mark.parametrize("where", ["newest", "middle"])
def test_a_deleted_failure_is_reported_never_clean(db: Path, where: str) -> None:
    """The failure that answered the question deleted from the database: the node's chain
    (stetho.history.chain) gives it away, as the newest row missing under the seal or as a
    gap in the window; the answer is "cannot tell", never "no hardware finding"."""
    t = START + 600
    _record(db, t, {"n02": [Result("n02", "gpu_ecc", "gpu3", "fail", "uncorrectable")]})
    if where == "middle":
        _record(db, START + 9000, {n: _ok(n) for n in NODES})
    con = sqlite3.connect(db)
    con.execute("DELETE FROM node_runs WHERE time = ?", (int(t),))
    con.commit()
    con.close()
    tl = _build(db)
    assert tl.distrusted == ["n02"]
    (bad,) = tl.of("integrity")
    assert bad.node == "n02"
    assert ("rolled back" if where == "newest" else "missing") in bad.message
    assert screen.verdict(_job(), tl).code == screen.CANNOT_TELL


def test_drift_and_warnings_are_listed_and_do_not_make_a_finding(db: Path) -> None:
    _record(db, START + 900, {"n01": [
        Result("n01", "drift_shift", "gpu2", "warn", "temperature_c shifted +6 C"),
        Result("n01", "gpu_temperature", "gpu2", "warn", "83 C")]})
    tl = _build(db)
    v = screen.verdict(_job(), tl)
    assert v.code == screen.NO_FINDING
    assert "; 2 warnings (first: n01 drift_shift)" in v.headline
    text = screen.render(_job(), tl, v)
    assert "DRIFT      n01 drift_shift gpu2: temperature_c shifted +6 C" in text
    assert "WARN       n01 gpu_temperature gpu2: 83 C" in text


def test_drains_in_the_window_and_slurms_current_ones_are_on_it(db: Path) -> None:
    drains = [timeline.Drain("n04", START + 100, "stetho: gpu_xid: Xid 79", "ledger"),
              timeline.Drain("n04", START - 86400, "stetho: old", "ledger"),  # before: no
              timeline.Drain("n09", START + 100, "not the job's", "ledger"),
              timeline.Drain("n02", None, "RMA by ops", "slurm")]
    tl = _build(db, drains=drains)
    got = [(e.node, e.message) for e in tl.of("drain")]
    assert got == [("n04", "stetho: gpu_xid: Xid 79 (ledger)"),
                   ("n02", "RMA by ops (drained in Slurm now)")]
    # the ledger's drain Slurm still shows (its reason capped) is one event, not two
    both = [timeline.Drain("n03", START + 200, "stetho: gpu_ecc: " + "x" * 300, "ledger"),
            timeline.Drain("n03", START + 201, "stetho: gpu_ecc: " + "x" * 183, "slurm")]
    (one,) = _build(db, drains=both).of("drain")
    assert one.time == START + 200 and one.message.endswith("(ledger; still drained in Slurm)")


def test_failures_under_the_same_leaf_make_one_switch_incident(db: Path) -> None:
    t = START + 3600
    _record(db, t, {"n01": [Result("n01", "nccl_busbw", "allreduce", "fail", "120 GB/s")],
                    "n05": [Result("n05", "ib_port_state", "mlx5_1:1", "fail", "Down")],
                    "n06": [Result("n06", "gpu_xid", "gpu0", "warn", "Xid 13")]})
    tl = _build(db, topology=from_slurm(TOPOLOGY))
    assert [(e.node, e.leaf) for e in tl.neighbours] == [("n05", "leafA")]  # n06 only warns
    v = screen.verdict(_job(), tl)
    assert v.code == screen.FINDING
    assert v.headline.startswith("likely the leaf switch leafA: 2 nodes under it failing in "
                                 "the window (n01 of this job; n05 outside it); first: node "
                                 "n01's allreduce (nccl_busbw)")
