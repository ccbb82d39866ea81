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
    "ib-link-degraded": ["ibrate", "ibsymbol", "ibdown", "ibflap"],
    "optics-degrading": ["optics", "rxlow"],
    "gpu-memory-failing": ["eccdbe", "xid48", "remapfail"],
    "gpu-remap-pending": ["rowremap", "xid63"],
    "gpu-off-bus": ["xid79"],
    "thermal-power-throttling": ["thermal", "powerbrake", "hbmhot"],
    "clocks-not-locked": ["clocks"],
    "cpu-governor": ["governor"],
    "host-memory-pressure": ["hostoom"],
    "version-drift": ["hcafw"],
    "nvswitch-fabric-down": ["fabric", "fmdown", "sxid"],
    "gpu-reset-required": ["resetreq"],
    "gpu-nic-affinity": ["nicsocket"],
    "nvlink-degraded": ["nvlink", "nvlinkerr"],
    "host-memory-failing": ["edacue"],
    "nvme-failing": ["nvmemedia", "nvmespare"],
    "host-machine-check": ["mcefatal", "mcestorm"],
    "pcie-p2p-redirected": ["acs", "iommu"],
    "ib-miscabled": ["cablecross"],
}


def _ctx(node, fault_results, fault_bundles):
    bundle = load(fault_bundles / f"{node}.json")
    prof = profiles.load(bundle.profile)
    facts = nodes.node_facts(bundle, prof)
    results = [Result.from_json(r) for r in fault_results[node]]
    return NodeContext(node, results, facts, None, nodes.summary(facts, prof))


#: rules that need the node's history to fire: the catalogue (test_diagnosis_catalogue.py)
#: builds it and ranks them there (Xid 92 is its case "xid92"; the IB error and busbw
#: trends: test_diagnosis_evidence.py)
NEEDS_HISTORY = {"gpu-memory-degrading", "ib-link-errors-rising", "busbw-declining"}
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


#: platform rules, each on nodes that carry another fault of its kind (or none): never top
NOT_THERE = {"nvme-failing": ["healthy", "rotational"],
             "host-machine-check": ["healthy", "edacue"],
             "pcie-p2p-redirected": ["healthy", "riser", "nopeermem"],
             "ib-miscabled": ["healthy", "ibdown", "ibrate"]}


@pytest.mark.parametrize("cause, node", [(c, n) for c, ns in NOT_THERE.items() for n in ns])
def test_a_platform_rule_is_not_top_without_its_fault(cause, node, fault_results,
                                                       fault_bundles):
    top, out = engine.hypotheses(_ctx(node, fault_results, fault_bundles))
    assert cause not in {h.cause for h in top}, [(h.cause, h.score) for h in top]
    # touched at most by a supporting signal (I/O pressure, an EDAC count): not supported
    assert all(h.basis == "unsupported" for h in out if h.cause == cause)
    if node == "healthy":
        assert cause not in {h.cause for h in out}


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
    assert signals == {"aer_corrected", "gpu_hot"}
    aer = next(e for e in h.evidence if e.signal == "aer_corrected")
    assert "BadTLP" in aer.description and aer.command
    assert "0000:9b:00.0: PCIe Bus Error: severity=Correctable" in aer.log_line  # gpu4
    assert d.benchmarks and all(b.status == "pass" for b in d.benchmarks)  # NVLink traffic
    assert any("Correctable" in ln or "Timeout" in ln for ln in d.logs)
    assert d.reproduce and "AER" in d.reproduce[0]
    assert d.cause == "riser-pcie-slot"
    assert {"aer_corrected", "gpu_temperature"} <= set(d.signature)


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


def _cites(h, prefix):
    return [e.signal for e in h.evidence if e.signal.startswith(prefix)]


def test_single_node_busbw_is_not_blamed_on_the_network_or_a_riser(fault_results,
                                                                    fault_bundles):
    """The fault nodes' nccl-tests run is one node of 8 SXM GPUs: it ran over NVLink/NVSwitch,
    never over a GPU's PCIe link or the NET transport. Its busbw drop is evidence for neither
    socket fallback nor a riser; it is evidence for NVLink, where an NVLink is down."""
    for node in ("busbw", "ncclsocket", "riser"):
        d = engine.diagnose(_ctx(node, fault_results, fault_bundles), run="r1")
        for h in (*d.hypotheses, *d.falsified, *d.also_found):
            if h.cause in ("nccl-socket-fallback", "riser-pcie-slot", "ib-link-degraded"):
                assert not _cites(h, "busbw"), (node, h.cause, _cites(h, "busbw"))
    socket = engine.diagnose(_ctx("ncclsocket", fault_results, fault_bundles), run="r1")
    assert socket.cause == "nccl-socket-fallback" and not _cites(socket.top, "busbw")
    nv = engine.diagnose(_ctx("nvlink", fault_results, fault_bundles), run="r1")
    assert nv.cause == "nvlink-degraded"
    assert "busbw_drop_nvlink" in _cites(nv.top, "busbw")


