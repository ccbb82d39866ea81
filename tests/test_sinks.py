"""Renderers over the canonical results: exact JUnit structure, table grouping, JSON."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from stetho.diagnosis.context import fmt
from stetho.diagnosis.report import measured
from stetho.results import Limit, Result, exit_code, format_value, ordered
from stetho.sinks import json_out, junit, runpage, table

R = [
    Result("n1", "gpu_clocks", "gpu0", "pass", "clocks locked", "SM 1980 / mem 2619", "MHz",
           "SM 1980 / mem 2619 MHz", "±15 MHz"),
    Result("n1", "gpu_clocks", "gpu1", "fail", "clocks not locked: SM 1755 MHz", "SM 1755",
           "MHz", "SM 1980", remediation="nvidia-smi -i 1 -lgc 1980,1980",
           evidence="applications clocks graphics=1755", probe="nvidia-smi -q -x"),
    Result("n2", "cpu_governor", "", "skip", "cpufreq is not exposed"),
    Result("n2", "versions", "driver", "error", "driver version unknown: nvidia-smi missing"),
    Result("n2", "gpu_temperature", "gpu0", "warn", "GPU at 84 C", 84.0, "C"),
]


def test_exit_codes():
    assert exit_code(R) == 1
    assert exit_code([r for r in R if r.status != "fail"]) == 3
    assert exit_code([r for r in R if r.status in ("pass", "warn", "skip")]) == 0


def test_order_is_failures_first():
    assert [r.status for r in ordered(R)] == ["fail", "error", "warn", "skip", "pass"]


def test_junit_suite_per_node_case_per_result():
    root = ET.fromstring(junit.render(R))
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert set(suites) == {"n1", "n2"}
    assert suites["n1"].get("tests") == "2" and suites["n1"].get("failures") == "1"
    assert suites["n2"].get("errors") == "1" and suites["n2"].get("skipped") == "1"
    fail = next(c for c in root.iter("testcase") if c.get("name") == "gpu_clocks[n1/gpu1]")
    assert fail.get("classname") == "stetho.gpu_clocks"
    f = fail.find("failure")
    assert f.get("message") == "clocks not locked: SM 1755 MHz"
    assert "remediation: nvidia-smi -i 1 -lgc 1980,1980" in f.text
    props = {p.get("name"): p.get("value") for p in fail.find("properties")}
    assert props == {"status": "fail", "node": "n1", "subject": "gpu1", "value": "SM 1755",
                     "unit": "MHz", "expected": "SM 1980",
                     "remediation": "nvidia-smi -i 1 -lgc 1980,1980", "probe": "nvidia-smi -q -x"}
    assert fail.find("system-out").text == "applications clocks graphics=1755"
    skip = next(c for c in root.iter("testcase") if c.get("name") == "cpu_governor[n2]")
    assert skip.find("skipped").get("message") == "cpufreq is not exposed"


def test_json_round_trip():
    text = json_out.render(R, command="check")
    doc = json.loads(text)
    assert doc["exit_code"] == 1 and doc["counts"]["fail"] == 1 and doc["command"] == "check"
    assert json_out.load(text) == R


def test_table_groups_passes_and_keeps_problems():
    many = [Result("n1", "gpu_ecc", f"gpu{i}", "pass", "ok") for i in range(8)] + R
    rows = table.rows(many)
    assert rows[0].status == "fail" and rows[0].subject == "gpu1"
    grouped = [r for r in rows if r.check == "gpu_ecc"]
    assert len(grouped) == 1 and grouped[0].subject == "gpu0..gpu7 (8)"
    assert len(table.rows(many, group_ok=False)) == len(many)
    text = table.render(many, width=160)
    assert "FAIL" in text and "nvidia-smi -i 1 -lgc 1980,1980" in text
    assert text.rstrip().endswith("1 fail, 1 error, 1 warn, 1 skip, 9 pass")
    only = table.render(many, show=("fail", "error", "warn"))
    assert "gpu_ecc" not in only and "(10 not shown)" in only


def test_table_shows_markup_literally():
    r = [Result("n1", "x", "", "fail", "[bold]not markup[/bold]")]
    assert "[bold]not markup" in table.render(r)


def _eight_failing_gpus() -> list[Result]:
    fix = "nvidia-smi -lgc 1980,1980 on every GPU, then check nvidia-persistenced is running"
    return [Result("gpu017", "gpu_clocks", f"gpu{g}", "fail",
                   "application clocks 1410 MHz are not locked at the profile's 1980 MHz",
                   1410.0, "MHz", expected="1980 MHz", remediation=fix) for g in range(8)]


def test_table_fits_80_columns_and_keeps_every_word():
    results = _eight_failing_gpus() + [Result("gpu-node-0123.cluster.example", "cpu_governor",
                                              "cpu0", "fail", "governor is powersave")]
    for width in (60, 80, 100):
        out = table.render(results, width=width)
        assert max(len(line) for line in out.splitlines()) <= width, (width, out)
        words = set(out.split())  # wrapped, never cut: every word of the message is there
        assert set("application clocks 1410 MHz are not locked at the profile's".split()) <= words
        if width >= 80:  # the node's name, what a person acts on, is not folded
            assert "gpu-node-0123.cluster.example" in out


def test_one_remediation_per_check_not_per_row():
    out = table.render(_eight_failing_gpus(), width=80)
    assert out.startswith("What to do")  # leads with what to do
    assert " ".join(out.split()).count("then check nvidia-persistenced") == 1
    assert sum(1 for line in out.splitlines() if "FAIL" in line) == 8


def _ber_result() -> Result:
    """A failing pre-FEC BER as ib_link_ber records it: the threshold is the Limit's words."""
    limit = Limit(1e-05, "<", note="warns from 1e-07")
    return Result("n1", "ib_link_ber", "mlx5_0:1", "fail", "pre-FEC BER 4e-05 >= 1e-05",
                  4e-05, "BER", expected="< 1e-07", threshold=limit.describe(),
                  limit=limit.value, limit_op=limit.op)


