"""The node_exporter textfile: valid exposition text (read back with prometheus_client's
parser), the documented names, labels and units, hostile label values, and an atomic write."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stetho.results import Result
from stetho.sinks import prometheus as P
from tests.services import sim_results

STARTED = 1_700_000_000.5
LABELS = {
    "stetho_check_status": {"command", "node", "check", "subject"},
    "stetho_check_value": {"command", "node", "check", "subject", "metric", "unit"},
    "stetho_check_threshold": {"command", "node", "check", "subject", "metric", "unit", "kind"},
    "stetho_run_timestamp_seconds": {"command"},
    "stetho_run_duration_seconds": {"command"},
    "stetho_build_info": {"command", "version"},
    "stetho_gate_blocked": {"command", "policy", "mode", "node"},
    "stetho_bench_value": {"command", "node", "benchmark", "metric", "unit"},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[Result]:
    return sim_results(tmp_path_factory.mktemp("promsim"))


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    fams = {}
    for fam in text_string_to_metric_families(text):
        assert fam.type == "gauge", fam.name
        assert fam.documentation, fam.name
        name = fam.name if fam.name in LABELS else fam.name + "_info"
        fams[name] = [(dict(s.labels), s.value) for s in fam.samples]
    return fams


def sample(fams: dict, name: str, **labels: str) -> list[float]:
    return [v for lab, v in fams[name] if all(lab.get(k) == x for k, x in labels.items())]


def test_real_run_is_valid_exposition_with_documented_labels(results):
    text = P.render(results, run_id="run-1", started_at=STARTED, duration_s=42.25)
    fams = parse(text)
    assert set(fams) == set(LABELS) - {"stetho_gate_blocked", "stetho_bench_value"}
    for name, samples in fams.items():
        for labels, _ in samples:
            assert set(labels) == LABELS[name], (name, labels)
    assert sample(fams, "stetho_check_status", node="node02", check="cpu_governor") == [2.0]
    assert sample(fams, "stetho_check_status", node="node01", check="cpu_governor") == [0.0]
    assert sample(fams, "stetho_check_status", node="node03", check="gpu_count") == [3.0]
    statuses = {v for _, v in fams["stetho_check_status"]}
    assert statuses <= {0.0, 1.0, 2.0, 3.0, 4.0} and {0.0, 2.0, 3.0, 4.0} <= statuses
    # one status per (node, check, subject), every result counted
    assert len(fams["stetho_check_status"]) == len({(r.node, r.check, r.subject)
                                                    for r in results})
    assert sample(fams, "stetho_run_timestamp_seconds") == [STARTED]
    assert sample(fams, "stetho_run_duration_seconds") == [42.25]
    assert "0 pass, 1 warn, 2 fail, 3 error" in text and "4 skip" in text


def test_values_in_base_units_with_their_thresholds(results):
    fams = parse(P.render(results, run_id="r", started_at=STARTED, duration_s=1))
    busbw = next(r for r in results if r.node == "node02" and r.check == "nccl_busbw"
                 and r.status == "fail")
    labels = {"node": "node02", "check": "nccl_busbw", "subject": busbw.subject}
    assert sample(fams, "stetho_check_value", unit="bytes_per_second", metric="bandwidth",
                  **labels) == [pytest.approx(busbw.value * 1e9)]
    assert sample(fams, "stetho_check_threshold", kind="reference", **labels) == [
        pytest.approx(busbw.reference * 1e9)]
    floor = float(busbw.threshold.split()[1])  # ">= 378.1 GB/s (-5%)"
    assert sample(fams, "stetho_check_threshold", kind="threshold", **labels) == [
        pytest.approx(floor * 1e9)]
    temp = next(r for r in results if r.node == "node01" and r.check == "gpu_temperature")
    assert sample(fams, "stetho_check_value", node="node01", check="gpu_temperature",
                  subject=temp.subject, unit="celsius") == [float(temp.value)]
    assert sample(fams, "stetho_check_threshold", node="node01", check="gpu_temperature",
                  subject=temp.subject, kind="threshold") == [87.0]  # "fail at 87 C"
    # counts keep their number and say what is counted
    assert sample(fams, "stetho_check_value", node="node01", check="gpu_count",
                  metric="gpus", unit="") == [8.0]
    # a value that is text (clocks "SM 1980 / mem 2619") is a status only, never a 0
    assert not sample(fams, "stetho_check_value", check="gpu_clocks")
    # node03 could not read nvidia-smi: unknown, so no value at all
    assert not sample(fams, "stetho_check_value", node="node03", check="gpu_count")


def test_hostile_label_values_round_trip():
    names = ['a"b', "back\\slash", "new\nline", "tab\there", "ünï{}=,", 'x\\"y\\n']
    results = [Result(n, "cpu_governor", s, "fail", "m") for n in names for s in ("", "s\"1")]
    text = P.render(results, run_id='r"\n', started_at=0, duration_s=0)
    fams = parse(text)
    got = {(lab["node"], lab["subject"]) for lab, _ in fams["stetho_check_status"]}
    assert got == {(n, s) for n in names for s in ("", 's"1')}
    assert "\nr" not in text.split("\n", 1)[0]  # the run id's newline did not end its comment


def test_undecodable_name_still_gives_a_valid_file():
    text = P.render([Result("node\udcff", "c", "", "pass")], run_id="r", started_at=0,
                    duration_s=0)
    text.encode("utf-8")
    assert sample(parse(text), "stetho_check_status", check="c") == [0.0]


def test_no_unbounded_label_values():
    """Messages, evidence, remediation and the run id never become label values."""
    rs = [Result(f"n{i}", "gpu_temperature", "gpu0", "fail", f"MSG-{i} 91 C", value=91.0,
                 unit="C", expected="< 80 C", threshold="fail at 87 C",
                 remediation=f"REM-{i}", evidence=f"EVI-{i}") for i in range(20)]
    text = P.render(rs, run_id="RUN-1234", started_at=0, duration_s=0)
    values = {v for fam in parse(text).values() for lab, _ in fam for v in lab.values()}
    assert not any(x.startswith(("MSG-", "REM-", "EVI-", "RUN-")) for x in values)
    assert {v for v in values if not v.startswith("n")} <= {
        "check", "gpu_temperature", "gpu0", "temperature", "celsius", "expected", "threshold",
        P.__version__}


def test_one_series_per_key_keeps_the_worse():
    rs = [Result("n", "drift_shift", "", "pass", value=3, unit="metrics"),
          Result("n", "drift_shift", "", "warn"), Result("n", "x", "", "skip"),
          Result("n", "x", "", "error"), Result("n", "y", "", "bogus")]
    fams = parse(P.render(rs, run_id="r", started_at=0, duration_s=0))
    assert sample(fams, "stetho_check_status", check="drift_shift") == [1.0]
    assert sample(fams, "stetho_check_status", check="x") == [3.0]
    assert sample(fams, "stetho_check_status", check="y") == [3.0]  # unknown: error


def test_any_iterable_and_unhashable_expectations():
    """render takes a generator as well as a list; an expectation that is a list (not one
    number, and not hashable for the threshold cache) writes no threshold."""
    rs = [Result("n", "a", "", "pass", value=5, unit="C", expected=[1, 2], threshold="< 80 C"),
          Result("n", "a", "", "fail", value=90, unit="C", expected=[1, 2], threshold="< 80 C")]
    text = P.render(iter(rs), run_id="r", started_at=0, duration_s=0)
    fams = parse(text)
    assert sample(fams, "stetho_check_status", check="a") == [2.0]
    assert sample(fams, "stetho_check_value", check="a") == [90.0]
    assert [(lab["kind"], x) for lab, x in fams["stetho_check_threshold"]] == [
        ("threshold", 80.0)]


def test_special_numbers_and_booleans():
    rs = [Result("n", "a", "", "pass", value=float("nan")), Result("n", "b", "", "pass",
          value=True), Result("n", "c", "", "pass", value=float("inf"), unit="C"),
          Result("n", "d", "", "pass", value=[1, 2]), Result("n", "e", "", "pass", value=None)]
    text = P.render(rs, run_id="r", started_at=0, duration_s=0)
    fams = parse(text)
    v = {lab["check"]: x for lab, x in fams["stetho_check_value"]}
    assert set(v) == {"a", "b", "c"} and v["a"] != v["a"] and v["b"] == 1.0
    assert v["c"] == float("inf")


@pytest.mark.parametrize("text,unit,expected", [
    ("fail at 87 C", "C", 87.0), ("< 80 C", "C", 80.0), (">= 378.1 GB/s (-5%)", "GB/s", 378.1e9),
    ("398 GB/s (baseline)", "GB/s", 398e9), ("< 1e-07", "BER", 1e-7), (0, "GPUs", 0.0),
    ("±15 MHz", "MHz", None), ("SymbolErrorCounter<=10, LinkDowned<=0", "errors", None),
    ("80 F", "C", None), ("performance", None, None), ("~12.5 (own 7-day median)", "%", 0.125),
])
def test_numbers_in_expectations(text, unit, expected):
    u = P.unit_of(unit)
    got = P.number_in(text, u)
    assert (got * u.scale if got is not None else None) == (
        pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize("unit,label,scale,metric", [
    ("GB/s avg busbw", "bytes_per_second", 1e9, "avg_busbw"), ("MHz", "hertz", 1e6, "frequency"),
    ("% swap used", "ratio", 0.01, "swap_used"), ("links up", "", 1.0, "links_up"),
    ("per day", "per_second", 1 / 86400, "rate"), (None, "", 1.0, "value"),
    ("Gb/s", "bytes_per_second", 1.25e8, "bandwidth"), ("uncorrectable ECC errors", "", 1.0,
                                                        "uncorrectable_ecc_errors"),
])
def test_units_follow_prometheus_base_units(unit, label, scale, metric):
    u = P.unit_of(unit)
    assert (u.label, u.metric) == (label, metric) and u.scale == pytest.approx(scale)


def test_gate_and_bench_metrics():
    text = P.render([], run_id="r", started_at=0, duration_s=0, command="gate",
                    gate={"pre-job": {"node02": True, "node01": False}},
                    bench=[("node01", "fio", "read_bw", "MiB/s", 1000.0),
                           ("node01", "fio", "read_iops", "IOPS", 250000),
                           ("node01", "all_reduce", "busbw", "GB/s", 480.5)])
    fams = parse(text)
    assert sample(fams, "stetho_gate_blocked", policy="pre-job", node="node02") == [1.0]
    assert sample(fams, "stetho_gate_blocked", policy="pre-job", node="node01") == [0.0]
    assert sample(fams, "stetho_bench_value", metric="read_bw",
                  unit="bytes_per_second") == [1000.0 * 2 ** 20]
    assert sample(fams, "stetho_bench_value", metric="read_iops", unit="iops") == [250000.0]
    assert sample(fams, "stetho_bench_value", metric="busbw") == [480.5e9]
    assert {lab["command"] for fam in fams.values() for lab, _ in fam} == {"gate"}
    assert "stetho_check_status" not in fams


def test_write_is_atomic_and_readable(tmp_path):
    target = tmp_path / "stetho.prom"
    small = P.render([Result("n", "c", "", "pass")], run_id="a", started_at=0, duration_s=0)
    big = P.render([Result(f"n{i}", "c", f"s{j}", "fail") for i in range(200) for j in range(20)],
                   run_id="b", started_at=0, duration_s=0)
    P.write(target, small)
    seen: set[str] = set()
    bad: list[str] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            text = target.read_text()
            (seen.add if text in (small, big) else bad.append)(text[-80:])

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(60):
            P.write(target, big if i % 2 == 0 else small)
    finally:
        done.set()
        t.join()
    assert not bad, f"a reader saw a partial file: {bad[:3]}"
    assert target.read_text() == small
    assert (target.stat().st_mode & 0o777) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["stetho.prom"]


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "stetho.prom"
    P.write(target, "old\n")
    with pytest.raises(TypeError):
        P.write(target, 123)  # type: ignore[arg-type]
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["stetho.prom"]
    with pytest.raises(FileNotFoundError):
        P.write(tmp_path / "missing" / "x.prom", "x\n")


def test_temp_file_is_invisible_to_the_textfile_collector(tmp_path, monkeypatch):
    """node_exporter reads *.prom only: the temp name must not end in .prom."""
    names: list[str] = []
    real = os.replace

    def spy(src: str, dst: str) -> None:
        names.append(Path(src).name)
        real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    P.write(tmp_path / "stetho.prom", "x 1\n")
    assert names and all(not n.endswith(".prom") and n.startswith(".") for n in names)
