"""Drift against a node's own history: counter rates and resets, shifts (robust z, KS) and
trends toward a threshold, on a real history database with a constructed past."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stetho import profiles
from stetho.history import drift
from stetho.history.store import History, NodeRun

DAY = 86400.0
NOW = 1_800_000_000.0


@pytest.fixture
def hist(tmp_path):
    with History(tmp_path / "h.db") as h:
        yield h


def _past(h, node, series, days):
    """series: {(check, subject, metric): [value per day, oldest first]}."""
    for i in range(days):
        metrics = [[c, s, m, vals[i], ""] for (c, s, m), vals in series.items() if i < len(vals)]
        h.record(f"r{i}", "sweep", [NodeRun(node, "generic", [], metrics)],
                 when=NOW - (days - i) * DAY)


def _by(results, check):
    return [r for r in results if r.check == check]


PROFILE = profiles.load("generic")


def test_no_history_skips_saying_how_much_it_needs(hist):
    out = drift.evaluate(hist, "n1", PROFILE, [["ib", "mlx5_0:1", "LinkDownedCounter", 0, ""],
                                               ["gpu", "gpu0", "temperature_c", 40, "C"],
                                               ["gpu", "gpu0", "ecc_correctable", 3, ""]],
                         now=NOW)
    msgs = {r.check: (r.status, r.message) for r in out}
    assert msgs["drift_counter"] == ("skip", "needs 1 earlier run with these counters; the "
                                             "history has none")
    assert msgs["drift_shift"][0] == "skip" and "needs 5 runs" in msgs["drift_shift"][1]
    assert msgs["drift_trend"][0] == "skip"


def test_counter_growing_too_fast_fails_below_the_static_threshold(hist):
    key = ("ib", "mlx5_3:1", "LinkErrorRecoveryCounter")
    _past(hist, "n1", {key: [0.0]}, 1)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 5.0, ""]], now=NOW)
    (fail,) = [r for r in _by(out, "drift_counter") if r.status == "fail"]
    assert fail.subject == "mlx5_3:1:LinkErrorRecoveryCounter"
    assert "grew by 5 in 1 days (5/day, limit 2/day)" in fail.message
    assert 5.0 < PROFILE.ib.counter_max["LinkErrorRecoveryCounter"]  # under the static one


def test_counter_reset_is_a_reset_never_negative(hist):
    key = ("ib", "mlx5_0:1", "PortRcvErrors")
    _past(hist, "n1", {key: [900.0]}, 1)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 3.0, ""]], now=NOW)
    (r,) = _by(out, "drift_counter")
    assert r.status == "pass" and "reset since then" in r.message
    assert "mlx5_0:1:PortRcvErrors" in r.message


def test_gauge_shift_by_robust_z(hist):
    key = ("gpu", "gpu2", "temperature_c")
    _past(hist, "n1", {key: [40.0, 40.4, 39.8, 40.1, 40.3, 39.9, 40.2]}, 7)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 55.0, "C"]], now=NOW)
    (warn,) = [r for r in _by(out, "drift_shift") if r.status == "warn"]
    assert warn.subject == "gpu2:temperature_c" and "robust z" in warn.message
    calm = drift.evaluate(hist, "n1", PROFILE, [[*key, 40.2, "C"]], now=NOW)
    assert {r.status for r in _by(calm, "drift_shift")} == {"pass"}


def test_gauge_shift_by_ks_with_enough_samples(hist, tmp_path):
    key = ("nccl", "allreduce@8589934592", "busbw_gbps")
    values = [479.0, 478.6, 479.4, 478.8, 479.2, 478.9, 479.1, 478.7, 479.3, 479.0] * 2 + \
        [464.2, 464.9, 464.4, 464.6, 464.8] * 2  # -3 %: past busbw's 2 % minimum
    with History(tmp_path / "ks.db") as h:
        for i, v in enumerate(values):
            h.record(f"k{i}", "sweep", [NodeRun("n1", "generic", [], [[*key, v, "GB/s"]])],
                     when=NOW - (len(values) - i) * DAY * 0.2)
        out = drift.evaluate(h, "n1", PROFILE, [[*key, 464.5, "GB/s"]], now=NOW)
    (warn,) = [r for r in _by(out, "drift_shift") if r.status == "warn"]
    assert "KS p=" in warn.message


def test_trend_predicts_the_crossing_date(hist):
    key = ("gpu", "gpu5", "ecc_correctable")
    _past(hist, "n1", {key: [200.0, 300.0, 400.0, 500.0, 600.0]}, 5)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 700.0, ""]], now=NOW)
    (warn,) = [r for r in _by(out, "drift_trend") if r.status == "warn"]
    assert "predicted to reach 1000 on" in warn.message and "(3.0 days)" in warn.message
    assert "rising 100/day" in warn.message


def test_flat_metric_far_from_threshold_passes(hist):
    key = ("ib", "mlx5_8:1", "pre_fec_ber")
    _past(hist, "n1", {key: [5e-10, 5.1e-10, 4.9e-10, 5e-10, 5.2e-10]}, 5)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 5.1e-10, ""]], now=NOW)
    assert [r.status for r in _by(out, "drift_trend")] == ["pass"]


def test_optics_trend_warns_before_the_ber_threshold(hist):
    key = ("ib", "mlx5_8:1", "pre_fec_ber")
    """Without drift.thresholds.pre_fec_ber, the trend heads for the loosest ib.pre_fec_ber
    row's fail limit (history keeps no FEC mode per port): 1e-4, RS(544,514)'s."""
    _past(hist, "n1", {key: [1e-5, 2e-5, 3e-5, 4e-5, 5e-5]}, 5)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 6e-5, ""]], now=NOW)
    (warn,) = [r for r in _by(out, "drift_trend") if r.status == "warn"]
    assert warn.subject == "mlx5_8:1:pre_fec_ber" and "predicted to reach 0.0001" in warn.message


@pytest.mark.xdist_group("faultsim")
def test_check_records_history_and_runs_drift(fault_cluster, tmp_path):
    db = tmp_path / "h.db"
    out = tmp_path / "r.json"
    env = {**os.environ, "STETHO_DB": str(db)}
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--sim",
                               str(fault_cluster / "healthy"), "--profile", "h100-sxm-8gpu",
                               "--json", str(out), "-q"], capture_output=True, text=True,
                              env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
    rows = {r["check"]: r for r in json.loads(out.read_text())["results"]
            if r["check"].startswith("drift_")}
    assert rows["drift_counter"]["status"] == "pass", rows["drift_counter"]["message"]
    assert rows["drift_shift"]["status"] == "skip"
    with History(db) as h:
        assert h.conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
        series = h.series_of("healthy", metric="busbw_gbps")
        assert len(series) == 14  # 1 MiB .. 8 GiB


# -- kinds, floors and enough history (issue 18) ---------------------------------------------


def _nightly(h, node, key, values, hour=2.0, unit=""):
    """One run a night at `hour` UTC before NOW's day, oldest first; NOW is at that hour too."""
    for i, v in enumerate(values):
        h.record(f"n{node}{key[1]}{hour:g}h{i}", "sweep",
                 [NodeRun(node, "generic", [], [[*key, v, unit]])],
                 when=NOW - (len(values) - i) * DAY + (hour - NOW_HOUR) * 3600)


