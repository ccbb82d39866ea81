"""`stetho ingest` holds a bounded part of the fleet at its two costly steps, through the CLI.

The history is written RECORD_CHUNK nodes at a time (each node's NodeRun, blob included, made
as the write asks for it), and the failing nodes are diagnosed one at a time (each one's
parsed evidence let go before the next is read). The CLI runs in a child process with those
two steps watched: at each, the live NodeRun and Bundle objects are counted (gc), and what
was recorded is read back from the real history (every node once, the seal still verifies).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stetho import spool as spool_mod
from stetho.fleet import outcome as outcome_mod
from stetho.history.store import History
from tests.conftest import REPO
from tests.test_ingest import _rows, outcome_for, sim_outcome

CHUNK = 4
NODES = [f"n{i:02d}" for i in range(1, 14)]  # 13: three full chunks and a short one
FAILING = set(NODES[::2])  # 7 of them fail a check: each one is diagnosed

#: The CLI in this process, with History._record_chunk and the diagnosis watched.
WATCH = """
import gc, json, sys
from stetho.cli import main
from stetho.diagnosis import engine
from stetho.evidence.bundle import Bundle
from stetho.history import store

store.RECORD_CHUNK = %(chunk)d
seen = {"chunks": [], "runs_alive": 0, "bundles_alive": 0, "diagnosed": 0}

def live(kind):
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is kind)

chunk = store.History._record_chunk
def watched_chunk(self, key, run_key, run_id, t, nodes, *rest):
    seen["chunks"].append(len(nodes))
    seen["runs_alive"] = max(seen["runs_alive"], live(store.NodeRun))
    return chunk(self, key, run_key, run_id, t, nodes, *rest)
store.History._record_chunk = watched_chunk

diagnose = engine.diagnose
def watched_diagnose(ctx, **kw):
    seen["diagnosed"] += 1
    seen["bundles_alive"] = max(seen["bundles_alive"], live(Bundle))
    return diagnose(ctx, **kw)
engine.diagnose = watched_diagnose

sys.argv = ["stetho", "ingest", *sys.argv[2:]]
try:
    main()
finally:
    with open(%(out)r, "w") as fh:
        json.dump(seen, fh)
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return sim_outcome(tmp_path_factory.mktemp("sim"))


def _failing(template: dict[str, Any], node: str) -> outcome_mod.Outcome:
    """`node`'s outcome with its first passing result turned into a failure."""
    out = outcome_for(template, node)
    doc = copy.deepcopy(out.to_json())
    first = next(r for r in doc["results"]["results"] if r["status"] == "pass")
    first.update(status="fail", message="failed for the test")
    doc["exit_code"] = 1
    return outcome_mod.from_json(doc, node)


def test_ingest_records_and_diagnoses_a_bounded_part_of_the_fleet_at_a_time(
        template: dict[str, Any], tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    for n in NODES:
        out = _failing(template, n) if n in FAILING else outcome_for(template, n)
        spool_mod.write(spool, out, run_id="20260101T000000Z-mem", kind="health-check",
                        when=time.time())
    seen_at = tmp_path / "seen.json"
    script = WATCH % {"chunk": CHUNK, "out": str(seen_at)}
    r = subprocess.run([sys.executable, "-c", script, "ingest", str(spool), "--db",
                        str(tmp_path / "h.db"), "--out", str(tmp_path / "runs"), "-q",
                        "--workers", "0"], capture_output=True, text=True, cwd=REPO,
                       timeout=600)
    assert r.returncode == 1, r.stdout + r.stderr  # the failing nodes fail the run
    seen = json.loads(seen_at.read_text())
    # the history was written a chunk at a time, never holding more than a chunk's NodeRuns
    assert seen["chunks"] == [CHUNK, CHUNK, CHUNK, 1]
    assert 1 <= seen["runs_alive"] <= CHUNK
    # every failing node diagnosed, with at most its own evidence parsed at that moment
    assert seen["diagnosed"] == len(FAILING)
    assert seen["bundles_alive"] <= 1
    # and what was written is the whole run: each node once, signed and chained
    assert _rows(tmp_path / "h.db") == {n: 1 for n in NODES}
    with History(tmp_path / "h.db") as h:
        latest = h.latest_results(NODES, max_age_s=10**9)
    assert {n for n in NODES if any(x.status == "fail" for x in latest[n][2])} == FAILING
    last = NODES[-1]  # the short chunk's node: its metrics verify against their chain
    v = subprocess.run([sys.executable, "-m", "stetho", "history", "show", last, "--db",
                        str(tmp_path / "h.db"), "--json"], capture_output=True, text=True,
                       cwd=REPO, timeout=300)
    assert v.returncode == 0, v.stdout + v.stderr
    assert json.loads(v.stdout)
