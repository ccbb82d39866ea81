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
    nodes = [_node(f"n{i}") for i in range(7)] + [_node("n7", driver="535.104.05")]
    rows = {r.node: r for r in fleetchecks.evaluate(nodes) if r.check == "fleet_versions"}
    assert rows["n7"].status == "fail"
    assert "driver 535.104.05 (peers: 535.161.08 on 7 of 8)" in rows["n7"].message
    assert {rows[f"n{i}"].status for i in range(7)} == {"pass"}


def test_kernel_drift_only_warns():
    nodes = [_node(f"n{i}") for i in range(8)]
    nodes[2]["versions"]["kernel"] = ["5.15.1"]
    rows = {r.node: r for r in fleetchecks.evaluate(nodes) if r.check == "fleet_versions"}
    assert rows["n2"].status == "warn"


def test_busbw_outlier_by_robust_z():
    values = [479.0, 478.2, 480.1, 479.6, 477.9, 478.8, 479.3, 430.0]
    nodes = [_node(f"n{i}", busbw=v) for i, v in enumerate(values)]
    rows = {r.node: r for r in fleetchecks.evaluate(nodes) if r.check == "fleet_busbw"}
    assert rows["n7"].status == "fail" and rows["n7"].subject == "allreduce@8GiB"
    assert "robust z" in rows["n7"].message and "10.2% under the median" in rows["n7"].message
    assert all(rows[f"n{i}"].status == "pass" for i in range(7))


def test_busbw_small_wobble_in_a_tight_fleet_is_not_an_outlier():
    # z is extreme, the drop is 1.7%
    values = [479.0, 479.1, 478.9, 479.0, 479.05, 478.95, 479.0, 471.0]
    nodes = [_node(f"n{i}", busbw=v) for i, v in enumerate(values)]
    assert {r.status for r in fleetchecks.evaluate(nodes) if r.check == "fleet_busbw"} == \
        {"pass"}


def test_busbw_identical_fleet_uses_a_relative_floor():
    nodes = [_node(f"n{i}") for i in range(7)] + [_node("n7", busbw=400.0)]
    rows = {r.node: r for r in fleetchecks.evaluate(nodes) if r.check == "fleet_busbw"}
    assert rows["n7"].status == "fail" and rows["n0"].status == "pass"


def test_too_few_peers_skip_every_node_saying_how_many():
    # three nodes, one far off in driver and busbw: not compared, and never a silent nothing
    nodes = [_node("a"), _node("b"), _node("c", driver="1.0", busbw=200.0)]
    rows = fleetchecks.evaluate(nodes)
    assert sorted((r.node, r.check, r.status) for r in rows) == [
        (n, c, "skip") for n in "abc" for c in ("fleet_busbw", "fleet_versions")]
    assert {r.message for r in rows} == {
        "3 p nodes in this run; fleet comparison needs at least 8 (profile fleet.min_peers)"}
    assert {r.value for r in rows} == {3}


def test_too_few_nodes_with_busbw_skip_only_busbw():
    nodes = [_node(f"n{i}") for i in range(8)]
    for n in nodes[3:]:
        n["busbw"] = {}  # e.g. busy nodes that did not run NCCL
    rows = fleetchecks.evaluate(nodes)
    assert {r.status for r in rows if r.check == "fleet_versions"} == {"pass"}
    bw = [r for r in rows if r.check == "fleet_busbw"]
    assert [(r.node, r.status) for r in bw] == [("n0", "skip"), ("n1", "skip"), ("n2", "skip")]
    assert bw[0].message.startswith("3 p nodes with busbw at allreduce@8GiB in this run; ")


def test_min_peers_comes_from_the_profile(tmp_path, stetho_env):
    (tmp_path / "small.yml").write_text("profile: small\nextends: h100-sxm-8gpu\n"
                                        "fleet:\n  min_peers: 3\n")
    stetho_env.setenv("STETHO_BASELINES", str(tmp_path))
    nodes = [_node(f"n{i}", profile="small") for i in range(2)]
    nodes.append(_node("n2", profile="small", driver="535.104.05"))
    rows = {r.node: r for r in fleetchecks.evaluate(nodes) if r.check == "fleet_versions"}
    assert rows["n2"].status == "fail" and rows["n0"].status == "pass"
    rows = fleetchecks.evaluate(nodes[:2])
    assert {r.status for r in rows} == {"skip"}
    assert "needs at least 3 (profile fleet.min_peers)" in rows[0].message


def test_profiles_are_compared_separately():
    nodes = [_node(f"a{i}", profile="x") for i in range(8)]
    nodes += [_node(f"b{i}", profile="y", driver="550.54.15") for i in range(8)]
    assert {r.status for r in fleetchecks.evaluate(nodes)} == {"pass"}


def test_fleet_checks_on_the_fault_cluster(fault_results):
    fw = [r for r in fault_results["hcafw"] if r["check"] == "fleet_versions"]
    assert fw[0]["status"] == "fail" and "hca_firmware 28.36.1010, 28.41.1000" in fw[0]["message"]
    bw = [r for r in fault_results["busbw"] if r["check"] == "fleet_busbw"]
    assert bw[0]["status"] == "fail" and bw[0]["subject"] == "allreduce@8GiB"
    healthy = [r for r in fault_results["healthy"] if r["check"].startswith("fleet_")]
    assert {r["status"] for r in healthy} == {"pass"}


def test_three_nodes_skip_fleet_checks_and_keep_the_exit_code(fault_bundles, tmp_path):
    few = tmp_path / "few"
    few.mkdir()
    for name in ("healthy", "clocks", "hcafw"):  # hcafw's firmware differs: not compared
        (few / f"{name}.json").write_bytes((fault_bundles / f"{name}.json").read_bytes())
    out = tmp_path / "few.json"
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence", str(few),
                           "--json", str(out), "-q"], capture_output=True, text=True,
                          timeout=300)
    rows = json.loads(out.read_text())["results"]
    fleet = sorted((r["node"], r["check"], r["status"], r["message"]) for r in rows
                   if r["check"].startswith("fleet_"))
    why = ("3 h100-sxm-8gpu nodes in this run; fleet comparison needs at least 8 "
           "(profile fleet.min_peers)")
    assert fleet == [(n, c, "skip", why) for n in ("clocks", "hcafw", "healthy")
                     for c in ("fleet_busbw", "fleet_versions")]
    assert proc.returncode == 1, proc.stderr  # clocks fails on its own; the skips add nothing
    alone = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence",
                            str(few / "healthy.json"), "--json", str(out), "-q"],
                           capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr  # one node is no fleet: no fleet rows at all
    assert not [r for r in json.loads(out.read_text())["results"]
                if r["check"].startswith("fleet_")]


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