NOW_HOUR = (NOW % DAY) / 3600


def _warns(out, check="drift_shift"):
    return [r for r in out if r.check == check and r.status == "warn"]


@pytest.mark.xdist_group("faultsim")
def test_every_extracted_metric_declares_its_kind_and_a_finite_scale(fault_bundles):
    from stetho.checking.nodes import node_facts
    from stetho.evidence.bundle import load
    from stetho.facts import kinds, metrics

    prof = profiles.load("h100-sxm-8gpu")
    names = {m.metric for m in metrics.extract(node_facts(load(fault_bundles / "healthy.json"),
                                                          prof))}
    assert len(names) > 20
    assert names <= set(kinds.TABLE), names - set(kinds.TABLE)
    for name, k in kinds.TABLE.items():
        assert k.kind in kinds.KINDS and k.rhythm in kinds.RHYTHMS
        if k.kind == "gauge":  # z is never infinite for a gauge
            assert k.resolution > 0 or k.min_change > 0, name


def test_one_degree_on_a_constant_history_is_not_a_warning(hist):
    key = ("gpu", "gpu3", "temperature_c")
    _nightly(hist, "n1", key, [30.0] * 7, hour=NOW_HOUR, unit="C")
    for value in (31.0, 29.0, 33.0):  # 3 C is the minimum meaningful change: not beyond it
        out = drift.evaluate(hist, "n1", PROFILE, [[*key, value, "C"]], now=NOW)
        assert not _warns(out), out
        assert [r.status for r in out if r.check == "drift_shift"] == ["pass"]
    (warn,) = _warns(drift.evaluate(hist, "n1", PROFILE, [[*key, 38.0, "C"]], now=NOW))
    # scale max(MAD 0, resolution 1 C, 3 C / bound 4) = 1 C: z is +8, never inf
    assert "robust z +8.0" in warn.message and "inf" not in warn.message


