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
    _past(hist, "n1", {key: [1e-6, 2e-6, 3e-6, 4e-6, 5e-6]}, 5)
    out = drift.evaluate(hist, "n1", PROFILE, [[*key, 6e-6, ""]], now=NOW)
    (warn,) = [r for r in _by(out, "drift_trend") if r.status == "warn"]
    assert warn.subject == "mlx5_8:1:pre_fec_ber" and "predicted to reach 1e-05" in warn.message


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
    assert rows["drift_counter"]["status"] == "pass"
    assert rows["drift_shift"]["status"] == "skip"
    with History(db) as h:
        assert h.conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
        series = h.series_of("healthy", metric="busbw_gbps")
        assert len(series) == 14  # 1 MiB .. 8 GiB