def test_sxm_gpu_gets_baseboard_steps_not_a_riser(fault_results, fault_bundles):
    """An H100 SXM GPU sits on the HGX baseboard: the PCIe-path steps name the baseboard tray,
    and no step tells a technician to reseat a riser the board does not have."""
    d = engine.diagnose(_ctx("riser", fault_results, fault_bundles), run="r1")
    assert d.cause == "riser-pcie-slot"
    text = " ".join((d.top.summary, d.top.ticket, *d.top.steps))
    assert "HGX baseboard" in text and "riser card" not in text, text


def test_the_path_a_run_crossed():
    """Single node on a baseboard: NVLink only; on PCIe cards: PCIe only; across nodes: the
    NET transport and the GPUs' PCIe links (GPUDirect RDMA); unknown: nothing excluded.
    The shapes are those of real recorded runs."""
    from stetho.diagnosis import datapath
    from stetho.parsers import nccl_tests
    from tests.conftest import REAL

    one = nccl_tests.parse((REAL / "13-nccl-collectives" /
                            "broadcast-1node-8xA100-40GB-oldformat-root-col.txt").read_text())
    two = nccl_tests.parse((REAL / "03-nccl" / "allreduce-2node-16xA100-40GB-roce-oke.txt"
                            ).read_text())
    assert one.shape.nodes == 1 and two.shape.nodes == 2
    assert datapath.paths(one.shape.nodes, "sxm") == {"nvlink"}
    assert datapath.paths(one.shape.nodes, "pcie") == {"pcie"}
    assert datapath.paths(two.shape.nodes, "sxm") == {"nvlink", "pcie", "net"}
    assert datapath.paths(two.shape.nodes, "pcie") == {"pcie", "net"}
    assert datapath.paths(None, "sxm") == {"nvlink", "pcie", "net"}


def test_the_form_factor_from_real_nvidia_smi_output():
    """SXM from the product name (a real A100-SXM4 XML) or from an NVSwitch fabric state; a
    card from its name or from having no NVLink at all (a real T4 XML: no fabric, no name
    hint); nothing to tell by is unknown, never a guess."""
    from stetho.diagnosis import datapath
    from stetho.parsers import nvidia_smi_xml
    from tests.conftest import REAL

    def gpus(name):
        return nvidia_smi_xml.parse((REAL / "01-nvidia-smi-xml" / name).read_text()).gpus

    a100 = gpus("a100-sxm4-80gb-drv535-mig.xml")
    assert datapath.classify([g.product_name for g in a100], False, None) == "sxm"
    t4 = gpus("tesla-t4-drv515.xml")
    assert not any(g.fabric_state not in (None, "N/A") for g in t4)
    assert datapath.classify([g.product_name for g in t4], False, 0) == "pcie"
    assert datapath.classify([g.product_name for g in t4], False, None) is None
    assert datapath.classify(["NVIDIA H100 PCIe"], False, None) == "pcie"
    assert datapath.classify(["NVIDIA H100 80GB HBM3"], True, 144) == "sxm"


def test_a_multi_node_run_crosses_the_network_and_pcie(tmp_path):
    """The simulated node running the recorded 2-node x 8 GPU all_reduce: its busbw crossed
    the NET transport and the GPUs' PCIe links (GPUDirect RDMA), as well as NVLink."""
    from stetho.diagnosis import datapath
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    prof = profiles.load("h100-sxm-8gpu")
    build_node(tmp_path / "mn", "mn", ["nccl-multinode"])
    env, name = collect.sim_environment(str(tmp_path / "mn"))
    facts = nodes.node_facts(collect.collect(prof, env, name), prof)
    ctx = NodeContext("mn", [], facts, None, nodes.summary(facts, prof))
    assert datapath.run_nodes(ctx) == 2 and datapath.form_factor(ctx) == "sxm"
    assert datapath.crossed(ctx) == {"nvlink", "pcie", "net"}


