"""RoCE checks (issue 24) on simulated nodes: the healthy RoCE node passes roce_congestion and
roce_qos under h100-roce-8gpu, each RoCE fault fails or warns its check on its port, an
InfiniBand node skips them saying why, and the counters are judged by their growth within the
window from a real SQLite history (a burst in the window warns; the same counts read before
the window pass)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from stetho.evidence.bundle import Bundle

pytestmark = pytest.mark.xdist_group("roce")

ROCE = "h100-roce-8gpu"
IB = "h100-sxm-8gpu"
H = 3600.0
NODES = {"healthy": ["roce"], "storm": ["roce-pfc-storm"], "oos": ["roce-out-of-sequence"],
         "pcp": ["roce-trust-pcp"], "ecn": ["roce-ecn-off"]}
CHECKS = ("roce_congestion", "roce_qos")


def _collect(root: Path, name: str, faults: list[str], profile: str) -> Bundle:
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    build_node(root / name, name, faults)
    env, node = collect.sim_environment(str(root / name))
    return collect.collect(profiles.load(profile), replace(env, timeout_cap=10.0), node)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Bundle]:
    base = tmp_path_factory.mktemp("roce")
    out = {k: _collect(base, k, f, ROCE) for k, f in NODES.items()}
    out["ib"] = _collect(base, "ib", [], IB)
    return out


def _run(bundle: Bundle, profile: str = ROCE, history: Path | None = None) -> list:
    from stetho.checking import run as checkrun

    return [r for r in checkrun.run([bundle], profile=profile, history=history).results
            if r.check in CHECKS]


def _one(results: list, check: str, subject: str):  # type: ignore[no-untyped-def]
    return next(r for r in results if r.check == check and r.subject == subject)


def test_the_healthy_roce_node_passes(bundles) -> None:
    results = _run(bundles["healthy"])
    # 8 ConnectX-7 compute ports and the front-end bond, each judged by both checks
    assert len(results) == 18
    assert {r.status for r in results} == {"pass"}, [r.message for r in results
                                                     if r.status != "pass"]


def test_the_healthy_roce_node_passes_every_check(bundles) -> None:
    """Not only the RoCE checks: hca_firmware once warned here, judging the ConnectX-7 ports
    (28.x) and the BlueField-3 front-end bond (32.x) as one device whose firmware differs;
    each model has its own firmware line, so only drift within a model warns."""
    from stetho.checking import run as checkrun

    results = checkrun.run([bundles["healthy"]], profile=ROCE).results
    bad = [(r.check, r.subject, r.status, r.message) for r in results
           if r.status in ("fail", "error", "warn")]
    assert bad == []
    fw = next(r for r in results if r.check == "versions" and r.subject == "hca_firmware")
    assert fw.status == "pass" and "MT4129 28.41.1000" in fw.message, fw.message


def test_pfc_storm_warns_congestion(bundles) -> None:
    results = _run(bundles["storm"])
    r = _one(results, "roce_congestion", "mlx5_4:1")
    assert r.status == "warn"
    assert "rx_prio3_pause=4.81234e+06" in r.message or "rx_prio3_pause=4812337" in r.message
    assert "tx_pause_storm_warning_events" in r.message and "reads no history" in r.message
    assert "ethtool -S ens4np0" in r.remediation
    others = [x for x in results if x.subject != "mlx5_4:1" or x.check != "roce_congestion"]
    assert {x.status for x in others} == {"pass"}


def test_out_of_sequence_fails(bundles) -> None:
    r = _one(_run(bundles["oos"]), "roce_congestion", "mlx5_4:1")
    assert r.status == "fail"
    assert "out_of_sequence=18244" in r.message and "packet_seq_err=9127" in r.message
    assert "mlnx_qos -i ens4np0" in r.remediation


def test_trust_pcp_fails_with_the_fix(bundles) -> None:
    results = _run(bundles["pcp"])
    r = _one(results, "roce_qos", "mlx5_0:1")
    assert r.status == "fail" and "trust state pcp" in r.message
    assert "mlnx_qos -i ens0np0 --trust dscp" in r.remediation
    assert {x.status for x in results if x.check == "roce_qos"} == {"fail"}


def test_ecn_off_fails_with_the_fix(bundles) -> None:
    r = _one(_run(bundles["ecn"]), "roce_qos", "mlx5_5:1")
    assert r.status == "fail" and "ECN off on priority 3" in r.message
    assert "echo 1 > /sys/class/net/ens5np0/ecn/roce_np/enable/3" in r.remediation


def test_an_infiniband_node_skips_saying_why(bundles) -> None:
    results = _run(bundles["ib"], profile=IB)
    assert results and {r.status for r in results} == {"skip"}
    assert all("no roce section" in r.message for r in results)


def test_a_roce_node_on_the_ib_profile_is_not_judged_as_roce(bundles) -> None:
    results = _run(bundles["healthy"], profile=IB)
    assert {r.status for r in results} == {"skip"}


def test_absent_mlnx_qos_is_an_error_on_a_roce_profile(bundles) -> None:
    b = bundles["healthy"]
    probes = {k: v for k, v in b.probes.items() if not k.startswith("mlnx_qos")}
    probes["mlnx_qos"] = replace(b.probes["mlnx_qos:mlx5_0"], name="mlnx_qos", status="missing",
                                 stdout="", reason="mlnx_qos not found on PATH")
    r = _one(_run(replace(b, probes=probes)), "roce_qos", "mlx5_0:1")
    assert r.status == "error" and "mlnx_qos not found" in r.message


def test_garbled_ethtool_is_an_error(bundles) -> None:
    b = bundles["healthy"]
    rec = b.probes["ethtool_stats:mlx5_4"]
    probes = {**b.probes, "ethtool_stats:mlx5_4": replace(rec, stdout="%%% no %%%\n{{ ]]\n")}
    r = _one(_run(replace(b, probes=probes)), "roce_congestion", "mlx5_4:1")
    assert r.status == "error"


# -- the window, with a real history file ---------------------------------------------------

def _record(db: Path, bundle: Bundle, hours_ago: float) -> None:
    from stetho.checking import run as checkrun
    from stetho.history import recording
    from stetho.history.store import new_run_id

    when = datetime.now(timezone.utc).timestamp() - hours_ago * H
    dated = replace(bundle, collected_at=datetime.fromtimestamp(when, timezone.utc).isoformat(
        timespec="seconds"))
    run = checkrun.run([dated], profile=ROCE)
    recording.after_run("check", new_run_id(), list(run.results), run.summaries, db, when=when)


def _as_one_node(bundles: dict[str, Bundle], name: str) -> Bundle:
    """History is per node: the healthy and the storm readings as one node's, gpu07's."""
    return replace(bundles[name], node="gpu07")


def test_a_pause_burst_within_the_window_warns(bundles, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _record(db, _as_one_node(bundles, "healthy"), hours_ago=2)
    r = _one(_run(_as_one_node(bundles, "storm"), history=db), "roce_congestion", "mlx5_4:1")
    assert r.status == "warn"
    assert "rx_prio3_pause +4.81234e+06 in the" in r.message or \
        "rx_prio3_pause +4812337 in the" in r.message
    assert "judged on growth within 24 h" in r.message


def test_the_same_counts_read_before_the_window_pass(bundles, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _record(db, _as_one_node(bundles, "storm"), hours_ago=30)
    r = _one(_run(_as_one_node(bundles, "storm"), history=db), "roce_congestion", "mlx5_4:1")
    assert r.status == "pass", r.message
    assert "judged on growth within 24 h" in r.message


def test_roce_metrics_are_declared_counters(bundles) -> None:
    """History records the RoCE counters under check "roce", each declared a counter in
    stetho.facts.kinds (drift judges their growth; the window reads them back)."""
    from stetho.facts import kinds, metrics
    from stetho.facts.node import NodeFacts

    rows = [m for m in metrics.extract(NodeFacts(bundles["storm"])) if m.check == "roce"]
    assert {m.subject for m in rows} >= {"mlx5_0:1", "mlx5_4:1", "mlx5_bond_0:1"}
    assert all(kinds.TABLE[m.metric].kind == "counter" for m in rows)
    storm = {m.metric: m.value for m in rows if m.subject == "mlx5_4:1"}
    assert storm["rx_prio3_pause"] == 4_812_337 and storm["out_of_sequence"] == 0
    assert not [m for m in metrics.extract(NodeFacts(bundles["ib"])) if m.check == "roce"]


@pytest.mark.parametrize("name", ["storm", "oos", "pcp", "ecn"])
def test_diagnosis_names_roce_congestion_first(bundles, name) -> None:
    """Every RoCE fault leads the diagnosis to roce-congestion, aimed at its port."""
    from stetho import profiles
    from stetho.checking import nodes
    from stetho.checking import run as checkrun
    from stetho.diagnosis import engine
    from stetho.diagnosis.context import NodeContext

    bundle = bundles[name]
    prof = profiles.load(ROCE)
    facts = nodes.node_facts(bundle, prof)
    results = list(checkrun.run([bundle], profile=ROCE).results)
    top, _ = engine.hypotheses(NodeContext(name, results, facts, None,
                                           nodes.summary(facts, prof)))
    assert top and top[0].cause == "roce-congestion", [(h.cause, h.score) for h in top]
    assert any("mlx5_" in (e.command or "") for e in top[0].evidence)
