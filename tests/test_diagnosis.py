"""Each shipped root-cause rule, on the simulated node carrying its fault, is the top
hypothesis; a healthy node gets none. Inputs are the node's real check results and evidence."""

from __future__ import annotations

import pytest

from stetho import profiles
from stetho.checking import nodes
from stetho.diagnosis import engine, rules
from stetho.diagnosis.signals import NodeContext
from stetho.errors import ConfigError
from stetho.evidence.bundle import load
from stetho.results import Result

pytestmark = pytest.mark.xdist_group("faultsim")

#: rule -> the fault nodes (tests/conftest.py FAULT_NODES) on which it must rank first
EXPECTED = {
    "riser-pcie-slot": ["riser"],
    "nvme-rotational": ["rotational"],
    "nccl-socket-fallback": ["ncclsocket"],
    "ib-link-degraded": ["ibrate", "ibsymbol", "ibdown"],
    "optics-degrading": ["optics"],
    "gpu-memory-failing": ["eccdbe", "xid48"],
    "gpu-remap-pending": ["rowremap"],
    "gpu-off-bus": ["xid79"],
    "thermal-power-throttling": ["thermal", "powerbrake"],
    "clocks-not-locked": ["clocks"],
    "cpu-governor": ["governor"],
    "host-memory-pressure": ["hostoom"],
    "version-drift": ["hcafw"],
    "nvswitch-fabric-down": ["fabric", "fmdown", "sxid"],
    "gpu-reset-required": ["resetreq"],
    "gpu-nic-affinity": ["nicsocket"],
}


def _ctx(node, fault_results, fault_bundles):
    bundle = load(fault_bundles / f"{node}.json")
    prof = profiles.load(bundle.profile)
    facts = nodes.node_facts(bundle, prof)
    results = [Result.from_json(r) for r in fault_results[node]]
    return NodeContext(node, results, facts, None, nodes.summary(facts, prof))


#: rules that need the node's history to fire: the catalogue (test_diagnosis_catalogue.py)
#: builds it and ranks them there
NEEDS_HISTORY = {"gpu-memory-degrading"}
#: rules whose fault nodes need another profile: ranked where those nodes are built
#: (roce-congestion: tests/test_roce_checks.py, on h100-roce-8gpu nodes)
ELSEWHERE = {"roce-congestion"}


def test_every_shipped_rule_is_tested():
    assert {r.cause for r in rules.load_all()} == set(EXPECTED) | NEEDS_HISTORY | ELSEWHERE


@pytest.mark.parametrize("cause, node", [(c, n) for c, ns in EXPECTED.items() for n in ns])
def test_rule_ranks_first_on_its_fault(cause, node, fault_results, fault_bundles):
    top, _ = engine.hypotheses(_ctx(node, fault_results, fault_bundles))
    assert top, f"{node}: no hypothesis"
    assert top[0].cause == cause, [(h.cause, h.score) for h in top]
    assert top[0].evidence and top[0].score > 0


def test_healthy_node_gets_no_hypothesis(fault_results, fault_bundles):
    top, falsified = engine.hypotheses(_ctx("healthy", fault_results, fault_bundles))
    assert top == [] and falsified == []


def test_ib_link_evidence_names_the_cable_to_pull(fault_results, fault_bundles):
    """The report's evidence for a degraded IB link names the switch and port at the far end
    of the HCA's cable (iblinkinfo), so a technician knows which cable to pull."""
    d = engine.diagnose(_ctx("ibrate", fault_results, fault_bundles), run="r1")
    assert d.top.cause == "ib-link-degraded"
    text = " ".join(e.description for e in d.top.evidence)
    assert "mlx5_4 port 1 -> cable to MF0;su1-leaf-r2:MQM9700/U1 port " in text, text


def test_riser_evidence_chain_and_falsified_alternatives(fault_results, fault_bundles):
    d = engine.diagnose(_ctx("riser", fault_results, fault_bundles), run="r1")
    h = d.top
    signals = {e.signal for e in h.evidence}
    assert signals == {"aer_corrected", "busbw_drop", "gpu_hot"}
    aer = next(e for e in h.evidence if e.signal == "aer_corrected")
    assert "BadTLP" in aer.description and aer.command
    assert "0000:9b:00.0: PCIe Bus Error: severity=Correctable" in aer.log_line  # gpu4
    assert d.benchmarks and d.benchmarks[-1].status == "fail"
    assert any("Correctable" in ln or "Timeout" in ln for ln in d.logs)
    assert d.reproduce and "AER" in d.reproduce[0]
    assert d.cause == "riser-pcie-slot"
    assert {"aer_corrected", "busbw_drop", "nccl_busbw"} <= set(d.signature)


def test_socket_fallback_is_named_by_its_log_line(fault_results, fault_bundles):
    """The socket node's busbw drop is explained by NCCL's NET/Socket line; a busbw drop on
    a node where NCCL uses IB is never blamed on sockets."""
    ctx = _ctx("ncclsocket", fault_results, fault_bundles)
    top, _ = engine.hypotheses(ctx)
    assert top[0].cause == "nccl-socket-fallback"
    assert any("NET/Socket" in (e.log_line or "") for e in top[0].evidence)
    healthy = _ctx("busbw", fault_results, fault_bundles)  # busbw drop, NCCL on IB
    top_h, _ = engine.hypotheses(healthy)
    assert all(h.cause != "nccl-socket-fallback" for h in top_h)


def test_a_rule_with_an_unknown_signal_is_refused(tmp_path):
    bad = tmp_path / "bad-rule.yml"
    bad.write_text("cause: bad-rule\ntitle: x\nsupports:\n  - {signal: vibes, weight: 1}\n"
                   "action: x\nticket: x\n")
    with pytest.raises(ConfigError, match=r"bad-rule\.yml:4: unknown signal 'vibes'"):
        rules.load(bad, {"busbw_drop"})
