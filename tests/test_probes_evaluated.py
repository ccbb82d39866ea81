"""Every collected probe is evaluated (issue 11): for each probe in stetho/evidence/probes.py,
a healthy simulated node's bundle without that probe's records makes some check error naming
it, and one with that probe's output replaced by text no tool prints is never all pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stetho.evidence import probes as P
from stetho.evidence.bundle import Bundle, ProbeRecord

pytestmark = pytest.mark.xdist_group("faultsim2")

PROBES = [p.name for p in P.BASE_PROBES] + ["nccl_tests", "services"]
BY_NAME = {p.name: p for p in P.BASE_PROBES} | {"nccl_tests": P.nccl_probe(("x",), 1),
                                               "services": P.services_probe(("x",))}
#: Free text where any line is valid input (a kernel log without events is a quiet kernel).
FREE_TEXT = {"kernel_log"}
GARBAGE = "\x1b[1m%%% not what this tool prints %%%\n{{ 12 ?? ]] <x\n"


def _records(bundle: Bundle, probe: str) -> list[str]:
    return [n for n in bundle.probes if n == probe or n.startswith(probe + ":")]


def _garbled(rec: ProbeRecord, probe: P.Probe) -> ProbeRecord:
    if rec.kind == "files" and not probe.read:  # only the paths are recorded: garble those
        return replace(rec, files={path.rsplit(".so", 1)[0] + ".so.%%garbage": ""
                                   for path in rec.files})
    if rec.kind == "files":
        return replace(rec, files={path: GARBAGE for path in rec.files})
    return replace(rec, status="ok", rc=0, stdout=GARBAGE, binary=False)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("probes") / "n"
    build_node(root, "n", [])
    env, node = collect.sim_environment(str(root))
    return collect.collect(profiles.load("h100-sxm-8gpu"), replace(env, timeout_cap=5.0), node)


@pytest.fixture(scope="module")
def results(healthy: Bundle) -> dict[str, list]:
    from stetho.checking.run import run

    bundles = [healthy]
    for probe in PROBES:
        names = _records(healthy, probe)
        assert names, f"probe {probe} is not collected on the simulated node"
        dropped = {k: v for k, v in healthy.probes.items() if k not in names}
        bundles.append(replace(healthy, node=f"drop-{probe}", probes=dropped))
        if probe not in FREE_TEXT:
            garbled = dict(healthy.probes)
            for n in names:
                garbled[n] = _garbled(garbled[n], BY_NAME[probe])
            bundles.append(replace(healthy, node=f"garble-{probe}", probes=garbled))
    by_node: dict[str, list] = {b.node: [] for b in bundles}
    for r in run(bundles, profile="h100-sxm-8gpu").results:
        by_node[r.node].append(r)
    return by_node


def test_the_healthy_node_passes(results):
    assert [r for r in results["n"] if r.status in ("fail", "error", "warn")] == []


@pytest.mark.parametrize("probe", PROBES)
def test_a_check_reads_every_probe(results, probe):
    """Without the probe's records some check errors (or, for a cross-check, warns) and says
    which probe is missing."""
    errors = [r for r in results[f"drop-{probe}"] if r.status in ("error", "warn")
              and f"probe {probe} was not collected" in r.message]
    assert errors, f"no check consumes probe {probe}"


@pytest.mark.parametrize("probe", [p for p in PROBES if p not in FREE_TEXT])
def test_unreadable_output_is_never_a_pass(results, probe):
    """Output no parser supports is an error or a warning, never a clean node."""
    passed = {r.check for r in results["n"] if r.status == "pass"}
    worse = [r for r in results[f"garble-{probe}"] if r.status in ("error", "warn", "fail")
             and r.check in passed]
    assert worse, f"garbage in probe {probe} left every check passing"


# -- the RoCE probes: collected on a profile with a `roce` section, judged on a RoCE node --------

ROCE_PROBES = [p.name for p in P.ROCE_PROBES]


@pytest.fixture(scope="module")
def roce_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    from stetho import profiles
    from stetho.checking.run import run
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("roce-probes") / "r"
    build_node(root, "r", ["roce"])
    env, node = collect.sim_environment(str(root))
    healthy = collect.collect(profiles.load("h100-roce-8gpu"), replace(env, timeout_cap=5.0),
                              node)
    bundles = [healthy]
    by_name = {p.name: p for p in P.ROCE_PROBES}
    for probe in ROCE_PROBES:
        names = _records(healthy, probe)
        assert names, f"probe {probe} is not collected on the simulated RoCE node"
        dropped = {k: v for k, v in healthy.probes.items() if k not in names}
        bundles.append(replace(healthy, node=f"drop-{probe}", probes=dropped))
        garbled = dict(healthy.probes)
        for n in names:
            garbled[n] = _garbled(garbled[n], by_name[probe])
        bundles.append(replace(healthy, node=f"garble-{probe}", probes=garbled))
    by_node: dict[str, list] = {b.node: [] for b in bundles}
    for r in run(bundles, profile="h100-roce-8gpu", select="roce_").results:
        if r.check in ("roce_congestion", "roce_qos"):
            by_node[r.node].append(r)
    return by_node


def test_the_healthy_roce_node_passes_the_roce_checks(roce_results):
    assert roce_results["r"] and {r.status for r in roce_results["r"]} == {"pass"}


@pytest.mark.parametrize("probe", ROCE_PROBES)
def test_a_roce_check_reads_every_roce_probe(roce_results, probe):
    errors = [r for r in roce_results[f"drop-{probe}"] if r.status == "error"
              and f"probe {probe}" in r.message and "was not collected" in r.message]
    assert errors, f"no check consumes probe {probe}"
    garbled = [r for r in roce_results[f"garble-{probe}"] if r.status in ("error", "fail")]
    assert garbled, f"garbage in probe {probe} left every RoCE check passing"
