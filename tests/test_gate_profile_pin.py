"""`stetho gate` pins each node's profile (the inventory's `stetho_profile`, else the profile
history last recorded the node with) and names it on every verdict line: an H100 judged as
`generic` passes unlocked clocks, so results judged under another profile are could not
evaluate for that node, never GO (issue 28)."""

from __future__ import annotations

import json
import time

import pytest

from stetho.history.store import History, NodeRun
from stetho.results import Result
from tests.test_gate import NODE_CHECKS, stetho

H100 = "h100-sxm-8gpu"


def _run(node: str, failing: str | None = None) -> list[Result]:
    """A whole run (every node check) that passes, but for `failing`."""
    return [Result(node, c, "", "fail" if c == failing else "pass",
                   f"{c} is wrong" if c == failing else "ok",
                   remediation=f"fix {c}" if c == failing else "")
            for c in NODE_CHECKS]


def _db(tmp_path, runs):
    """History with (run id, age in seconds, [(node, profile, failing check)])."""
    path = tmp_path / "h.db"
    with History(path) as h:
        for run_id, age, nodes in runs:
            h.record(run_id, "sweep", [NodeRun(n, p, _run(n, bad), []) for n, p, bad in nodes],
                     when=time.time() - age)
    return path


@pytest.fixture
def policy(tmp_path):
    """Failures block, errors cannot be evaluated (pre-job blocks on both), no drains."""
    path = tmp_path / "pin.yml"
    path.write_text("policy: pin\nblock_on: [fail]\nfreshness: 6h\nscheduler:\n  drain: false\n")
    return path


def _gate(db, policy, *args):
    return stetho("gate", "--policy", str(policy), "--db", str(db), *args)


def test_a_node_recorded_as_h100_and_now_judged_as_generic_cannot_be_evaluated(tmp_path, policy):
    """Days ago n001 ran as an H100 (clocks unlocked: blocked); the fresh run judged it as
    `generic`, where clocks pass. History pins h100: not GO. n002 was only ever generic."""
    db = _db(tmp_path, [("r-h100", 3 * 86400, [("n001", H100, "gpu_clocks")]),
                        ("r-now", 600, [("n001", "generic", None),
                                        ("n002", "generic", None)])])
    proc = _gate(db, policy, "--nodes", "n[001-002]", "--json", str(tmp_path / "g.json"))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 3, proc.stdout + proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary.startswith("gate pin: COULD NOT EVALUATE: 2 nodes, 1 go, 0 blocked; "
                              "could not evaluate 1 (n001; n001: judged as generic, pinned "
                              f"{H100} (last recorded with it in run r-h100): ")
    assert summary.endswith(f"; profile generic (n002), {H100} (n001)"), summary
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["profiles"] == {"n001": H100, "n002": "generic"}
    assert doc["exit_code"] == 3

    prejob = stetho("gate", "--policy", "pre-job", "--db", str(db), "--nodes", "n001")
    assert prejob.returncode == 1, prejob.stdout  # pre-job blocks on errors: so on this one
    assert f"BLOCK n001 gate: judged as generic, pinned {H100}" in prejob.stdout


def test_the_inventory_pins_a_profile_history_never_recorded(tmp_path, policy):
    db = _db(tmp_path, [("r-now", 600, [("n001", "generic", None)])])
    inventory = tmp_path / "inv.yml"
    inventory.write_text(f"all:\n  hosts:\n    n001:\n      stetho_profile: {H100}\n")
    unpinned = _gate(db, policy, "--nodes", "n001")  # nothing names its hardware: as recorded
    assert unpinned.returncode == 0, unpinned.stdout + unpinned.stderr
    assert unpinned.stdout.strip().endswith("; profile generic (n001)")
    pinned = _gate(db, policy, "--nodes", "n001", "-i", str(inventory))
    assert pinned.returncode == 3, pinned.stdout + pinned.stderr
    assert (f"n001: judged as generic, pinned {H100} (the inventory's stetho_profile): "
            in pinned.stdout)


def test_results_judged_under_the_pinned_profile_decide_and_every_block_names_it(tmp_path, policy):
    db = _db(tmp_path, [("r-old", 3 * 86400, [("n001", "generic", None)]),
                        ("r-now", 600, [("n001", H100, "cpu_governor"),
                                        ("n002", H100, None)])])
    proc = _gate(db, policy, "--nodes", "n[001-002]")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (f"BLOCK n001 cpu_governor: cpu_governor is wrong -> fix cpu_governor "
            f"(profile {H100})") in proc.stdout
    assert proc.stdout.strip().endswith(f"; profile {H100} (n[001-002])")


@pytest.mark.parametrize("judged", ["generic", ""])
def test_a_failure_judged_under_another_profile_still_blocks(tmp_path, policy, judged):
    """A mismatch never makes a verdict milder: the failure stands, the passes beside it
    (judged under the wrong profile) make the node could-not-evaluate too."""
    db = _db(tmp_path, [("r-h100", 3 * 86400, [("n001", H100, None)]),
                        ("r-now", 600, [("n001", judged, "cpu_governor")])])
    proc = _gate(db, policy, "--nodes", "n001", "--json", str(tmp_path / "g.json"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "BLOCK n001 cpu_governor: cpu_governor is wrong" in proc.stdout
    results = json.loads((tmp_path / "g.json").read_text())["results"]
    others = [c for c in NODE_CHECKS if c != "cpu_governor"]
    assert [(r["check"], r["status"], r["message"]) for r in results
            if r["check"] == "gate"] == [
        ("gate", "error", f"judged as {judged or 'no recorded profile'}, pinned {H100} (last "
         f"recorded with it in run r-h100): {', '.join(others[:8])} and {len(others) - 8} more")]
    assert not [r for r in results if r["status"] == "pass"]
