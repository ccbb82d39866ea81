"""A node's own `stetho check` runs one pytest item per check (batched over the node's
subjects) instead of one per check x subject: pytest's cost per item was a third of the run
(issue 32). The Results must not change. Compared here through the CLI, on real simulated
nodes with faults, against a per-subject run (what a `-k` selection still gets) over the
same evidence: the simulated kernel log is stamped at collection time, so that run replays
the bundle the batched run collected."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: node name -> injected faults: a healthy node, failing checks of several subject kinds, an
#: unparsable tool output (error results) and a fault in the kernel log.
NODES = {"healthy": [], "ibsymbol": ["ib-symbol-errors"], "clocks": ["clocks-unlocked"],
         "garbage": ["garbage=nvidia-smi"], "xid79": ["xid=79"], "diskfull": ["disk-full"]}


def results(*args: str, out: Path) -> tuple[int, list[tuple[str, ...]]]:
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--profile", "h100-sxm-8gpu",
                           "--no-history", "--json", str(out), "-q", *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1, 3), proc.stderr
    rows = json.loads(out.read_text())["results"]
    return proc.returncode, sorted(
        tuple(json.dumps(v, sort_keys=True) for k, v in sorted(r.items()) if k != "duration_s")
        for r in rows)


@pytest.mark.parametrize("name", sorted(NODES))
def test_batched_node_check_gives_the_per_subject_results(name: str, tmp_path: Path) -> None:
    from stetho.sim.builder import build_node

    node = build_node(tmp_path / name, name, NODES[name])
    bundle = tmp_path / "evidence.json"
    code, batched = results("--local", "--sim", str(node), "--evidence-out", str(bundle),
                            out=tmp_path / "batched.json")
    # a -k that matches every check keeps one item per check x subject
    code_k, per_subject = results("--evidence", str(bundle), "-k", "not zz_none",
                                  out=tmp_path / "per-subject.json")
    assert code == code_k and (code == 0) == (name == "healthy")
    assert len(batched) > 100
    assert batched == per_subject


#: A site's checks beside stetho's: two with a session fixture of its own, one taking pytest's
#: `request`, one with a skipif mark (each needs pytest's setup phase), and one that asks only
#: for stetho's fixtures (run in one call phase, plugin.pytest_runtest_protocol); they fail,
#: pass or skip. A failed comparison keeps the site's message (pytest's rewritten assert lost
#: it without the terminal plugin), and one without a message is named by its line.
SITE_CHECKS = '''
import pathlib

import pytest

@pytest.fixture(scope="session")
def site_limit():
    with pathlib.Path(__file__).with_name("made").open("a") as fh:
        fh.write("limit ")
    return 0

def test_site_limit(node, site_limit, verdict):
    verdict.measure("limit", site_limit)
    assert site_limit > 0, f"{node.name}: the site's limit is {site_limit}"

@pytest.mark.skipif(True, reason="the site skips this on every node")
def test_site_skipped(node):
    raise AssertionError("a skipped check ran")

def test_site_gpus(gpu, facts, verdict):
    assert gpu.index != 3, "the site distrusts GPU 3"

def test_site_bare(node, site_limit):
    assert site_limit > 0

def test_site_request(node, request, verdict):
    assert request.node.name.startswith("test_site_request"), request.node.name
'''


def test_site_checks_with_their_own_fixtures_and_marks_batch_as_they_run_alone(
        tmp_path: Path) -> None:
    from stetho.sim.builder import build_node

    site = tmp_path / "site"
    site.mkdir()
    (site / "conftest.py").write_text("stetho_checks = True\n")
    (site / "test_site.py").write_text(SITE_CHECKS)
    node = build_node(tmp_path / "node01", "node01")
    bundle = tmp_path / "evidence.json"
    code, batched = results("--local", "--sim", str(node), "--evidence-out", str(bundle),
                            "--checks", str(site), out=tmp_path / "batched.json")
    # the session fixture of two site checks, with one-phase checks between them: made once
    assert (site / "made").read_text() == "limit "
    code_k, per_subject = results("--evidence", str(bundle), "--checks", str(site), "-k",
                                  "not zz_none", out=tmp_path / "per-subject.json")
    assert code == code_k == 1
    assert batched == per_subject
    rows = json.loads((tmp_path / "batched.json").read_text())["results"]
    site = {(r["check"], r["subject"]): (r["status"], r["message"]) for r in rows
            if r["check"].startswith("site_")}
    assert site[("site_limit", "")] == ("fail", "node01: the site's limit is 0")
    assert site[("site_bare", "")] == ("fail", "assertion failed: assert site_limit > 0")
    assert site[("site_request", "")][0] == "pass"  # handed pytest's own request
    assert site[("site_skipped", "")] == ("skip", "the site skips this on every node")
    gpus = {s: v[0] for (c, s), v in site.items() if c == "site_gpus"}
    assert len(gpus) == 8 and gpus.pop("gpu3") == "fail" and set(gpus.values()) == {"pass"}
