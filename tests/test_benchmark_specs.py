"""Benchmark definitions: every shipped file loads, every metric reads a real sample, and every
mistake a site can make in a benchmark file is an error naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from stetho.benchmarks import spec
from stetho.errors import ConfigError
from tests.conftest import REAL, REPO

REC = REPO / "fixtures" / "recorded"
F10, F12 = REAL / "10-fio-perftest", REAL / "12-gpu-bench"
FIO, IPERF = REC / "fio-debian12-vm", REC / "iperf3-debian12-vm"
NCCL_ROCE = REAL / "03-nccl" / "allreduce-2node-16xA100-40GB-roce-oke.txt"
NCCL_GATHER = REAL / "13-nccl-collectives" / "all_gather-2node-2xGB10-roce-nccltests2.18.5.txt"
NCCL_BCAST_OLD = (REAL / "13-nccl-collectives"
                  / "broadcast-1node-8xA100-40GB-oldformat-root-col.txt")
DCGM = [F12 / "dcgmi-diag-r1-j-gb10-dcgm4.2.3-software-fail.json",
        F12 / "dcgmi-diag-r1-j-8gpu-dcgm3.1.0-pass-null-entries-warning-prefix.json",
        REAL / "08-dcgm" / "dcgmi-diag-r3-8xH100-fail-cuinit-no-fabricmanager.txt"]

#: shipped benchmark -> the real outputs its metrics are read from (no reduce_scatter or alltoall
#: output in the current format was found: they share nccl_tests' output type with all_reduce)
SAMPLES: dict[str, list[Path]] = {
    "nccl-all-reduce": [NCCL_ROCE],
    "nccl-all-gather": [NCCL_GATHER],
    "nccl-reduce-scatter": [NCCL_ROCE, NCCL_GATHER],
    "nccl-alltoall": [NCCL_ROCE, NCCL_GATHER],
    "nccl-broadcast": [NCCL_ROCE],
    "fio-randread-4k": [FIO / "fio-3.33-randread-4k-qd32-libaio-direct-5s.json",
                        F10 / "fio-3.1-json-randread-4k-qd1-intel-d3s4610-sata.json"],
    "fio-seqwrite-1m": [FIO / "fio-3.33-seqwrite-1m-qd8-libaio-direct-5s.json",
                        FIO / "fio-3.33-seqwrite-1m-rate20m-5s.json"],
    "iperf3-tcp": [REAL / "11-iperf3" / "iperf3-3.9-tcp-gcp-to-ibm-retransmits-omit3.json",
                   IPERF / "iperf3-3.12-tcp-loopback-5s.json",
                   IPERF / "iperf3-3.12-tcp-loopback-b10M-5s.json"],
    "ib-write-bw": [F10 / "ib_write_bw-roce-100g-cx-4qp-oci.txt",
                    F10 / "ib_write_bw-a-ib-qdr-cx3-mlx4-mtu2048-EXCERPT.txt"],
    "ib-send-lat": [F10 / "ib_send_lat-a-ib-qdr-cx3-mlx4-mtu2048-EXCERPT.txt",
                    F10 / "ib_send_lat-roce-mlx5-mtu1024-rdmacm-tabs-cpufreq-warnings-EXCERPT.txt"],
    "dcgmi-diag-r1": DCGM, "dcgmi-diag-r2": DCGM, "dcgmi-diag-r3": DCGM,
    "nvbandwidth": [F12 / "nvbandwidth-v0.2-8xH800-drv525-all-testcases.txt",
                    F12 / "nvbandwidth-v0.5-1xA10-drv550-h2d-ce.txt"],
    "gpu-burn": [F12 / "gpu_burn-8xA100-80GB-doubles-tensorcores-all-ok-EXCERPT.txt",
                 F12 / "gpu_burn-16gpu-warning-errors-all-faulty-EXCERPT.txt"],
}


@pytest.fixture(scope="module")
def shipped() -> dict[str, spec.Benchmark]:
    return spec.load_all()


def test_every_shipped_file_loads_and_has_samples(shipped: dict[str, spec.Benchmark]) -> None:
    files = sorted(spec.shipped_dir().glob("*.yml"))
    assert files and {p.stem for p in files} == set(shipped) == set(SAMPLES)
    for name, bench in shipped.items():
        assert Path(bench.source).stem == name and bench.description and bench.metrics
        assert bench.tools and bench.command[0] in bench.tools


CASES = [(name, path) for name, paths in SAMPLES.items() for path in paths]


@pytest.mark.parametrize(("name", "path"), CASES, ids=[f"{n}-{p.name}" for n, p in CASES])
def test_metrics_read_a_real_sample(shipped: dict[str, spec.Benchmark], name: str,
                                    path: Path) -> None:
    bench = shipped[name]
    values = bench.measure(bench.parse(path.read_text()))
    assert set(values) == {m.name for m in bench.metrics}
    assert any(v is not None for v in values.values())
    assert all(v is None or v >= 0 for v in values.values())


def _measure(bench: spec.Benchmark, path: Path) -> dict[str, float | None]:
    return bench.measure(bench.parse(path.read_text()))


def test_metric_values_in_base_units(shipped: dict[str, spec.Benchmark]) -> None:
    ar = _measure(shipped["nccl-all-reduce"], NCCL_ROCE)
    assert ar["busbw_8g"] == pytest.approx(237.94e9) and ar["wrong"] == 0
    assert ar["latency_8b"] == pytest.approx(NCCL_LATENCY_8B * 1e-6)
    assert ar["avg_busbw"] == pytest.approx(66.4834e9)
    ag = _measure(shipped["nccl-all-gather"], NCCL_GATHER)
    assert ag["busbw_8g"] is None and ag["latency_1k"] is None  # 16 GiB only: unknown, not 0
    assert ag["avg_busbw"] == pytest.approx(22.9611e9)
    rr = _measure(shipped["fio-randread-4k"], SAMPLES["fio-randread-4k"][0])
    assert rr["read_iops"] == pytest.approx(67091, abs=1)
    assert rr["read_clat_p99"] == pytest.approx(4.554752e-3)
    sw = _measure(shipped["fio-seqwrite-1m"], SAMPLES["fio-seqwrite-1m"][0])
    assert sw["write_bw"] == 2035976337
    ip = _measure(shipped["iperf3-tcp"], SAMPLES["iperf3-tcp"][0])
    assert ip == {"throughput": 1674679677.0243485, "retransmits": 1664}
    bw = _measure(shipped["ib-write-bw"], SAMPLES["ib-write-bw"][1])
    assert bw["bw_average"] == 3665.25 * 0x100000 and bw["bw_peak"] == 3665.51 * 0x100000
    lat = _measure(shipped["ib-send-lat"], SAMPLES["ib-send-lat"][0])
    assert lat == pytest.approx({"latency_typical": 1.07e-6, "latency_p99": 1.68e-6,
                                 "latency_p999": 5.00e-6})
    assert _measure(shipped["dcgmi-diag-r1"], DCGM[0]) == {"failed_tests": 1, "warned_tests": 0}
    nv = _measure(shipped["nvbandwidth"], SAMPLES["nvbandwidth"][0])
    assert nv["h2d_sum"] == pytest.approx(442.52e9)
    assert nv["d2d_read_min"] == pytest.approx(171.88e9)
    nv1 = _measure(shipped["nvbandwidth"], SAMPLES["nvbandwidth"][1])
    assert nv1["d2h_min"] is None and nv1["d2d_read_min"] is None  # not run on that node
    gb = _measure(shipped["gpu-burn"], SAMPLES["gpu-burn"][1])
    assert gb["faulty_gpus"] == 16 and gb["errors"] == 7 * 524288000


NCCL_LATENCY_8B = 36.47  # out-of-place time (us) of the 8-byte all_reduce row in NCCL_ROCE


def test_broadcast_in_the_old_format(shipped: dict[str, spec.Benchmark]) -> None:
    assert _measure(shipped["nccl-broadcast"], NCCL_BCAST_OLD)["busbw_8g"] == pytest.approx(
        232.81e9)


def test_suites(shipped: dict[str, spec.Benchmark]) -> None:
    quick = spec.select(shipped.values(), "quick")
    assert [b.name for b in quick] == ["dcgmi-diag-r1"]
    assert all(not b.invasive and "idle" not in b.needs for b in quick)
    assert len(spec.select(shipped.values(), "acceptance")) == len(shipped)
    nightly = {b.name for b in spec.select(shipped.values(), "nightly")}
    assert "dcgmi-diag-r3" not in nightly and "nccl-all-reduce" in nightly
    with pytest.raises(ConfigError, match="unknown suite 'weekly'"):
        spec.select(shipped.values(), "weekly")


def test_argv_fills_placeholders(shipped: dict[str, spec.Benchmark]) -> None:
    fio = shipped["fio-randread-4k"]
    argv = fio.argv({"tmpdir": "/scratch/x"})
    assert argv[0] == "fio" and "--filename=/scratch/x/stetho-fio.dat" in argv
    assert "--runtime=10" in argv and "--runtime=3" in fio.argv({"tmpdir": "/t", "runtime_s": 3})
    iperf = shipped["iperf3-tcp"]
    assert iperf.server_argv({"port": 5201}) == ("iperf3", "-s", "-1", "-p", "5201")
    assert iperf.argv({"peer": "127.0.0.1", "port": 5201})[1:3] == ("-c", "127.0.0.1")
    with pytest.raises(ConfigError, match=r"iperf3-tcp.yml: benchmark iperf3-tcp needs a value "
                                          r"for \{peer\}, \{port\}"):
        iperf.argv()
    assert shipped["dcgmi-diag-r1"].server_argv() is None


# -- validation -------------------------------------------------------------------------------

GOOD = """\
name: site-fio
description: a site's own fio run
command: [fio, --name=x, "--filename={tmpdir}/f", "--runtime={runtime_s}", --output-format=json]
defaults:
  runtime_s: 5
