"""What the diagnosis concludes from its evidence (issue 25): a rising SBE count alone gets a
watch report with its trend and projected crossing; a decisive signal gives high confidence on
its own; "ruled out" means measured healthy, and absence of evidence is "not supported"."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from stetho import profiles
from stetho.checking import run as checkrun
from stetho.diagnosis import engine, report, rules
from stetho.diagnosis.signals import NodeContext
from stetho.evidence import collect
from stetho.history.store import History, NodeRun
from stetho.results import Result
from stetho.sim.builder import build_node
from stetho.sinks import json_out
from tests.test_diagnosis import _ctx

pytestmark = pytest.mark.xdist_group("faultsim")

DAY = 86400


# -- a rising SBE count alone -----------------------------------------------------------------

def _run_folder_and_report(tmp_path, run, prof, bundle, judged, results, metrics, db, now):
    """The sweep's run folder for one node (its bundle, summary and results), this run in the
    history, and `stetho report` over it: the folder the reports went to."""
    name = bundle.node
    run_dir = tmp_path / "runs" / run
    host = run_dir / "hosts" / name
    host.mkdir(parents=True)
    bundle.save(host / "evidence.json")
    (host / "summary.json").write_text(json.dumps(judged.summaries[name]))
    (run_dir / "results.json").write_text(json_out.render(results))
    (run_dir / "meta.json").write_text(json.dumps({"run_id": run}))
    with History(db) as h:
        h.record(run, "sweep", [NodeRun(name, prof.name, results, metrics)], when=now)
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, "-m", "stetho", "report", str(run_dir), "--out",
                           str(out), "--db", str(db)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_a_rising_sbe_count_alone_gets_a_watch_report_with_trend_and_crossing(tmp_path):
    """A node whose checks all pass (its correctable ECC growth is under the limit within the
    counter window), but whose gpu3 SBE count grows faster every night: `stetho report` writes
    a watch report for gpu3 with the readings from the history and the projected crossing."""
    prof = profiles.load("h100-sxm-8gpu")
    sim = build_node(tmp_path / "sbe01", "sbe01", ["ecc-sbe"])
    env, name = collect.sim_environment(str(sim))
    bundle = collect.collect(prof, env, name)
    stamp = datetime.fromisoformat(bundle.collected_at.replace("Z", "+00:00"))
    now = stamp.timestamp()  # the nights before are dated from the collection
    run = f"{stamp.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}-sbe001"
    first = checkrun.run([bundle])
    metrics = [list(m) for m in first.summaries[name]["metrics"]]
    now_sbe = next(v for c, s, m, v, _ in metrics if (c, s, m) == ("gpu", "gpu3",
                                                                   "ecc_correctable"))
    # the readings of three earlier nights: growth 40, 80, then 192 a night, rising
    earlier = {3: now_sbe - 312, 2: now_sbe - 272, 1: now_sbe - 192}
    db = tmp_path / "history.db"
    with History(db) as h:
        for k, sbe in earlier.items():
            past = [[c, s, m, sbe if (c, s, m) == ("gpu", "gpu3", "ecc_correctable") else v, u]
                    for c, s, m, v, u in metrics]
            h.record(f"2025113{k}T030000Z-past{k}", "sweep",
                     [NodeRun(name, prof.name, [], past)], when=now - k * DAY)
    judged = checkrun.run([bundle], history=db)  # the sweep's windowed judgement
    assert all(r.status in ("pass", "skip") for r in judged.results if r.node == name), [
        (r.check, r.subject, r.status) for r in judged.results if r.status not in
        ("pass", "skip")]
    results = [r for r in judged.results if r.node == name]
    out = _run_folder_and_report(tmp_path, run, prof, bundle, judged, results, metrics, db, now)
    [md] = list(out.glob("*.md"))
    assert md.name.startswith("sbe01-gpu-memory-degrading-")
    text = md.read_text()
    assert "\ndisposition: watch\n" in text and "**WATCH sbe01**" in text
    assert "GPU 3" in text
    trend = text.split("**Trend**: ", 1)[1].splitlines()[0].replace("\\", "")
    assert "40, 80, 192 per 24 h" in trend and "limit 1000 per 24 h" in trend, trend
    assert "crosses the limit in about" in trend and " around 20" in trend, trend
    svg = out / (md.stem + "-trend.svg")
    assert svg.is_file()


def test_the_projection_counts_runs_and_leaves_resets_out():
    from stetho.diagnosis import projection

    day = 86400.0
    rising = [(0, 1000), (day, 1100), (2 * day, 1300), (3 * day, 1600)]  # 100, 200, 300 a day
    text = projection.project(rising, 1000, 24)
    assert "crosses the limit in about 7 run(s), around 1970-01-11" in text, text
    steady = [(0, 0), (day, 100), (2 * day, 200)]
    assert "not rising toward the limit" in projection.project(steady, 1000, 24)
    over = [(0, 0), (day, 1500)]
    assert "already over the limit" in projection.project(over, 1000, 24)
    reset = [(0, 5000), (day, 10), (2 * day, 110), (3 * day, 310)]  # a reset, then rising
    assert projection.rates(reset, day) == [(2 * day, 100.0), (3 * day, 200.0)]


# -- decisive signals ---------------------------------------------------------------------------

@pytest.mark.parametrize("node, signal", [("ibrate", "ib_rate_low"),
                                          ("fabric", "fabric_not_ready"),
                                          ("xid79", "xid_79"), ("eccdbe", "ecc_uncorrectable")])
def test_a_decisive_signal_alone_gives_high_confidence(node, signal, fault_results,
                                                       fault_bundles):
    """A port at 200 of 400 Gb/s is the cause, whatever share of the rule's weight it is: the
    confidence is high and the report says which fact decided it."""
    d = engine.diagnose(_ctx(node, fault_results, fault_bundles), run="r1")
    assert signal in d.top.decisive
    assert d.top.confidence == "high"
    text = report.render_markdown(d, None)
    line = next(ln for ln in text.splitlines() if ln.startswith("**Confidence**"))
    assert line.startswith("**Confidence**: high (decisive on its own: "), line
    if node == "ibrate":
        assert d.top.coverage < 0.4  # coverage alone would have said "low"


def test_without_a_decisive_signal_confidence_is_the_coverage(fault_results, fault_bundles):
    d = engine.diagnose(_ctx("ibsymbol", fault_results, fault_bundles), run="r1")
    assert d.top.cause == "ib-link-degraded" and d.top.decisive == ()
    assert d.top.confidence == ("medium" if d.top.coverage >= 0.4 else "low")


def test_decisive_is_declared_in_the_rule_and_checked(tmp_path):
    by = {r.cause: r for r in rules.load_all()}
    assert {s.signal for s in by["ib-link-degraded"].supports if s.decisive} == {
        "ib_rate_low", "ib_port_down"}
    assert not any(s.decisive for s in by["optics-degrading"].supports)
    bad = tmp_path / "bad-rule.yml"
    bad.write_text("cause: bad-rule\ntitle: x\nsupports:\n"
                   "  - {signal: busbw_drop, weight: 1, decisive: maybe}\naction: x\nticket: x\n")
    with pytest.raises(Exception, match="decisive"):
        rules.load(bad, {"busbw_drop"})


# -- ruled out by evidence, or not supported ---------------------------------------------------

def test_ruled_out_means_measured_healthy_and_absence_is_not_supported(fault_results,
                                                                      fault_bundles):
    # a single-node busbw drop on an SXM board: NVLink is its path, and every link measured up
    d = engine.diagnose(_ctx("busbw", fault_results, fault_bundles), run="r1")
    nv = next(h for h in d.ruled_out if h.cause == "nvlink-degraded")
    assert nv.ruled_out_by
    assert "GPUs up" in nv.ruled_out_by[0].description  # the measurement that shows healthy
    text = report.render_markdown(d, None).replace("\\", "")
    ruled = text.split("## Ruled out by evidence", 1)[1].split("## Not supported", 1)[0]
    assert "nvlink-degraded" in ruled and "measured: " in ruled
    # a DBE touches memory rules whose defining signals are not seen: not supported
    d = engine.diagnose(_ctx("eccdbe", fault_results, fault_bundles), run="r1")
    assert d.unsupported, "a DBE touches rules whose defining signals are not seen"
    for h in d.unsupported:
        assert h.cause not in {x.cause for x in d.ruled_out}
        assert h.falsified[0].startswith("not supported: looked for "), h.falsified
    text = report.render_markdown(d, None).replace("\\", "")
    parts = text.split("## Not supported", 1)
    for h in d.unsupported:
        assert h.cause in parts[1].split("## Also found")[0]
        assert h.cause not in parts[0].split("## Ruled out by evidence")[-1]


def test_a_falsifier_on_absence_never_rules_out(tmp_path, fault_results, fault_bundles):
    """A site rule saying "not this cause unless NCCL uses sockets": the socket line absent
    is not a measurement of health, so the cause is not supported, not ruled out."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "site-busbw.yml").write_text(
        "cause: site-busbw\ntitle: Site busbw\nsupports:\n  - {signal: busbw_drop, weight: 1}\n"
        "requires_any: [busbw_drop]\nfalsified_by:\n  - {signal: nccl_socket, when: absent, "
        "why: \"NCCL not on sockets\"}\naction: x\nticket: x\n")
    rule = rules.load(folder / "site-busbw.yml", set(engine.SIGNALS))
    d = engine.diagnose(_ctx("busbw", fault_results, fault_bundles), run="r1", rules=[rule])
    assert d.ruled_out == ()
    [h] = d.unsupported
    assert h.cause == "site-busbw" and h.falsified == ("not supported: NCCL not on sockets",)


