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
