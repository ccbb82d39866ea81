"""Alert rules from the gate policies: the shipped file is the generated one, promtool accepts
it, and promtool's own rule unit tests (contrib/prometheus/stetho.rules.test.yml) show what
pages and how often: one alert per node and check whatever the number of policies, one fleet
alert, busbw per node, the README's joins with dcgm-exporter and node_exporter."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stetho.gate import policy as gatepolicy
from stetho.gate import promrules
from tests.services import missing, which

REPO = Path(__file__).resolve().parent.parent
CONTRIB = REPO / "contrib" / "prometheus"
SHIPPED = CONTRIB / "stetho.rules.yml"
UNIT_TESTS = CONTRIB / "stetho.rules.test.yml"
ALERTMANAGER = CONTRIB / "alertmanager.yml"


def tool(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    reason = missing(name)
    if reason:
        pytest.skip(reason)
    return subprocess.run([str(which(name)), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return tool("promtool", *args, cwd=cwd)


def shipped_policies() -> list[gatepolicy.GatePolicy]:
    return promrules.load_policies(REPO / "gates")


def test_shipped_rules_are_generated_from_the_shipped_policies():
    policies = shipped_policies()
    assert {p.name for p in policies} == {"nightly", "pre-job", "release"}
    assert SHIPPED.read_text() == promrules.generate(policies), (
        "regenerate: stetho export prometheus-rules gates/ > contrib/prometheus/stetho.rules.yml")


def test_the_cli_writes_the_shipped_rules(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "stetho", "export", "prometheus-rules",
                           str(REPO / "gates")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == SHIPPED.read_text()


def test_promtool_accepts_the_shipped_rules(tmp_path):
    proc = promtool("check", "rules", str(SHIPPED), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 11 rules found" in proc.stdout


def test_shipped_rule_unit_tests_pass(tmp_path):
    """12 of 40 nodes failing cpu_governor: 12 StethoCheckFailing (not 36, one per policy) and
    one StethoFleetCheckFailing, which fires first; busbw 20% under baseline on four message
    sizes: one alert for the node; an error pre-job blocks on: one StethoCheckUnevaluated; a
    node blocked by three policies: one StethoNodeBlocked; stale results: once per command."""
    proc = promtool("test", "rules", str(UNIT_TESTS), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_unit_tests_fail_when_a_check_pages_once_per_policy(tmp_path):
    """The unit tests have teeth: rules with a StethoCheckFailing per policy (as before) fail
    them."""
    doc = yaml.safe_load(SHIPPED.read_text())
    group = doc["groups"][0]
    failing = next(r for r in group["rules"] if r.get("alert") == "StethoCheckFailing")
    for name in ("nightly", "pre-job", "release"):
        group["rules"].append({**failing, "labels": {"policy": name}})
    group["rules"].remove(failing)
    (tmp_path / "stetho.rules.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "t.yml").write_text(UNIT_TESTS.read_text())
    proc = promtool("test", "rules", "t.yml", cwd=tmp_path)
    assert proc.returncode != 0 and "StethoCheckFailing" in proc.stdout + proc.stderr


def _matches(matcher: str, name: str) -> bool:
    if not matcher:
        return True
    m = re.fullmatch(r'check(=~|!~)"(.*)"', matcher)
    assert m, matcher
    hit = re.fullmatch(m.group(2).replace("\\\\", "\\"), name) is not None
    return hit if m.group(1) == "=~" else not hit


def test_check_classes_cover_every_check_once_with_the_policies_counting_it():
    policies = shipped_policies()
    classes = promrules.check_classes(policies)
    from stetho.gate import catalogue

    names = sorted(catalogue.load().every) + ["a_site_check"]
    for name in names:
        hits = [counting for matcher, counting in classes if _matches(matcher, name)]
        expected = tuple(p for p in policies if p.counts(name))
        assert hits == [expected], name


def test_recorded_statuses_are_exclusive_worst_first(tmp_path):
    path = tmp_path / "p.yml"
    path.write_text("policy: strict\nblock_on: [warn, error, fail]\n")
    rules = promrules.blocking_rules([gatepolicy.load(str(path))])
    assert [r["labels"]["status"] for r in rules] == ["fail", "error", "warn"]  # type: ignore
    group = "count by (node, check) (group by (node, check, subject) (stetho_check_status"
    assert rules[0]["expr"] == f"{group} == 2))"
    assert rules[2]["expr"] == (f"{group} == 1)) unless on (node, check) "
                                "(stetho_check_status == 2 or stetho_check_status == 3)")
    assert rules[0]["labels"] == {"status": "fail", "policies": "strict",
                                  "severity": "critical"}


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
    assert promrules.check_selector(_policy(tmp_path, "policy: all\n")) == ""


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


def _status(node: str, check: str, code: int) -> dict[str, str]:
    return {"series": f'stetho_check_status{{node="{node}",check="{check}",subject=""}}',
            "values": f"{code}x30"}


def test_the_fleet_threshold_and_hold_are_options(tmp_path):
    """fleet_nodes=4 (and a share no fleet reaches): 4 of 40 nodes failing is fleet-wide,
    3 is not; with node_for_s=0 the per-node alerts fire at once."""
    opt = promrules.Options(fleet_nodes=4, fleet_share=1.0, node_for_s=0, fleet_for_s=0)
    (tmp_path / "rules.yml").write_text(promrules.generate(shipped_policies(), opt))
    series = [_status(f"n{i:02d}", "gpu_ecc", 2 if i < 4 else 0) for i in range(40)]
    series += [_status(f"n{i:02d}", "gpu_xid", 2 if i < 3 else 0) for i in range(40)]
    fleet = {"eval_time": "1m", "alertname": "StethoFleetCheckFailing", "exp_alerts": [{
        "exp_labels": {"check": "gpu_ecc", "severity": "critical", "scope": "fleet"},
        "exp_annotations": {
            "summary": "stetho check gpu_ecc blocks on 4 nodes",
            "description": promrules.fleet_rule(opt)["annotations"]["description"]}}]}  # type: ignore
    failing = {"eval_time": "1m", "alertname": "StethoCheckFailing", "exp_alerts": [{
        "exp_labels": {"node": f"n{i:02d}", "check": c, "status": "fail",
                       "policies": "nightly,pre-job,release", "severity": "critical"},
        "exp_annotations": {
            "summary": f"stetho check {c} is fail on n{i:02d} (1 subjects)",
            "description": ("Policies nightly,pre-job,release block on it. The diagnosis "
                            "report of the run says what to do.")}}
        for c, n in (("gpu_ecc", 4), ("gpu_xid", 3)) for i in range(n)]}
    (tmp_path / "t.yml").write_text(json.dumps({
        "rule_files": ["rules.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series,
                   "alert_rule_test": [fleet, failing]}]}))
    proc = promtool("test", "rules", "t.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "for: 0s" in (tmp_path / "rules.yml").read_text()


def test_stale_takes_the_longest_freshness_a_policy_needs(tmp_path):
    six = _policy(tmp_path, "policy: a\nfreshness: 6h\n")
    live = dataclasses.replace(six, name="b", freshness_s=0.0)
    assert "> 21600 or" in promrules.stale_rule([six], promrules.Options())["expr"]  # type: ignore
    expr = promrules.stale_rule([six, live], promrules.Options(stale_after_s=7200))["expr"]
    assert "min by (command)" in expr and "> 21600 or" in expr  # type: ignore


# -- Alertmanager: the inhibit rules name the generated alerts and labels both carry ------------

def _alerts_of(rules: list[dict[str, object]]) -> set[str]:
    return {str(r["alert"]) for r in rules if "alert" in r}


def _names_in(matchers: list[str]) -> set[str]:
    (m,) = matchers
    got = re.fullmatch(r'alertname(=~|=)"(.*)"', m)
    assert got, m
    return set(got.group(2).split("|"))


def test_inhibit_rules_name_the_generated_alerts_and_their_shared_labels():
    doc = yaml.safe_load(ALERTMANAGER.read_text())
    rules = promrules.rules(shipped_policies())
    alerts = _alerts_of(rules) | {"StethoValueUnderBaseline"}  # no shipped policy needs it
    fleet, blocked = doc["inhibit_rules"]
    assert _names_in(fleet["source_matchers"]) == {"StethoFleetCheckFailing"}
    assert _names_in(fleet["target_matchers"]) == set(promrules.PER_NODE_ALERTS) <= alerts
    assert fleet["equal"] == ["check"]
    assert _names_in(blocked["source_matchers"]) == set(promrules.PER_NODE_ALERTS)
    assert _names_in(blocked["target_matchers"]) == {"StethoNodeBlocked"}
    assert blocked["equal"] == ["node"]
    # the labels `equal` compares are those the alerts' expressions keep
    by = {str(r.get("alert") or r.get("record")): str(r["expr"]) for r in rules}
    assert by["StethoFleetCheckFailing"].startswith("count by (check) (")
    assert all(e.startswith("count by (node, check) (group by (node, check, subject) (")
               for r in rules
               if r.get("record") == promrules.BLOCKING for e in [str(r["expr"])])
    assert by[promrules.BASELINE_RATIO].startswith("min by (node, check) (")
    assert by["StethoNodeBlocked"].startswith("max by (node) (")


def test_amtool_accepts_the_shipped_alertmanager_config(tmp_path):
    proc = tool("amtool", "check-config", str(ALERTMANAGER), cwd=tmp_path)
    assert proc.returncode == 0 and "2 inhibit rules" in proc.stdout, proc.stdout + proc.stderr


def test_readme_joins_are_the_unit_tested_ones():
    """Every PromQL block of contrib/prometheus/README.md is a promql_expr_test of the shipped
    unit tests (and so runs against dcgm-exporter- and node_exporter-shaped series)."""
    readme = (CONTRIB / "README.md").read_text()
    shown = [" ".join(b.split()) for b in re.findall(r"^```promql\n(.*?)^```", readme,
                                                        re.M | re.S)]
    tested = {" ".join(t["expr"].split()) for case in yaml.safe_load(UNIT_TESTS.read_text())
              ["tests"] for t in case.get("promql_expr_test", [])}
    assert len(shown) >= 3 and set(shown) <= tested, set(shown) - tested