def test_without_a_bundle_not_supported_says_what_was_not_measured(fault_results):
    results = [Result.from_json(r) for r in fault_results["busbw"]]
    d = engine.diagnose(NodeContext("busbw", results, None, None, {}), run="r1")
    assert d.unsupported
    assert all("not measured: no evidence bundle" in h.falsified[0] for h in d.unsupported)
    assert all(h.basis == "evidence" and h.ruled_out_by for h in d.ruled_out)


def test_diagnosis_json_keeps_the_basis(fault_results, fault_bundles):
    d = engine.diagnose(_ctx("busbw", fault_results, fault_bundles), run="r1")
    bases = {h["cause"]: h["basis"] for h in d.to_json()["falsified"]}
    assert bases["nvlink-degraded"] == "evidence"
    assert set(bases.values()) <= {"evidence", "unsupported", "ranked"}


# -- trends on passing nodes: IB errors rising, busbw declining ------------------------------

def _night_with_history(tmp_path, faults, change):
    """A node checked now, with three earlier nights in a real history file whose metrics
    are this run's with `change(check, subject, metric, value, nights_ago)` applied; the
    sweep's windowed judgement, the run folder and `stetho report` over it. (report text or
    None, the judged results)."""
    prof = profiles.load("h100-sxm-8gpu")
    sim = build_node(tmp_path / "n01", "n01", faults)
    env, name = collect.sim_environment(str(sim))
    bundle = collect.collect(prof, env, name)
    stamp = datetime.fromisoformat(bundle.collected_at.replace("Z", "+00:00"))
    now = stamp.timestamp()
    run = f"{stamp.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}-trend01"
    metrics = [list(m) for m in checkrun.run([bundle]).summaries[name]["metrics"]]
    db = tmp_path / "history.db"
    with History(db) as h:
        for k in (3, 2, 1):
            past = [[c, s, m, change(c, s, m, v, k), u] for c, s, m, v, u in metrics]
            h.record(f"2025113{k}T030000Z-past{k}", "sweep",
                     [NodeRun(name, prof.name, [], past)], when=now - k * DAY + 600)
    judged = checkrun.run([bundle], history=db)
    results = [r for r in judged.results if r.node == name]
    out = _run_folder_and_report(tmp_path, run, prof, bundle, judged, results, metrics, db, now)
    mds = list(out.glob("*.md")) if out.is_dir() else []
    return {md.name: md.read_text() for md in mds}, results