def test_power_needs_its_relative_minimum(hist):
    key = ("gpu", "gpu0", "power_w")
    _nightly(hist, "n1", key, [70.5] * 7, hour=NOW_HOUR, unit="W")
    assert not _warns(drift.evaluate(hist, "n1", PROFILE, [[*key, 73.0, "W"]], now=NOW))
    (warn,) = _warns(drift.evaluate(hist, "n1", PROFILE, [[*key, 76.0, "W"]], now=NOW))
    assert warn.subject == "gpu0:power_w"  # 5.5 W > 5 % of 70.5 W


def test_a_counter_leaving_zero_is_still_news(hist):
    key = ("gpu", "gpu1", "ecc_uncorrectable")
    _nightly(hist, "n1", key, [0.0] * 7)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 1.0, ""]], now=NOW)
    (fail,) = [r for r in out if r.status == "fail"]
    assert fail.check == "drift_counter" and "limit 0/day" in fail.message


def test_too_little_history_is_a_skip_with_the_counts(hist):
    key = ("nccl", "allreduce@1048576", "busbw_gbps")
    for i in range(8):  # 8 runs, but only over 1.75 days
        hist.record(f"s{i}", "sweep", [NodeRun("n1", "generic", [], [[*key, 40.0, "GB/s"]])],
                    when=NOW - (8 - i) * 0.25 * DAY + 3600)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 20.0, "GB/s"]], now=NOW)
    (skip,) = [r for r in out if r.check == "drift_shift"]
    assert skip.status == "skip"
    assert "needs 5 runs over at least 3 days" in skip.message
    assert "8 runs over 2.0 days" in skip.message


def test_a_pass_never_hides_metrics_without_enough_history(hist):
    old = ("gpu", "gpu0", "power_w")
    new = ("gpu", "gpu1", "power_w")
    _nightly(hist, "n1", old, [70.0] * 7, hour=NOW_HOUR, unit="W")
    _nightly(hist, "n1", new, [70.0] * 2, hour=NOW_HOUR, unit="W")
    out = [r for r in drift.evaluate(hist, "n1", PROFILE, [[*old, 70.0, "W"], [*new, 70.0, "W"]],
                                     now=NOW) if r.check == "drift_shift"]
    assert [(r.subject, r.status) for r in out] == [("", "pass"), ("short-history", "skip")]
    assert "1 of 1 gauges" in out[0].message
    assert "gpu1:power_w has 2 runs over 2.0 days" in out[1].message