@pytest.mark.parametrize(("value", "text"), [
    (4e-05, "4e-05"), (1e-07, "1e-07"), (2.4e-04, "0.00024"), (1.5e-254, "1.5e-254"),
    (0.0312, "0.0312"), (0.5, "0.5"), (0.0, "0"), (-0.004, "-0.004"),
    (1980.0, "1980"), (412.5, "412.5"), (412.53, "412.53"), (123456.789, "123456.79"),
    (7, "7"),
])
def test_values_keep_their_magnitude(value, text):
    """BER-sized numbers keep their significant digits; normal and large ones read as before."""
    assert format_value(value, None) == text
    assert format_value(value, "BER") == f"{text} BER"


def test_a_small_ber_and_its_threshold_read_right_in_every_renderer():
    r = _ber_result()
    assert r.threshold == "< 1e-05 (warns from 1e-07)"
    doc = json.loads(json_out.render([r], command="check"))["results"][0]
    assert doc["threshold"] == "< 1e-05 (warns from 1e-07)"
    assert doc["value"] == 4e-05 and doc["limit"] == 1e-05  # the numbers stay numbers
    (row,) = table.rows([r])
    assert row.value == "4e-05 BER (expected < 1e-07)"
    assert "4e-05 BER" in table.render([r], width=160)
    case = next(ET.fromstring(junit.render([r])).iter("testcase"))
    text = case.find("failure").text
    assert "value: 4e-05 BER" in text and "threshold: < 1e-05 (warns from 1e-07)" in text
    assert "<td>4e-05 BER (expected &lt; 1e-07)</td>" in runpage.render([r], title="run")
    assert measured(r) == "4e-05 BER vs < 1e-07 BER"
    assert fmt(4e-05, "BER") == "4e-05 BER" and fmt("worst 4e-05", None) == "worst 4e-05"



def test_junit_a_failure_or_error_without_any_text_still_fails_in_ci():
    """junit-xml dropped a failure element with no message and no detail, so CI showed a
    failing result as passed: every fail and error is its element, counted."""
    doc = ET.fromstring(junit.render([Result("n1", "gpu_count", "", "fail", ""),
                                      Result("n1", "gpu_ecc", "", "error", ""),
                                      Result("n1", "gpu_xid", "", "pass", "")]).encode())
    suite = doc.find("testsuite")
    assert suite is not None and (suite.get("failures"), suite.get("errors")) == ("1", "1")
    assert doc.get("failures") == "1" and doc.get("errors") == "1"
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert cases["gpu_count[n1]"].find("failure") is not None
    assert cases["gpu_ecc[n1]"].find("error") is not None
    assert cases["gpu_xid[n1]"].find("failure") is None
