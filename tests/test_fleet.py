"""Fleet checks (version drift, busbw outliers) and batch mode's equivalence to per-subject."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stetho.checking import fleet as fleetchecks

pytestmark = pytest.mark.xdist_group("faultsim")


def _node(name, driver="535.161.08", nccl="2.21.5", busbw=479.0, profile="p"):
    return {"node": name, "profile": profile,
            "versions": {"driver": [driver], "nccl": [nccl], "kernel": ["5.15.0"]},
            "busbw": {str(8 << 30): busbw, str(1 << 30): busbw - 6}}


def test_version_drift_fails_the_odd_node_only():
    nodes = [_node(f"n{i}") for i in range(5)] + [_node("n5", driver="535.104.05")]
    rows = {r.node: r for r in fleetchecks.evaluate(nodes) if r.check == "fleet_versions"}
    assert rows["n5"].status == "fail"
    assert "driver 535.104.05 (peers: 535.161.08 on 5 of 6)" in rows["n5"].message
    assert {rows[f"n{i}"].status for i in range(5)} == {"pass"}


def test_kernel_drift_only_warns():
    nodes = [_node(f"n{i}") for i in range(4)]
    nodes[2]["versions"]["kernel"] = ["5.15.1"]
    rows = {r.node: r for r in fleetchecks.evaluate(nodes) if r.check == "fleet_versions"}
    assert rows["n2"].status == "warn"


def test_busbw_outlier_by_robust_z():
    values = [479.0, 478.2, 480.1, 479.6, 477.9, 478.8, 430.0]
    nodes = [_node(f"n{i}", busbw=v) for i, v in enumerate(values)]
    rows = {r.node: r for r in fleetchecks.evaluate(nodes) if r.check == "fleet_busbw"}
    assert rows["n6"].status == "fail" and rows["n6"].subject == "allreduce@8GiB"
    assert "robust z" in rows["n6"].message and "10.2% under the median" in rows["n6"].message
    assert all(rows[f"n{i}"].status == "pass" for i in range(6))


def test_busbw_small_wobble_in_a_tight_fleet_is_not_an_outlier():
    values = [479.0, 479.1, 478.9, 479.0, 479.05, 471.0]  # z is extreme, the drop is 1.7%
    nodes = [_node(f"n{i}", busbw=v) for i, v in enumerate(values)]
    assert {r.status for r in fleetchecks.evaluate(nodes) if r.check == "fleet_busbw"} == \
        {"pass"}


def test_busbw_identical_fleet_uses_a_relative_floor():
    nodes = [_node(f"n{i}") for i in range(4)] + [_node("n4", busbw=400.0)]
    rows = {r.node: r for r in fleetchecks.evaluate(nodes) if r.check == "fleet_busbw"}
    assert rows["n4"].status == "fail" and rows["n0"].status == "pass"


def test_too_few_peers_no_fleet_results():
    assert fleetchecks.evaluate([_node("a"), _node("b", driver="1.0")]) == []


def test_profiles_are_compared_separately():
    nodes = [_node(f"a{i}", profile="x") for i in range(3)]
    nodes += [_node(f"b{i}", profile="y", driver="550.54.15") for i in range(3)]
    assert {r.status for r in fleetchecks.evaluate(nodes)} == {"pass"}


def test_fleet_checks_on_the_fault_cluster(fault_results):
    fw = [r for r in fault_results["hcafw"] if r["check"] == "fleet_versions"]
    assert fw[0]["status"] == "fail" and "hca_firmware 28.36.1010, 28.41.1000" in fw[0]["message"]
    bw = [r for r in fault_results["busbw"] if r["check"] == "fleet_busbw"]
    assert bw[0]["status"] == "fail" and bw[0]["subject"] == "allreduce@8GiB"
    healthy = [r for r in fault_results["healthy"] if r["check"].startswith("fleet_")]
    assert {r["status"] for r in healthy} == {"pass"}


def _check(evidence, out):
    subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence", str(evidence),
                    "--json", str(out), "-q"], capture_output=True, text=True, timeout=300)
    return sorted((r["node"], r["check"], r["subject"], r["status"], r["message"])
                  for r in json.loads(out.read_text())["results"]
                  if not r["check"].startswith("fleet_"))


def test_batch_mode_gives_the_same_results_as_per_subject(fault_bundles, tmp_path):
    few = tmp_path / "few"
    few.mkdir()
    for name in ("healthy", "clocks", "ibsymbol", "garbage"):
        (few / f"{name}.json").write_bytes((fault_bundles / f"{name}.json").read_bytes())
    per_subject = _check(few, tmp_path / "p.json")
    batched = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--stetho-batch",
         "--stetho-evidence", str(few), "--stetho-results", str(tmp_path / "b.json"),
         str(__import__("stetho.core.resources").core.resources.shipped("checks"))],
        capture_output=True, text=True, timeout=300)
    assert batched.returncode == 1
    rows = json.loads((tmp_path / "b.json").read_text())["results"]
    assert sorted((r["node"], r["check"], r["subject"], r["status"], r["message"])
                  for r in rows if not r["check"].startswith("fleet_")) == per_subject