@pytest.mark.parametrize("trending", [True, False])
def test_ib_symbol_errors_rising_on_a_passing_port_get_a_watch_report(tmp_path, trending):
    """mlx5_5 port 1 has 4096 symbol errors since its reset. Steady (no growth), nothing is
    reported. Growing 2, 4, then 6 a night (under ib_counters' 10 a day, so the port passes):
    a watch report naming the port, with the readings and the projected crossing."""
    port = "mlx5_5:1"

    def change(c, s, m, v, k):
        if (c, s, m) == ("ib", port, "SymbolErrorCounter") and trending:
            return v - {3: 12, 2: 10, 1: 6}[k]
        return v

    reports, results = _night_with_history(tmp_path, ["ib-symbol-errors"], change)
    [counters] = [r for r in results if (r.check, r.subject) == ("ib_counters", port)]
    assert counters.status == "pass", counters.message
    rising = {n: t for n, t in reports.items() if "-ib-link-errors-rising-" in n}
    if not trending:
        assert rising == {}, list(reports)
        return
    [(name, text)] = rising.items()
    assert "\ndisposition: watch\n" in text and "**WATCH n01**" in text
    assert "mlx5_5 port 1" in text and "SymbolErrorCounter 4096" in text
    trend = text.split("**Trend**: ", 1)[1].splitlines()[0].replace("\\", "")
    assert "symbol errors 2, 4, 6 per 24 h" in trend and "limit 10 per 24 h" in trend, trend
    assert "crosses the limit in about" in trend, trend


@pytest.mark.parametrize("trending", [True, False])
def test_busbw_declining_on_a_passing_node_gets_a_watch_report(tmp_path, trending):
    """A healthy node whose all-reduce busbw at 8 GiB was 12, 8 and 4 % higher the three
    nights before (still passing nccl_busbw now) gets a watch report naming the path the run
    crosses (NVLink/NVSwitch on this SXM board), with the readings and the projected
    crossing of the threshold; jitter of a few tenths of a percent gets none."""
    size = "allreduce@8589934592"
    factors = {3: 1.12, 2: 1.08, 1: 1.04} if trending else {3: 1.002, 2: 0.998, 1: 1.001}

    def change(c, s, m, v, k):
        return v * factors[k] if (c, s, m) == ("nccl", size, "busbw_gbps") else v

    reports, results = _night_with_history(tmp_path, [], change)
    assert all(r.status == "pass" for r in results if r.check == "nccl_busbw")
    declining = {n: t for n, t in reports.items() if "-busbw-declining-" in n}
    if not trending:
        assert declining == {}, list(reports)
        return
    [(name, text)] = declining.items()
    assert "\ndisposition: watch\n" in text and "**WATCH n01**" in text
    assert "the NVLink/NVSwitch fabric" in text
    trend = text.split("**Trend**: ", 1)[1].splitlines()[0].replace("\\", "")
    assert trend.startswith(f"busbw {size} ") and "GB/s over the last 4 runs" in trend, trend
    assert "falls under the threshold in about" in trend and " around 20" in trend, trend