def test_ks_needs_a_meaningful_effect_not_only_a_small_p(tmp_path):
    from stetho.history.ks import ks_2samp

    key = ("gpu", "gpu0", "memory_temperature_c")
    values = [40.0, 40.1, 39.9, 40.05, 39.95] * 4 + [40.3, 40.4, 40.25, 40.35, 40.3] * 2
    with History(tmp_path / "k.db") as h:
        for i, v in enumerate(values):  # within the hour band: 30 runs over 6 days
            t = NOW - (6 - i // 5) * DAY + (i % 5 - 2) * 1200
            h.record(f"k{i}", "sweep", [NodeRun("n1", "generic", [], [[*key, v, "C"]])], when=t)
        out = drift.evaluate(h, "n1", PROFILE, [[*key, 40.3, "C"]], now=NOW)
    assert ks_2samp(values[-10:] + [40.3], values[:-10]).pvalue < 1e-4  # significant...
    assert not _warns(out)  # ...but a 0.3 C shift is not a warning
    assert [r.status for r in out if r.check == "drift_shift"] == ["pass"]


def test_an_afternoon_is_compared_with_afternoons_not_nights(hist):
    key = ("gpu", "gpu0", "temperature_c")
    _nightly(hist, "n1", key, [30.0, 31.0, 30.0, 30.0, 31.0, 30.0, 30.0], hour=2.0, unit="C")
    afternoon = NOW - NOW % DAY + 15 * 3600
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 36.0, "C"]], now=afternoon)
    (r,) = [r for r in out if r.check == "drift_shift"]
    assert r.status == "skip" and "0 runs" not in r.message
    assert "no runs at this hour ±2 h (6 at any hour)" in r.message
    _nightly(hist, "n1", key, [36.0, 35.0, 36.0, 37.0, 36.0, 36.0, 35.0], hour=15.0, unit="C")
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 36.0, "C"]], now=afternoon)
    assert [r.status for r in out if r.check == "drift_shift"] == ["pass"]
    night = NOW - NOW % DAY + 2 * 3600
    (warn,) = _warns(drift.evaluate(hist, "n1", PROFILE, [[*key, 36.0, "C"]], now=night))
    assert "same hour ±2 h" in warn.message


def test_weekly_rhythm_from_the_profile(hist, tmp_path):
    prof_path = tmp_path / "weekly.yml"
    prof_path.write_text("profile: weekly\nextends: generic\ndrift:\n  metrics:\n"
                         "    temperature_c: {rhythm: weekly}\n")
    weekly = profiles.load(str(prof_path))
    key = ("gpu", "gpu0", "temperature_c")
    values = [38.0 if (42 - i) % 7 == 0 else 30.0 for i in range(42)]  # NOW's weekday: busy
    _nightly(hist, "n1", key, values, hour=NOW_HOUR, unit="C")
    assert _warns(drift.evaluate(hist, "n1", PROFILE, [[*key, 38.0, "C"]], now=NOW))
    out = drift.evaluate(hist, "n1", weekly, [[*key, 38.0, "C"]], now=NOW)
    assert [r.status for r in out if r.check == "drift_shift"] == ["pass"]


def test_profile_metric_overrides_are_validated(tmp_path):
    from stetho.errors import ConfigError

    bad = tmp_path / "bad.yml"
    bad.write_text("profile: bad\nextends: generic\ndrift:\n  metrics:\n"
                   "    temperature_c: {rhythm: hourly}\n")
    with pytest.raises(ConfigError, match=r"bad.yml:5: .*rhythm must be one of none, daily"):
        profiles.load(str(bad))
    bad.write_text("profile: bad\nextends: generic\ndrift:\n  metrics:\n"
                   "    temperature_c: {resolutoin: 1}\n")
    with pytest.raises(ConfigError, match="unknown key"):
        profiles.load(str(bad))


def test_site_metric_declared_only_in_the_profile(hist, tmp_path):
    path = tmp_path / "site.yml"
    path.write_text("profile: site\nextends: generic\ndrift:\n  metrics:\n"
                    "    fan_rpm: {kind: gauge, resolution: 10, min_change_pct: 10}\n")
    site = profiles.load(str(path))
    key = ("host", "fan1", "fan_rpm")
    _nightly(hist, "n1", key, [9000.0] * 7, hour=NOW_HOUR)
    unknown = drift.evaluate(hist, "n1", PROFILE, [[*key, 5000.0, ""]], now=NOW)
    assert [(r.subject, r.status) for r in unknown] == [("undeclared", "skip")]
    assert _warns(drift.evaluate(hist, "n1", site, [[*key, 5000.0, ""]], now=NOW))


