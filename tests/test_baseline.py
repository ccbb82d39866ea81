"""`stetho baseline record/show/diff` over real collected evidence, and the YAML editor that
keeps a reviewed profile's comments."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from stetho import profiles
from stetho.core import yamledit
from stetho.core.resources import shipped

pytestmark = pytest.mark.xdist_group("faultsim")


def stetho(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "STETHO_DB": os.devnull})


#: The fixture's "healthy" set holds a powersave governor and a rotational NVMe, fine for
#: busbw and versions: kept on purpose, over fewer nodes than a real baseline needs.
_LENIENT = ("--include-failing", "--min-nodes", "3")


@pytest.fixture
def site(tmp_path, fault_bundles):
    prof = tmp_path / "h100-sxm-8gpu.yml"
    shutil.copy(shipped("baselines") / "h100-sxm-8gpu.yml", prof)
    healthy = tmp_path / "healthy"
    healthy.mkdir()
    for n in ("healthy", "governor", "rotational"):  # healthy for busbw and versions
        shutil.copy(fault_bundles / f"{n}.json", healthy / f"{n}.json")
    return prof, healthy


def test_record_writes_medians_and_fingerprint_keeping_comments(site):
    prof, healthy = site
    before = prof.read_text()
    proc = stetho("baseline", "record", "--from", str(healthy), "--profile", str(prof),
            *_LENIENT)
    assert proc.returncode == 0, proc.stderr
    assert "from 3 nodes" in proc.stdout
    after = prof.read_text()
    kept = [ln for ln in before.splitlines() if ln.lstrip().startswith("#")]
    assert all(ln in after for ln in kept)  # every comment survives
    data = yaml.safe_load(after)
    busbw = data["nccl"]["baseline"]["busbw_gbps"]
    assert set(busbw) == {"64M", "128M", "256M", "512M", "1G", "2G", "4G", "8G"}
    assert 470 < busbw["8G"] < 490 and busbw["8G"] != 479.0
    fp = data["baseline"]["fingerprint"]
    assert fp["driver"] == "535.161.08" and fp["nccl"] == "2.21.5"
    assert fp["gpu_model"] == "NVIDIA H100 80GB HBM3" and len(fp["topology"]) == 12
    assert fp["hca_firmware"] == "28.41.1000" and fp["kernel"] == "5.15.0-105-generic"
    assert data["baseline"]["measured"]["ib.rate_gbps"] == 400.0
    loaded = profiles.load(str(prof))
    assert loaded.baseline.fingerprint == fp and loaded.gpu.count == 8


def test_show_and_diff(site, fault_bundles):
    prof, healthy = site
    stetho("baseline", "record", "--from", str(healthy), "--profile", str(prof),
            *_LENIENT)
    proc = stetho("baseline", "show", str(prof), "--json")
    rows = json.loads(proc.stdout)["rows"]
    assert {r["kind"] for r in rows} == {"busbw", "measured", "fingerprint"}
    same = stetho("baseline", "diff", str(prof), "--against", str(healthy))
    assert same.returncode == 0, same.stdout
    worse = stetho("baseline", "diff", str(prof), "--against",
                   str(fault_bundles / "busbw.json"), "--json")
    assert worse.returncode == 1
    rows = {r["name"]: r for r in json.loads(worse.stdout)["rows"]}
    assert rows["allreduce@8 GiB"]["status"] == "worse"
    assert -22 < rows["allreduce@8 GiB"]["delta_pct"] < -18
    fw = stetho("baseline", "diff", str(prof), "--against", str(fault_bundles / "hcafw.json"),
                "--json")
    rows = {r["name"]: r for r in json.loads(fw.stdout)["rows"]}
    assert rows["hca_firmware"]["status"] == "differs"
    assert rows["hca_firmware"]["current"] == "28.36.1010, 28.41.1000"


def test_stale_baseline_warns_or_blocks_by_policy(site, fault_bundles, tmp_path):
    prof, healthy = site
    stetho("baseline", "record", "--from", str(healthy), "--profile", str(prof),
            *_LENIENT)
    text = prof.read_text().replace("driver: 535.161.08", "driver: 550.54.15")
    prof.write_text(text)
    out = tmp_path / "r.json"
    stetho("check", "--evidence", str(fault_bundles / "healthy.json"), "--profile", str(prof),
           "--json", str(out), "-q")
    rows = [r for r in json.loads(out.read_text())["results"] if r["check"] == "nccl_busbw"]
    assert rows and all(r["status"] == "warn" for r in rows)
    assert "driver 550.54.15 (baseline) vs 535.161.08 (node)" in rows[0]["message"]
    prof.write_text(text.replace("on_stale: warn", "on_stale: fail"))
    proc = stetho("check", "--evidence", str(fault_bundles / "healthy.json"), "--profile",
                  str(prof), "--json", str(out), "-q")
    assert proc.returncode == 1
    rows = [r for r in json.loads(out.read_text())["results"] if r["check"] == "nccl_busbw"]
    assert all(r["status"] == "fail" and "baseline stale" in r["message"] for r in rows)


def test_record_without_nccl_evidence_is_an_error(site, fault_bundles, tmp_path):
    prof, _ = site
    only = tmp_path / "nccl-failed"
    only.mkdir()
    shutil.copy(fault_bundles / "ncclfail.json", only / "n.json")
    proc = stetho("baseline", "record", "--from", str(only), "--profile", str(prof),
                  "--include-failing", "--min-nodes", "1")
    assert proc.returncode == 3 and "no NCCL busbw" in proc.stderr


def test_record_leaves_out_failing_nodes_and_refuses_too_few(site):
    prof, healthy = site
    before = prof.read_text()
    proc = stetho("baseline", "record", "--from", str(healthy), "--profile", str(prof))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "1 healthy node(s), the minimum is 8" in proc.stderr
    assert "governor: fail: cpu_governor" in proc.stderr
    assert "rotational: fail: disk_rotational" in proc.stderr
    assert prof.read_text() == before  # nothing written
    one = stetho("baseline", "record", "--from", str(healthy), "--profile", str(prof),
                 "--min-nodes", "1")
    assert one.returncode == 0 and "from 1 nodes" in one.stdout, one.stderr
    assert "left out governor: fail: cpu_governor" in one.stderr


def test_yamledit_replaces_only_the_block():
    text = ("# top comment\nprofile: x\nnccl:\n  run: true  # keep me\n  baseline:\n"
            "    busbw_gbps: {8G: 1.0}\n    # inner comment\n  tolerance_pct: 5\n"
            "ib:\n  ports: 8\n")
    out = yamledit.set_block(text, ("nccl", "baseline"), {"busbw_gbps": {"8G": 2.0}})
    assert "# top comment" in out and "run: true  # keep me" in out and "ports: 8" in out
    data = yaml.safe_load(out)
    assert data["nccl"]["baseline"] == {"busbw_gbps": {"8G": 2.0}}
    assert data["nccl"]["tolerance_pct"] == 5
    added = yamledit.set_block(out, ("baseline",), {"on_stale": "warn"})
    assert yaml.safe_load(added)["baseline"] == {"on_stale": "warn"}
    nested_new = yamledit.set_block("profile: x\n", ("nccl", "baseline"), {"a": 1})
    assert yaml.safe_load(nested_new) == {"profile": "x", "nccl": {"baseline": {"a": 1}}}
    into_parent = yamledit.set_block("profile: x\nnccl:\n  run: false\n", ("nccl", "baseline"),
                                     {"a": 1})
    assert yaml.safe_load(into_parent)["nccl"] == {"run": False, "baseline": {"a": 1}}


def test_record_keeps_one_baseline_per_run_shape(tmp_path):
    """A 2-node x 8 GPU run is recorded beside the single-node baseline, never over it, and
    each run shape then finds its own (issue 11)."""
    from stetho.history import baselines as bl
    from stetho.profiles import BaselineShape

    prof_path = tmp_path / "h100-sxm-8gpu.yml"
    shutil.copy(shipped("baselines") / "h100-sxm-8gpu.yml", prof_path)
    prof = profiles.load(str(prof_path))
    one, two = BaselineShape("all_reduce", 8, 1, 8), BaselineShape("all_reduce", 16, 2, 8)
    m = bl.Measurement(nodes=4, busbw={8 << 30: 480.0}, measured={}, fingerprint={},
                       spread={}, shapes={one: {8 << 30: 480.0}, two: {8 << 30: 372.5}})
    bl.record(prof, m, "runs/x", out=prof_path)
    data = yaml.safe_load(prof_path.read_text())
    assert data["nccl"]["baseline"]["busbw_gbps"] == {"8G": 480.0}
    assert data["nccl"]["baselines"]["all_reduce-2x8"]["shape"] == {
        "collective": "all_reduce", "ranks": 16, "nodes": 2, "gpus_per_node": 8}
    loaded = profiles.load(str(prof_path)).nccl
    assert loaded.baseline_for("all_reduce", 16, 2, 8).busbw_gbps == {8 << 30: 372.5}
    assert loaded.baseline_for("all_reduce", 8, 1, 8).busbw_gbps == {8 << 30: 480.0}
    assert loaded.baseline_for("all_gather", 16, 2, 8) is None