def test_nvlink_fault_is_diagnosed_with_targeted_commands(fault_results, fault_bundles):
    """One NVLink down drains with the GPU's own nvlink -s/-e; counters climbing on a link
    still up is a reset at the next window (watch)."""
    down = engine.diagnose(_ctx("nvlink", fault_results, fault_bundles), run="r1")
    assert down.cause == "nvlink-degraded" and down.disposition == "drain"
    assert "nvidia-smi nvlink -s -i 0" in " ".join(down.reproduce)
    assert "nvidia-smi nvlink -e -i 0" in " ".join(down.reproduce)
    errs = engine.diagnose(_ctx("nvlinkerr", fault_results, fault_bundles), run="r1")
    assert errs.cause == "nvlink-degraded" and errs.disposition == "watch"
    ev = next(e for e in errs.top.evidence if e.signal == "nvlink_errors")
    assert "replay 2400" in ev.value and ev.subject == "gpu2"
    assert "nvidia-smi nvlink -e -i 2" in " ".join(errs.reproduce)


def test_a_rule_with_an_unknown_signal_is_refused(tmp_path):
    bad = tmp_path / "bad-rule.yml"
    bad.write_text("cause: bad-rule\ntitle: x\nsupports:\n  - {signal: vibes, weight: 1}\n"
                   "action: x\nticket: x\n")
    with pytest.raises(ConfigError, match=r"bad-rule\.yml:4: unknown signal 'vibes'"):
        rules.load(bad, {"busbw_drop"})


def test_a_pending_remap_is_a_reset_when_idle_not_failing_memory(fault_results, fault_bundles):
    """A row remap waiting for a reset (nvidia-smi's Pending flag, or the Xid 63 that records
    it) with 0 uncorrectable errors since the last reset: reset the GPU when idle (watch), not
    "failing memory, critical, drain". A remap failure (Xid 64) escalates to a drain."""
    for node, gpu in (("rowremap", "6"), ("xid63", "2")):
        d = engine.diagnose(_ctx(node, fault_results, fault_bundles), run="r1")
        assert d.cause == "gpu-remap-pending" and d.disposition == "watch", node
        assert d.top.severity != "critical"
        assert any(f"nvidia-smi -r -i {gpu}" in s for s in d.top.steps), d.top.steps
        failing = next(h for h in d.falsified if h.cause == "gpu-memory-failing")
        assert failing.ruled_out_by[0].signal == "remap_pending"
    worse = engine.diagnose(_ctx("remapfail", fault_results, fault_bundles), run="r1")
    assert worse.cause == "gpu-memory-failing" and worse.disposition == "drain"
    bare = _ctx("rowremap", fault_results, fault_bundles)
    bare.facts = None  # no evidence bundle: the check's recorded reading, not its words
    d = engine.diagnose(bare, run="r1")
    assert d.cause == "gpu-remap-pending" and d.disposition == "watch"


def _reworded(results):
    return [Result.from_json({**r.to_json(), "message": f"reworded {i}"})
            for i, r in enumerate(results)]


def test_rewording_a_check_message_does_not_change_the_diagnosis(fault_results, fault_bundles):
    """Signals read the structured result (check, subject, value, unit, status), never the
    words of its message: every fault node diagnoses the same with every message reworded."""
    for node in sorted({n for ns in EXPECTED.values() for n in ns}):
        ctx = _ctx(node, fault_results, fault_bundles)
        d = engine.diagnose(ctx, run="r1")
        ctx2 = _ctx(node, fault_results, fault_bundles)
        ctx2.results = _reworded(ctx2.results)
        d2 = engine.diagnose(ctx2, run="r1")
        assert (d2.cause, d2.disposition) == (d.cause, d.disposition), node
        assert [e.signal for e in d2.top.evidence] == [e.signal for e in d.top.evidence], node
        assert [h.cause for h in d2.also_found] == [h.cause for h in d.also_found], node
        assert d2.top.reproduce == d.top.reproduce, node
    for node in ("rowremap", "ibrate", "ibdown", "thermal", "governor", "xid48", "eccdbe",
                 "hbmhot", "rxlow"):
        bare, bare2 = (_ctx(node, fault_results, fault_bundles) for _ in range(2))
        bare.facts = bare2.facts = None  # results only: no evidence bundle to fall back on
        bare2.results = _reworded(bare2.results)
        d, d2 = (engine.diagnose(c, run="r1") for c in (bare, bare2))
        assert d.top is not None and (d2.cause, d2.disposition) == (d.cause, d.disposition), node
