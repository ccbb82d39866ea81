"""Alert rules from the gate policies: the shipped file is the generated one, promtool accepts
it, and promtool's own rule unit tests show each alert fires when, and only when, it should."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from stetho.gate import policy as gatepolicy
from stetho.gate import promrules
from tests.services import missing, which

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "contrib" / "prometheus" / "stetho.rules.yml"


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    reason = missing("promtool")
    if reason:
        pytest.skip(reason)
    return subprocess.run([str(which("promtool")), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=60)


def test_shipped_rules_are_generated_from_the_shipped_policies():
    policies = promrules.load_policies(REPO / "gates")
    assert {p.name for p in policies} == {"nightly", "pre-job", "release"}
    assert SHIPPED.read_text() == promrules.generate(policies), (
        "regenerate: stetho export prometheus-rules gates/ > contrib/prometheus/stetho.rules.yml")


def test_a_group_per_policy_with_blocked_failing_and_stale_rules():
    doc = yaml.safe_load(SHIPPED.read_text())
    groups = {g["name"]: [r["alert"] for r in g["rules"]] for g in doc["groups"]}
    for name in ("stetho-nightly", "stetho-pre-job", "stetho-release"):
        assert {"StethoNodeBlocked", "StethoCheckFailing", "StethoResultsStale"} <= set(
            groups[name])
    assert "StethoBusbwUnderBaseline" in groups["stetho-release"]  # max_drop_pct: 5


def test_promtool_accepts_the_shipped_rules(tmp_path):
    proc = promtool("check", "rules", str(SHIPPED), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 10 rules found" in proc.stdout


RULES = yaml.safe_load(SHIPPED.read_text())


def annotations(alert: str, labels: dict[str, str], value: str = "") -> dict[str, str]:
    """The shipped rule's annotations as Prometheus renders them for these labels."""
    rule = next(r for g in RULES["groups"] for r in g["rules"]
                if r["alert"] == alert and r["labels"]["policy"] == labels["policy"])
    out = {}
    for key, text in rule["annotations"].items():
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), text)
        out[key] = text.replace("{{ $value }}", value)
    return out


def expect(alert: str, labels: dict[str, str], value: str = "") -> dict[str, object]:
    return {"exp_labels": labels, "exp_annotations": annotations(alert, labels, value)}


