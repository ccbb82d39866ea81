"""The diagnosis catalogue: simulated nodes carrying one or two faults (real recorded outputs
with faults injected), some with a history of earlier runs in a real SQLite file, and what the
diagnosis must say about each: the top cause, causes it must rule out or also find, and a
piece of the reproduce commands that shows they target the faulty part. The expected causes
are the hardware's (stetho.sim.physics: what a technician finds), not the rules'.

Used by tests/test_diagnosis_catalogue.py and by bench/report.py (top-1 accuracy, false
hypotheses on healthy nodes, lines to the first action).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: how a history of earlier runs is made from this run's metrics: (check, metric) -> a
#: function of the current value giving the earlier value
HistorySpec = dict[tuple[str, str], Callable[[float], float]]


@dataclass(frozen=True)
class Case:
    name: str
    faults: tuple[str, ...]
    top: str | None  # the expected leading cause (None: no hypothesis)
    ruled_out: tuple[str, ...] = ()  # causes that must be listed as ruled out
    also: tuple[str, ...] = ()  # independent causes that must be found too
    command: str | None = None  # a piece of the reproduce commands naming the faulty part
    history: tuple[tuple[str, str, float], ...] = ()  # (check, metric, factor) of past runs
    disposition: str | None = None
    healthy: bool = False
    not_ruled_out: tuple[str, ...] = field(default=())


C = Case
CASES: list[Case] = [
    # healthy nodes: no hypothesis, nothing ruled out
    C("healthy", (), None, healthy=True),
    C("healthy-flat-history", (), None, history=(("ib", "pre_fec_ber", 1.0),
                                                  ("nccl", "busbw_gbps", 1.0)), healthy=True),
    C("app-xid13", ("xid=13",), None, healthy=True),
    # single faults, each targeting its part
    C("riser", ("riser",), "riser-pcie-slot", ruled_out=("thermal-power-throttling",),
      command="grep 0000:9b:00.0", disposition="drain"),
    C("riser-gpu1", ("riser=gpu1",), "riser-pcie-slot", command="grep 0000:3b:00.0"),
    C("x8-alone", ("pcie-width-downgrade",), "riser-pcie-slot", command="-s 3b:00.0"),
    # the nodes' nccl-tests run is single-node on an SXM board: over NVLink, so a busbw drop
    # is evidence only for NVLink (not for a riser, an IB link or sockets: not even touched)
    C("x8-with-busbw", ("pcie-width-downgrade", "busbw-drop=20"), "riser-pcie-slot",
      ruled_out=("nvlink-degraded",), command="-s 3b:00.0"),
    C("busbw-alone", ("busbw-drop=20",), None, ruled_out=("nvlink-degraded",)),
    C("socket", ("nccl-socket",), "nccl-socket-fallback", command="NET/"),
    C("nvlink-down", ("nvlink-down",), "nvlink-degraded", command="nvlink -s -i 0",
      disposition="drain"),
    C("nvlink-down-gpu5", ("nvlink-down=gpu5",), "nvlink-degraded", command="nvlink -e -i 5"),
    C("nvlink-errors", ("nvlink-errors",), "nvlink-degraded", command="nvlink -e -i 2",
      disposition="watch"),
    C("xid63", ("xid=63",), "gpu-remap-pending", ruled_out=("gpu-memory-failing",),
      command="-i 2", disposition="watch"),
    C("rowremap+xid64", ("rowremap-pending", "xid=64"), "gpu-memory-failing", command="-i 2",
      disposition="drain"),
    C("ib-rate", ("ib-rate-downgrade",), "ib-link-degraded", command="mlx5_4 1"),
    C("ib-rate-mlx5_1", ("ib-rate-downgrade=mlx5_1",), "ib-link-degraded",
      command="mlxlink -d mlx5_1 -p 1"),
    C("ib-symbol", ("ib-symbol-errors",), "ib-link-degraded", ruled_out=("optics-degrading",),
      command="perfquery -x -C mlx5_5 -P 1"),
    C("ib-down", ("ib-port-down",), "ib-link-degraded", command="mlx5_7"),
    C("optics", ("optics-degrading",), "optics-degrading", command="mlxlink -d mlx5_8 -p 1",
      disposition="watch"),
    C("optics-mlx5_1", ("optics-degrading=mlx5_1",), "optics-degrading",
      command="mlxlink -d mlx5_1 -p 1", disposition="watch"),
    C("ecc-dbe", ("ecc-dbe",), "gpu-memory-failing", command="-i 5", disposition="drain"),
    C("ecc-dbe-gpu2", ("ecc-dbe=gpu2",), "gpu-memory-failing", command="-i 2"),
    C("rowremap", ("rowremap-pending",), "gpu-remap-pending", ruled_out=("gpu-memory-failing",),
      command="-i 6", disposition="watch"),
    C("dbe-remapped", ("ecc-dbe-remapped",), None, healthy=True),
    C("rowremap+dbe", ("rowremap-pending", "ecc-dbe"), "gpu-memory-failing", command="-i 5",
      disposition="drain"),
    C("xid48", ("xid=48",), "gpu-memory-failing", command="-i 2"),
    C("xid94-watch", ("xid=94",), "gpu-memory-failing", command="-i 2", disposition="watch"),
    C("xid79", ("xid=79",), "gpu-off-bus", command="0000:4c:00"),
    C("thermal", ("thermal-slowdown",), "thermal-power-throttling", command="-i 4"),
    C("thermal-gpu0", ("thermal-slowdown=gpu0",), "thermal-power-throttling", command="-i 0"),
    C("powerbrake", ("power-brake",), "thermal-power-throttling", command="POWER"),
    C("clocks", ("clocks-unlocked",), "clocks-not-locked", command="CLOCK -i 3"),
    C("clocks-gpu6", ("clocks-unlocked=gpu6",), "clocks-not-locked", command="CLOCK -i 6"),
    C("governor", ("governor-powersave",), "cpu-governor", command="cpu8/cpufreq"),
    C("nvme", ("nvme-rotational",), "nvme-rotational", command="/sys/block/nvme3n1/"),
    C("nvme1", ("nvme-rotational=nvme1n1",), "nvme-rotational", command="/sys/block/nvme1n1/"),
    C("hostoom", ("host-oom",), "host-memory-pressure", command="out of memory"),
    C("hcafw", ("hca-fw-old",), "version-drift", command="fw_ver"),
    # the NVLink fabric and the driver's own verdict (issue 24)
    C("fabric-not-started", ("fabric-not-started",), "nvswitch-fabric-down",
      command="grep -A6 Fabric", disposition="drain"),
    C("fabric-manager-down", ("fabric-manager-down",), "nvswitch-fabric-down",
      command="systemctl status nvidia-fabricmanager", disposition="drain"),
    C("sxid-fatal", ("sxid-fatal",), "nvswitch-fabric-down", command="grep -i sxid"),
    C("reset-required", ("reset-required",), "gpu-reset-required", command="grep -iA3 reset"),
    C("nic-socket", ("nic-wrong-socket",), "gpu-nic-affinity", command="topo -m"),
    # faults whose hardware says one thing and today's rules another: the expected cause is the
    # hardware's (stetho.sim.physics); test_diagnosis_catalogue.MISSES names the rule to change
    C("xid92", ("xid=92",), "gpu-memory-degrading", command="-i 2", disposition="watch"),
    C("hbm-hot", ("hbm-hot",), "thermal-power-throttling", command="-i 6"),
    C("ib-flap", ("ib-link-flap",), "ib-link-degraded", command="mlx5_1",
      disposition="drain"),
    C("optics-rx-low", ("optics-rx-low",), "optics-degrading", command="mlx5_4",
      disposition="watch"),
    C("edac-ue", ("edac-ue",), "host-memory-failing", command="ras-mc-ctl --errors",
      disposition="drain"),
    # host platform and cabling: a check whose result no other rule cites
    C("nvme-media", ("nvme-media-errors",), "nvme-failing", command="nvme error-log /dev/nvme3"),
    C("nvme-spare", ("nvme-critical-warning",), "nvme-failing", command="smart-log /dev/nvme5"),
    C("mce-fatal", ("mce-uncorrected",), "host-machine-check", command="ras-mc-ctl --errors",
      disposition="drain"),
    C("mce-storm", ("mce-corrected-storm",), "host-machine-check", command="mcelog --client",
      disposition="watch"),
    C("acs", ("acs-enabled",), "pcie-p2p-redirected", command="ACSCtl"),
    C("iommu", ("iommu-translated",), "pcie-p2p-redirected", command="iommu_groups"),
    C("cable-crossed", ("cable-crossed",), "ib-miscabled", command="iblinkinfo"),
    # two causes on one node: severity first, the other one also found
    C("xid79+governor", ("xid=79", "governor-powersave"), "gpu-off-bus",
      also=("cpu-governor",), command="0000:4c:00"),
    C("ibrate+hcafw", ("ib-rate-downgrade", "hca-fw-old"), "ib-link-degraded",
      also=("version-drift",), command="mlx5_4"),
    C("riser+governor", ("riser", "governor-powersave"), "riser-pcie-slot",
      also=("cpu-governor",), command="0000:9b:00.0"),
    C("socket+riser", ("nccl-socket", "riser"), "nccl-socket-fallback",
      also=("riser-pcie-slot",), not_ruled_out=("riser-pcie-slot",), command="0000:9b:00.0"),
    C("dbe+thermal", ("ecc-dbe", "thermal-slowdown"), "gpu-memory-failing",
      also=("thermal-power-throttling",), command="-i 5"),
    C("dbe+clocks", ("ecc-dbe", "clocks-unlocked"), "gpu-memory-failing",
      also=("clocks-not-locked",), command="CLOCK -i 3"),
    C("thermal+clocks", ("thermal-slowdown", "clocks-unlocked"), "thermal-power-throttling",
      also=("clocks-not-locked",), command="-i 4"),
    C("nvme+governor", ("nvme-rotational", "governor-powersave"), "nvme-rotational",
      also=("cpu-governor",), command="nvme3n1"),
    C("ibrate+optics", ("ib-rate-downgrade", "optics-degrading"), "ib-link-degraded",
      also=("optics-degrading",), command="mlxlink -d mlx5_8"),
    C("governor+clocks", ("governor-powersave", "clocks-unlocked"), "clocks-not-locked",
      also=("cpu-governor",), command="cpu8/cpufreq"),
    # one port down of eight leaves NCCL on the other HCAs: not why it fell back to sockets
    C("socket+ibdown", ("nccl-socket", "ib-port-down"), "nccl-socket-fallback",
      also=("ib-link-degraded",), command="mlx5_7"),
    C("xid48+governor", ("xid=48", "governor-powersave"), "gpu-memory-failing",
      also=("cpu-governor",), command="-i 2"),
    C("hostoom+hcafw", ("host-oom", "hca-fw-old"), "host-memory-pressure",
      also=("version-drift",), command="fw_ver"),
    C("edac+mce", ("edac-ue", "mce-corrected-storm"), "host-memory-failing",
      also=("host-machine-check",), command="mcelog --client"),
    # trends against the node's own past runs (the run itself is in the history too)
    C("sbe-rising", ("ecc-sbe",), "gpu-memory-degrading", command="-i 3",
      history=(("gpu", "ecc_correctable", 0.5),), disposition="watch"),
    C("sbe-no-history", ("ecc-sbe",), None, healthy=True),
    C("sbe-flat", ("ecc-sbe",), None, history=(("gpu", "ecc_correctable", 1.0),),
      healthy=True),
    C("sbe+dbe", ("ecc-sbe", "ecc-dbe=gpu3"), "gpu-memory-failing",
      ruled_out=("gpu-memory-degrading",), history=(("gpu", "ecc_correctable", 0.5),),
      command="-i 3"),
    C("aer-rising", ("riser",), "riser-pcie-slot", history=(("kernel", "aer_corrected", 0.5),),
      command="--metric aer_corrected"),
    C("ber-rising", (), "optics-degrading", history=(("ib", "pre_fec_ber", 0.1),),
      command="mlxlink -d mlx5_0 -p 1", disposition="watch"),
    # an IB fault's chart is the port's own metric, not the single-node busbw it never touches
    C("ib-rate-history", ("ib-rate-downgrade",), "ib-link-degraded", command="mlx5_4",
      history=(("ib", "rate_gbps", 2.0), ("nccl", "busbw_gbps", 1.0))),
    C("ib-symbol-history", ("ib-symbol-errors",), "ib-link-degraded", command="mlx5_5",
      history=(("ib", "SymbolErrorCounter", 0.5), ("nccl", "busbw_gbps", 1.0))),
    C("busbw-falling", ("busbw-drop=4",), None, history=(("nccl", "busbw_gbps", 1.1),),
      ruled_out=("nvlink-degraded",)),
]


def build(root: Path) -> dict[str, Any]:
    """Every case's node built, collected and checked; past runs recorded where the case has
    a history. Returns {case: {"bundle", "results", "summary", "db"}} (paths and JSON)."""
    from stetho import profiles
    from stetho.checking import run as checkrun
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    prof = profiles.load("h100-sxm-8gpu")
    bundles = []
    names = {}
    for i, case in enumerate(CASES):
        node = f"cat{i:02d}"
        names[node] = case
        sim = build_node(root / "sim" / node, node, list(case.faults))
        env, name = collect.sim_environment(str(sim))
        bundles.append(collect.collect(prof, env, name))
    run = checkrun.run(bundles)
    out: dict[str, Any] = {}
    for b in bundles:
        case = names[b.node]
        bundle_path = root / "bundles" / f"{b.node}.json"
        bundle_path.parent.mkdir(parents=True, exist_ok=True)
        b.save(bundle_path)
        results = [r.to_json() for r in run.results if r.node == b.node]
        summary = run.summaries[b.node]
        db = _history(root / "db" / f"{b.node}.db", b.node, results, summary, case) \
            if case.history else None
        out[case.name] = {"node": b.node, "bundle": str(bundle_path), "results": results,
                          "summary": json.loads(json.dumps(summary)),
                          "db": str(db) if db else None}
    (root / "catalogue.json").write_text(json.dumps(out))
    return out


RUN = "20251201T030000Z-cafe01"
DAY = 86400


def _history(path: Path, node: str, results: list[dict[str, Any]], summary: Any, case: Case
             ) -> Path:
    """Three nightly runs before this one with the case's metrics scaled, then this run
    itself (so a comparison that reads the run being diagnosed would see no change)."""
    from stetho.history.store import History, NodeRun
    from stetho.results import Result

    now = 1764558000  # 2025-12-01T03:00:00Z
    metrics = [list(m) for m in summary["metrics"]]
    factors = {(c, m): f for c, m, f in case.history}
    path.parent.mkdir(parents=True, exist_ok=True)
    with History(path) as h:
        for k in (3, 2, 1):
            past = [[c, s, m, v * factors[(c, m)] if (c, m) in factors else v, u]
                    for c, s, m, v, u in metrics]
            h.record(f"2025113{k}T030000Z-past{k}", "sweep",
                     [NodeRun(node, "h100-sxm-8gpu", [], past)], when=now - k * DAY)
        h.record(RUN, "sweep", [NodeRun(node, "h100-sxm-8gpu",
                                        [Result.from_json(r) for r in results], metrics)],
                 when=now)
    return path