parser: fio
metrics:
  - name: read_iops
    field: read_iops
    unit: op/s
    direction: higher
  - name: p99
    field: read_clat_percentile_ns(99.0)
    unit: s
    scale: 1.0e-9
    direction: lower
repeats: 2
timeout_s: 30
needs: [idle, "tool:fio"]
invasive: true
suites: [nightly]
"""


def test_a_good_site_file_loads_from_a_folder_it_names(tmp_path: Path) -> None:
    (tmp_path / "site-fio.yml").write_text(GOOD)
    found = spec.load_all([tmp_path])
    bench = found["site-fio"]
    assert "fio-randread-4k" in found and bench.source == str(tmp_path / "site-fio.yml")
    assert bench.metric("p99").steps == (spec.Step("read_clat_percentile_ns", (99.0,)),)
    assert bench.defaults == (("runtime_s", "5"),) and bench.per == "node"
    assert spec.load_all([tmp_path], include_shipped=False) == {"site-fio": bench}


def test_a_name_defined_twice_names_both_files(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text(GOOD.replace("name: site-fio", "name: fio-randread-4k"))
    with pytest.raises(ConfigError, match=r"a.yml: benchmark 'fio-randread-4k' is already "
                                          r"defined in .*fio-randread-4k.yml"):
        spec.load_all([tmp_path])
    with pytest.raises(ConfigError, match="does not exist"):
        spec.load_all([tmp_path / "nope"])


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        spec.loads(text, "site/bench.yml")
    return str(exc.value)


def _line_of(text: str, needle: str) -> int:
    """The line holding `needle` (its last occurrence for "needle@last")."""
    needle, _, which = needle.partition("@")
    lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return lines[-1] if which == "last" else lines[0]


METRICS = GOOD[GOOD.index("metrics:\n"):GOOD.index("repeats:")]


BAD = [
    # (what, old, new, the line the error must name (a needle in the edited text), message)
    ("unknown key", "repeats: 2", "repeats: 2\nrepeat: 3", "repeat: 3", "unknown key repeat"),
    ("unknown metric key", "    unit: op/s", "    unit: op/s\n    units: x", "units: x",
     "unknown key metrics.0.units"),
    ("unknown parser", "parser: fio", "parser: fiio", "parser: fiio", "unknown parser 'fiio'"),
    ("private module is no parser", "parser: fio", "parser: _text", "parser: _text",
     "unknown parser '_text'"),
    ("parser without one typed result", "parser: fio", "parser: ibstatus", "parser: ibstatus",
     "has no parse(text) returning one typed result"),
    ("bad direction", "    direction: higher", "    direction: up", "direction: up",
     "direction must be 'higher' or 'lower'"),
    ("field missing", "    field: read_iops", "    field: read_iop", "field: read_iop",
     "FioRun has no field 'read_iop'"),
    ("field not a number", "    field: read_iops", "    field: jobs", "field: jobs",
     "gives tuple"),
    ("method not called", "    field: read_iops", "    field: read_clat_percentile_ns",
     "field: read_clat_percentile_ns", "is a method: call it"),
    ("property called", "    field: read_iops", "    field: read_iops()", "field: read_iops()",
     "is a property, not a method"),
    ("wrong argument type", "read_clat_percentile_ns(99.0)", 'read_clat_percentile_ns("99")',
     "read_clat_percentile_ns(\"99\")", "p must be float"),
    ("wrong argument count", "read_clat_percentile_ns(99.0)", "read_clat_percentile_ns(99, 1)",
     "(99, 1)", "too many positional arguments"),
    ("not a path", "    field: read_iops", "    field: read_iops + 1", "read_iops + 1",
     "only attributes and calls"),
    ("subscript", "    field: read_iops", "    field: jobs[0].error", "jobs[0]",
     "only attributes and calls"),
    ("no fields below a number", "    field: read_iops", "    field: read_iops.real",
     "read_iops.real", "read_iops is float, which has no fields"),
    ("argv not a list", 'command: [fio, --name=x, "--filename={tmpdir}/f", '
     '"--runtime={runtime_s}", --output-format=json]', 'command: "fio --name=x"', "command:",
     "command must be a list"),
    ("argv item not a string", "command: [fio, --name=x,", "command: [fio, {a: 1},", "command:",
     "command[1] must be a string"),
    ("executable with arguments", "command: [fio, --name=x,", 'command: ["fio --x", --name=x,',
     "command:", "must be the executable alone"),
    ("unknown suite", "suites: [nightly]", "suites: [nightly, weekly]", "suites:",
     "unknown suite 'weekly'"),
    ("no suite", "suites: [nightly]", "suites: []", "suites:", "suites must name at least one"),
    ("unknown need", 'needs: [idle, "tool:fio"]', 'needs: [idle, gpus, "tool:fio"]', "needs:",
     "unknown need 'gpus'"),
    ("unknown placeholder", "--filename={tmpdir}/f", "--filename={scratch}/f", "command:",
     "unknown placeholder {scratch}"),
    ("format spec in a placeholder", "--filename={tmpdir}/f", "--filename={tmpdir!r}/f",
     "command:", "unknown placeholder {tmpdir}"),
    ("bad braces", "--filename={tmpdir}/f", "--filename={tmpdir/f", "command:", "bad braces"),
    ("invasive without idle", 'needs: [idle, "tool:fio"]', 'needs: ["tool:fio"]', "invasive:",
     "must need 'idle'"),
    ("quick and invasive", "suites: [nightly]", "suites: [quick]", "suites:",
     "the quick suite runs beside jobs"),
    ("per hca without device", "repeats: 2", "repeats: 2\nper: hca", "per: hca",
     "must use {device}"),
    ("unknown per", "repeats: 2", "repeats: 2\nper: disk", "per: disk", "per must be one of"),
    ("server without peer", "repeats: 2", "repeats: 2\nserver: [fio, --server]", "needs:",
     "must need 'peer'"),
    ("tool not in needs", 'needs: [idle, "tool:fio"]', "needs: [idle]", "needs:",
     "needs must list 'tool:fio'"),
    ("repeats zero", "repeats: 2", "repeats: 0", "repeats: 0", "repeats must be at least 1"),
    ("repeats not an integer", "repeats: 2", "repeats: two", "repeats: two",
     "repeats must be an integer"),
    ("timeout negative", "timeout_s: 30", "timeout_s: -1", "timeout_s: -1",
     "timeout_s must be positive"),
    ("invasive not a bool", "invasive: true", "invasive: yes please", "invasive:",
     "invasive must be true or false"),
    ("duplicate metric", "  - name: p99", "  - name: read_iops", "- name: read_iops@last",
     "duplicate metric name 'read_iops'"),
    ("metric name style", "  - name: p99", "  - name: P99", "name: P99",
     "must be a lowercase identifier"),
    ("unknown unit", "    unit: op/s", "    unit: IOPS", "unit: IOPS", "unknown unit 'IOPS'"),
    ("scale not a number", "    scale: 1.0e-9", "    scale: tiny", "scale: tiny",
     "scale must be a number"),
    ("scale not positive", "    scale: 1.0e-9", "    scale: 0", "scale: 0",
     "scale must be positive"),
    ("missing required key", "parser: fio\n", "", "name:", "missing required key parser"),
    ("no metrics", METRICS, "metrics: []\n", "metrics:", "metrics must list at least"),
    ("default for an unused placeholder", "  runtime_s: 5", "  runtime_s: 5\n  peer: x",
     "peer: x", "default for {peer}, which the command does not use"),
    ("bad name", "name: site-fio", "name: Site Fio", "name:", "must be lowercase"),
    ("duplicate key", "repeats: 2", "repeats: 2\nrepeats: 3", "repeats: 3", "duplicate key"),
]


@pytest.mark.parametrize(("what", "old", "new", "where", "message"), BAD,
                         ids=[b[0] for b in BAD])
def test_every_mistake_names_file_and_line(what: str, old: str, new: str, where: str,
                                           message: str) -> None:
    assert old in GOOD, what
    text = GOOD.replace(old, new, 1)
    error = _error(text)
    assert error.startswith(f"site/bench.yml:{_line_of(text, where)}: "), error
    assert message in error, error


def test_yaml_syntax_error_names_the_line() -> None:
    error = _error(GOOD.replace("repeats: 2", "repeats: [2"))
    assert error.startswith("site/bench.yml:") and "invalid YAML" in error


def test_not_a_mapping() -> None:
    assert _error("- just\n- a list\n") == "site/bench.yml:1: a benchmark file must be a mapping"


def test_scale_written_the_yaml_1_1_way_is_still_a_number() -> None:
    bench = spec.loads(GOOD.replace("scale: 1.0e-9", 'scale: "1.0e9"'), "x.yml")
    assert bench.metric("p99").scale == 1.0e9


def test_literal_braces_and_numbers_in_argv() -> None:
    text = GOOD.replace("--output-format=json]", "--output-format=json, '{{x}}', 7]")
    bench = spec.loads(text, "x.yml")
    assert bench.argv({"tmpdir": "/t"})[-2:] == ("{x}", "7")


def test_extract_gives_none_along_a_none_path(shipped: dict[str, spec.Benchmark]) -> None:
    failed = shipped["iperf3-tcp"].parse(
        (IPERF / "iperf3-3.12-connection-refused.json").read_text())
    assert shipped["iperf3-tcp"].measure(failed) == {"throughput": None, "retransmits": None}
    assert spec.loads(GOOD, "x.yml").metric("read_iops").extract(None) is None


def test_parser_names_are_the_parser_modules() -> None:
    names = spec.parser_names()
    assert {"fio", "iperf3", "perftest", "dcgmi_diag", "nvbandwidth", "gpu_burn",
            "nccl_tests"} <= set(names)
    assert not any(n.startswith("_") for n in names)
