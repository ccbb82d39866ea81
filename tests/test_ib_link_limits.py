"""Issue 23: a port's pre-FEC BER judged by the profile's row for its FEC mode and lane speed
(unknown FEC: the strictest row), and an IB error counter read by both sysfs and perfquery
judged, and recorded for history, at the higher reading. Simulated nodes built from the real
recorded outputs, checked in-process against the H100 profile."""

from __future__ import annotations

import pytest

from stetho.facts import metrics
from stetho.facts.node import NodeFacts

pytestmark = pytest.mark.xdist_group("faultsim-ib23")

NODES: dict[str, list[str]] = {
    "ok": [],
    "ber400": ["pre-fec-ber=mlx5_9:5E-6"],
    "beredr": ["pre-fec-ber=mlx5_9:5E-6", "link-edr-no-fec=mlx5_9"],
    "fecna": ["fec-unreported=mlx5_9"],
    "pqhigher": ["perfquery-higher"],
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    from dataclasses import replace

    from stetho import profiles
    from stetho.checking.run import run
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("ib23")
    prof = profiles.load("h100-sxm-8gpu")
    bundles = {}
    for name, faults in NODES.items():
        build_node(root / name, name, faults)
        env, node = collect.sim_environment(str(root / name))
        bundles[name] = collect.collect(prof, replace(env, timeout_cap=5.0), node)
    by_node: dict = {n: {} for n in NODES}
    for r in run(list(bundles.values()), profile="h100-sxm-8gpu").results:
        by_node[r.node][(r.check, r.subject)] = r
    return by_node, bundles


def _r(checked, node, check, subject):
    return checked[0][node][(check, subject)]


def test_a_healthy_node_passes_ber_and_counters(checked):
    rows = [r for (c, _), r in checked[0]["ok"].items() if c in ("ib_link_ber", "ib_counters")]
    assert len(rows) >= 16 and {r.status for r in rows} <= {"pass", "skip"}
    r = _r(checked, "ok", "ib_link_ber", "mlx5_9:1")
    assert r.message == ("pre-FEC BER 5e-10 under 1e-05 (400 Gb/s (100 per lane), FEC "
                         "Standard_RS-FEC - (544,514); row rs544)")


def test_a_400g_rs_fec_link_at_5e_6_passes(checked):
    r = _r(checked, "ber400", "ib_link_ber", "mlx5_9:1")
    assert r.status == "pass" and r.value == 5e-06
    assert "row rs544" in r.message and "400 Gb/s (100 per lane)" in r.message
    assert r.threshold == "< 0.0001 (warns from 1e-05; row rs544)"
    assert (r.limit, r.limit_op) == (1e-4, "<")


def test_an_edr_link_without_fec_at_the_same_ber_fails(checked):
    r = _r(checked, "beredr", "ib_link_ber", "mlx5_9:1")
    assert r.status == "fail" and r.value == 5e-06
    assert r.message.startswith("mlx5_9:1: pre-FEC BER 5e-06 >= 1e-12 (100 Gb/s (25 per lane), "
                                "FEC No FEC; row no-fec); mlx5_9 port 1 -> cable to "
                                "MF0;su1-leaf-r7:MQM9700/U1 port ")
    assert r.threshold == "< 1e-12 (warns from 1e-15; row no-fec)"
    assert "transceiver" in (r.remediation or "")
    others = [r for (c, s), r in checked[0]["beredr"].items()
              if c == "ib_link_ber" and s != "mlx5_9:1"]
    assert [r.status for r in others if r.status != "skip"] == ["pass"] * 7


def test_an_unknown_fec_is_judged_by_the_strictest_row_and_says_so(checked):
    """The recording's healthy 5e-10 passes an RS-FEC link, but with the FEC unknown it is
    judged as if the link had none: unknown is never a pass by default."""
    r = _r(checked, "fecna", "ib_link_ber", "mlx5_9:1")
    assert r.status == "fail" and r.value == 5e-10
    assert "FEC not reported" in r.message
    assert ("no row of profile h100-sxm-8gpu is for an unknown FEC at 100 Gb/s per lane: the "
            "strictest row no-fec judges it") in r.message
    assert "add an ib.pre_fec_ber row" in (r.remediation or "")


def test_perfquery_reading_higher_than_sysfs_fails_naming_perfquery(checked):
    r = _r(checked, "pqhigher", "ib_counters", "mlx5_0:1")
    assert r.status == "fail"
    assert ("SymbolErrorCounter=5000 (perfquery -x; sysfs read 0) since boot or its last "
            "reset (max 10)") in r.message
    assert "SymbolErrorCounter=5000 (perfquery -x; sysfs read 0)" in (r.evidence or "")
    others = [r for (c, s), r in checked[0]["pqhigher"].items()
              if c == "ib_counters" and s != "mlx5_0:1"]
    assert {r.status for r in others} == {"pass"}


def test_history_records_the_reading_the_check_judged(checked):
    rows = {(m.subject, m.metric): m.value
            for m in metrics.extract(NodeFacts(checked[1]["pqhigher"]))}
    assert rows[("mlx5_0:1", "SymbolErrorCounter")] == 5000.0
    assert rows[("mlx5_4:1", "SymbolErrorCounter")] == 0.0