def test_drift_on_many_gpus_is_one_line_strongest_first(hist):
    keys = [("gpu", f"gpu{g}", "temperature_c") for g in range(8)]
    for i in range(7):
        hist.record(f"g{i}", "sweep", [NodeRun("n1", "generic", [], [
            [*k, 30.0, "C"] for k in keys])], when=NOW - (7 - i) * DAY)
    hotter = {0: 6.0, 3: 9.0, 5: 7.0, 6: 1.0}
    out = drift.evaluate(hist, "n1", PROFILE, [[*k, 30.0 + hotter.get(g, 0.0), "C"]
                                                for g, k in enumerate(keys)], now=NOW)
    (warn,) = _warns(out)
    assert warn.subject == "temperature_c"
    assert warn.message.startswith("temperature_c on 3 subjects, strongest first: gpu3 is 39 C")
    assert warn.message.index("gpu3") < warn.message.index("gpu5") < warn.message.index("gpu0")
    assert warn.evidence.count("\n") == 2 and "gpu6" not in warn.message


def test_a_slow_busbw_slide_is_a_trend_not_a_shift(hist):
    key = ("nccl", "allreduce@8589934592", "busbw_gbps")
    values = [480.0 * (1 - 0.005 * i) for i in range(10)]
    _nightly(hist, "n1", key, values, hour=NOW_HOUR, unit="GB/s")
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 480.0 * (1 - 0.005 * 10), "GB/s"]],
                         now=NOW)
    assert not _warns(out)  # last week's median lags by ~2 %: no jump to see
    (trend,) = _warns(out, "drift_trend")
    assert "moved -24 GB/s (-5.0 %) over 10.0 days" in trend.message


def test_report_lists_drift_only_where_it_bears_on_a_hypothesis():
    from stetho.diagnosis.engine import diagnose
    from stetho.diagnosis.signals import NodeContext
    from stetho.results import Result

    results = [
        Result("n1", "ib_port_state", "mlx5_0:1", "fail", "mlx5_0:1 is Down"),
        Result("n1", "drift_shift", "temperature_c", "warn", "temperature_c on 2 subjects"),
        Result("n1", "drift_shift", "gpu0:power_w", "warn", "power_w: gpu0 ..."),
        Result("n1", "drift_counter", "mlx5_0:1:SymbolErrorCounter", "fail",
               "SymbolErrorCounter on mlx5_0:1 grew by 40 in 1 days"),
    ]
    d = diagnose(NodeContext("n1", results), run="r1")
    assert d.top is not None
    assert [r.check for r in d.failing] == ["drift_counter", "ib_port_state"]
    assert "2 drift warning(s) bear on no hypothesis and are not listed" in d.phenomenon
    alone = diagnose(NodeContext("n1", results[1:3]), run="r2")
    assert alone.top is None and len(alone.failing) == 2  # nothing else known: shown


@pytest.mark.xdist_group("faultsim")
def test_simulated_nights_no_false_alarm_and_every_drift_found(fault_bundles, tmp_path):
    """The bench/drift.py figure, smaller: healthy nodes with realistic noise raise no drift
    warning; the four slow real drifts are each found within a few nights."""
    from stetho.checking.nodes import node_facts
    from stetho.evidence.bundle import load
    from stetho.facts import metrics
    from stetho.sim import nights

    prof = profiles.load("h100-sxm-8gpu")
    base = [m.to_row() for m in metrics.extract(node_facts(load(fault_bundles / "healthy.json"),
                                                           prof))]
    drifts = nights.standard_drifts(["d0", "d1", "d2", "d3"], base)
    out = nights.simulate(tmp_path / "n.db", base, prof, ["h0", "h1", "h2"], drifts, nights=24)
    assert out.healthy_warnings == []
    assert all(n is not None and n <= 6 for n in out.detected.values()), out.detected
    assert out.detected["GPU 8 C hotter from night 20"] == 1


def test_a_shifted_ber_still_predicts_its_crossing(hist):
    """The optics rule needs the crossing (drift_trend) even when the shift already warned."""
    key = ("ib", "mlx5_8:1", "pre_fec_ber")
    _past(hist, "n1", {key: [1e-6, 1e-6, 1.1e-6, 1.5e-5, 3e-5, 4.5e-5]}, 6)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 6e-5, ""]], now=NOW)
    assert [r.subject for r in _warns(out)] == ["mlx5_8:1:pre_fec_ber"]
    (trend,) = _warns(out, "drift_trend")
    assert "predicted to reach 0.0001" in trend.message