def _series(labels: dict[str, str], values: str, name: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def test_alerts_fire_when_they_should_promtool_unit_test(tmp_path):
    """promtool's rule tests evaluate the shipped rules over synthetic series: node02 fails
    cpu_governor (every policy counts it), node03 has an error (only pre-job blocks on it),
    node04's failing nccl_busbw is outside pre-job's checks, node05 only skips; the gate
    blocks node02; node02's busbw is 20% under baseline; the last run is 27 h old."""
    base = {"command": "check", "instance": "n:9100", "job": "stetho"}
    status = "stetho_check_status"
    series = [
        _series({**base, "node": "node02", "check": "cpu_governor", "subject": ""}, "2x1700",
                status),
        _series({**base, "node": "node03", "check": "gpu_count", "subject": ""}, "3x1700", status),
        _series({**base, "node": "node04", "check": "nccl_busbw", "subject": "ar@1GiB"},
                "2x1700", status),
        _series({**base, "node": "node05", "check": "cpu_governor", "subject": ""}, "4x1700",
                status),
        _series({"command": "gate", "instance": "n:9100", "job": "stetho",
                 "policy": "pre-job", "node": "node02"}, "1x1700", "stetho_gate_blocked"),
        _series({"command": "gate", "instance": "n:9100", "job": "stetho",
                 "policy": "pre-job", "node": "node01"}, "0x1700", "stetho_gate_blocked"),
        _series({**base, "node": "node02", "check": "nccl_busbw", "subject": "ar@1GiB",
                 "metric": "bandwidth", "unit": "bytes_per_second"}, "320e9x1700",
                "stetho_check_value"),
        _series({**base, "node": "node02", "check": "nccl_busbw", "subject": "ar@1GiB",
                 "metric": "bandwidth", "unit": "bytes_per_second", "kind": "reference"},
                "400e9x1700", "stetho_check_threshold"),
        _series({**base, "node": "node01", "check": "nccl_busbw", "subject": "ar@1GiB",
                 "metric": "bandwidth", "unit": "bytes_per_second"}, "390e9x1700",
                "stetho_check_value"),
        _series({**base, "node": "node01", "check": "nccl_busbw", "subject": "ar@1GiB",
                 "metric": "bandwidth", "unit": "bytes_per_second", "kind": "reference"},
                "400e9x1700", "stetho_check_threshold"),
        _series({**base}, "0x1700", "stetho_run_timestamp_seconds"),
    ]

    def failing(*cases: tuple[str, str, str]) -> dict[str, object]:
        """promtool lists every alert of a name together, whatever its group."""
        return {"eval_time": "5m", "alertname": "StethoCheckFailing", "exp_alerts": [
            expect("StethoCheckFailing", {"node": n, "check": c, "policy": policy,
                                          "severity": "warning"}, "1")
            for policy, n, c in cases]}

    def stale(at: str, fires: bool) -> dict[str, object]:
        return {"eval_time": at, "alertname": "StethoResultsStale", "exp_alerts": [
            expect("StethoResultsStale", {**base, "policy": p, "severity": "warning"})
            for p in ("nightly", "release", "pre-job")
            if fires or (p == "pre-job" and at != "5m")]}

    tests = [{
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            failing(("nightly", "node02", "cpu_governor"), ("nightly", "node04", "nccl_busbw"),
                    ("release", "node02", "cpu_governor"), ("release", "node04", "nccl_busbw"),
                    ("pre-job", "node02", "cpu_governor"), ("pre-job", "node03", "gpu_count")),
            {"eval_time": "5m", "alertname": "StethoNodeBlocked", "exp_alerts": [
                expect("StethoNodeBlocked", {"node": "node02", "policy": "pre-job",
                                             "severity": "critical"})]},
            {"eval_time": "5m", "alertname": "StethoBusbwUnderBaseline", "exp_alerts": [
                expect("StethoBusbwUnderBaseline", {
                    **base, "node": "node02", "check": "nccl_busbw", "subject": "ar@1GiB",
                    "metric": "bandwidth", "unit": "bytes_per_second", "policy": "release",
                    "severity": "warning"})]},
            stale("5m", False),   # 5 min old: fresh for everyone
            stale("7h", False),   # past pre-job's 6 h freshness only
            stale("27h", True),   # past the 26 h of the always-live policies too
        ],
    }]
    case = tmp_path / "stetho_rules_test.yml"
    case.write_text(json.dumps({"rule_files": [str(SHIPPED)], "evaluation_interval": "1m",
                                "tests": tests}))
    proc = promtool("test", "rules", str(case), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_absent_results_are_stale_too(tmp_path):
    """Fail closed: no stetho metric at all is an alert, not silence."""
    case = tmp_path / "absent_test.yml"
    case.write_text(json.dumps({"rule_files": [str(SHIPPED)], "evaluation_interval": "1m",
                                "tests": [{"interval": "1m", "input_series": [
                                    {"series": 'up{job="stetho"}', "values": "1x30"}],
                                    "alert_rule_test": [{
                                        "eval_time": "20m", "alertname": "StethoResultsStale",
                                        "exp_alerts": [expect("StethoResultsStale", {
                                            "policy": p, "severity": "warning"}) for p in
                                            ("nightly", "pre-job", "release")]}]}]}))
    proc = promtool("test", "rules", str(case), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _policy(tmp_path: Path, text: str) -> gatepolicy.GatePolicy:
    path = tmp_path / "p.yml"
    path.write_text(text)
    return gatepolicy.load(str(path))


def _odd(p: gatepolicy.GatePolicy, **names: tuple[str, ...]) -> gatepolicy.GatePolicy:
    """A policy whose check names need escaping: policies themselves only name catalogue
    checks, but the generator must not trust that (a site check module may be odd)."""
    return dataclasses.replace(p, **names)


def test_selector_counts_what_the_policy_counts(tmp_path):
    p = _odd(_policy(tmp_path, "policy: odd\nchecks: [gpu_ecc]\nblock_on: [warn]\n"),
             checks=("a.b", "c"), exclude=("c",))
    sel = promrules.check_selector(p)
    assert sel == ('check=~"a\\\\.b|c|gate|sweep",check!~"c"')
    group = promrules.rules_for(p)
    failing = next(r for r in group["rules"] if r["alert"] == "StethoCheckFailing")
    assert failing["expr"] == f"count by (node, check) (stetho_check_status{{{sel}}} == 1) > 0"
    assert promrules.check_selector(_policy(tmp_path, "policy: all\n")) == ""


def test_every_blocking_status_is_matched(tmp_path):
    p = _policy(tmp_path, "policy: strict\nblock_on: [fail, error, warn]\n")
    failing = next(r for r in promrules.rules_for(p)["rules"] if r["alert"] ==
                   "StethoCheckFailing")
    assert failing["expr"] == ("count by (node, check) (stetho_check_status == 2 or "
                               "stetho_check_status == 3 or stetho_check_status == 1) > 0")


def test_generated_text_is_valid_for_promtool_with_odd_names(tmp_path):
    p = _policy(tmp_path, 'policy: weird\nchecks: [gpu_ecc]\nblock_on: [fail]\n'
                'freshness: 90m\ntighten:\n  gpu_ecc: {max_drop_pct: 2.5}\n')
    # a policy file may no longer name itself so (tests/test_config_values.py): the generator
    # still must not trust that
    p = dataclasses.replace(p, name='we"ird')
    p = _odd(p, checks=("x\\y", "a|b"))
    out = tmp_path / "rules.yml"
    out.write_text(promrules.generate([p]))
    proc = promtool("check", "rules", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "> 5400 or absent" in out.read_text()
