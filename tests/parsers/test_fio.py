"""fio JSON parser: every real and recorded output, the values in each, variants, and garbage."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from stetho.parsers import ParseError, fio
from tests.conftest import REAL, REPO, mutation_outcomes, real_files, real_ids

PUBLIC = real_files("10-fio-perftest", "fio-*.json")
RECORDED = sorted((REPO / "fixtures" / "recorded" / "fio-debian12-vm").glob("*.json"))
FILES = PUBLIC + RECORDED
D = REAL / "10-fio-perftest"
SATA = D / "fio-3.1-json-randread-4k-qd1-intel-d3s4610-sata.json"
ERR22 = D / "fio-3.33-json-error22-with-stderr-prefix.json"
SIGINT = D / "fio-3.34-json-sigint-prefix-macos.json"
REC = REPO / "fixtures" / "recorded" / "fio-debian12-vm"
RANDREAD = REC / "fio-3.33-randread-4k-qd32-libaio-direct-5s.json"
SEQWRITE = REC / "fio-3.33-seqwrite-1m-qd8-libaio-direct-5s.json"
RATED = REC / "fio-3.33-seqwrite-1m-rate20m-5s.json"


def test_fixture_folders_are_complete() -> None:
    assert set(FILES) == {SATA, ERR22, SIGINT, RANDREAD, SEQWRITE, RATED}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_file(path: Path) -> None:
    text = path.read_text()
    run = fio.parse(text)
    assert fio.parse(text.encode()) == run
    assert run.version.startswith("fio-") and run.jobs
    assert run.ok == (not run.errors and not run.interrupted)
    for job in run.jobs:
        for d in (job.read, job.write, job.trim):
            assert d.iops >= 0 and d.bw_bytes_per_s >= 0
            if d.active and d.clat is not None:
                assert d.clat.min_ns <= d.clat.mean_ns <= d.clat.max_ns
                values = [v for _, v in d.clat.percentiles]
                assert values == sorted(values)  # percentiles never go down
    assert run.read_iops == sum(j.read.iops for j in run.jobs)


def test_clean_sata_randread_fio31() -> None:
    run = fio.parse(SATA.read_text())
    assert run.ok and run.version == "fio-3.1" and run.timestamp == 1565382692
    assert run.prelude == () and run.trailing == ()
    (job,) = run.jobs
    assert (job.name, job.error, job.elapsed_s) == ("random-read", 0, 61)
    assert job.option("rw") == "randread" and job.option("bs") == "4k"
    assert job.option("filename") == "/dev/sda" and job.option("nope") is None
    assert job.read.iops == 15489.775170 and job.read.total_ios == 929402
    assert job.read.bw_bytes_per_s == 61959 * 1024  # fio 3.1: no bw_bytes, bw in KiB/s
    assert job.read.runtime_ms == 60001 and job.write.active is False
    clat = job.read.clat
    assert clat is not None and clat.min_ns == 1755 and clat.mean_ns == 45401.723250
    assert clat.percentile_ns(99.0) == 138240 and clat.percentile_ns(99.99) == 197632
    assert clat.percentile_ns(50) == 38144 and clat.percentile_ns(42.0) is None
    assert ("99.000000", 138240.0) in clat.percentiles
    assert all(float(k) > 0 for k, _ in clat.percentiles)  # the "0.00" : 0 padding is dropped
    assert len(clat.percentiles) == 17
    assert run.read_clat_percentile_ns(99.0) == 138240 and run.write_clat_percentile_ns(99) is None
    assert run.read_clat_mean_ns == 45401.723250 and run.write_clat_mean_ns is None
    assert job.read.slat is not None and job.read.slat.max_ns == 12314859
    assert job.usr_cpu == 10.091667 and job.job_runtime_ms is None
    (disk,) = run.disk_util
    assert (disk.name, disk.read_ios, disk.util_percent) == ("sda", 927683, 53.086749)


def test_error22_with_stderr_before_the_json() -> None:
    run = fio.parse(ERR22.read_text())
    assert not run.ok and run.errors == (22,) and not run.interrupted
    assert run.prelude == (
        "fio: time_based requires a runtime/timeout setting",
        "1m: you need to specify size=",
        "fio: pid=0, err=22/file:filesetup.c:1155, func=total_file_size, error=Invalid argument",
    )
    assert run.messages == (run.prelude[0], run.prelude[2])
    (job,) = run.jobs
    assert job.error == 22 and job.elapsed_s == 0 and job.write.iops == 0
    assert job.write.bw_bytes_per_s == 0 and not job.write.active
    assert job.write.clat is not None and job.write.clat.percentiles == ()
    assert run.write_clat_percentile_ns(99.0) is None  # nothing ran: unknown, not 0


def test_sigint_run_is_interrupted_with_partial_numbers() -> None:
    run = fio.parse(SIGINT.read_text())
    assert run.interrupted and not run.ok and run.errors == ()
    assert run.prelude == ("fio: terminating on signal 2",)
    assert run.read_iops == 10102.601156 and run.read_bw_bytes_per_s == 41380254
    assert run.jobs[0].read.runtime_ms == 2768 and run.jobs[0].option("runtime") == "10"
    assert run.read_clat_percentile_ns(99) == 175104


def test_recorded_debian_runs() -> None:
    rr = fio.parse(RANDREAD.read_text())
    assert rr.ok and rr.version == "fio-3.33" and rr.jobs[0].option("iodepth") == "32"
    assert round(rr.read_iops) == 67091 and rr.write_iops == 0
    assert rr.read_clat_percentile_ns(99.0) == 4554752
    assert rr.disk_util[0].name == "vda"
    sw = fio.parse(SEQWRITE.read_text())
    assert sw.ok and sw.read_bw_bytes_per_s == 0 and sw.write_bw_bytes_per_s == 2035976337
    rated = fio.parse(RATED.read_text())
    assert rated.jobs[0].option("rate") == "20m"
    # the throttled run is the one a full-speed baseline must reject: 97 times slower
    assert sw.write_bw_bytes_per_s / rated.write_bw_bytes_per_s > 90


def _doc(path: Path = SATA) -> dict:
    doc: dict = json.loads(path.read_text())
    return doc


def test_several_jobs_add_up_and_take_the_worst_latency() -> None:
    doc = _doc()
    second = json.loads(json.dumps(doc["jobs"][0]))
    second["jobname"] = "random-read-2"
    second["read"]["iops"] = 1000.0
    second["read"]["clat_ns"]["percentile"]["99.000000"] = 999999
    doc["jobs"].append(second)
    run = fio.parse(json.dumps(doc, indent=2))
    assert len(run.jobs) == 2 and run.read_iops == 15489.775170 + 1000.0
    assert run.read_clat_percentile_ns(99.0) == 999999


def test_microsecond_latencies_of_old_fio_become_ns() -> None:
    doc = _doc()
    read = doc["jobs"][0]["read"]
    read["clat"] = {k: v / 1000 if not isinstance(v, dict) else v
                    for k, v in read.pop("clat_ns").items()}
    run = fio.parse(json.dumps(doc))
    clat = run.jobs[0].read.clat
    assert clat is not None and clat.mean_ns == pytest.approx(45401.723250)
    assert clat.percentile_ns(99.0) == 138240 * 1000  # percentile cells scaled the same way


def test_trailing_lines_are_kept_and_can_say_interrupted() -> None:
    text = SATA.read_text() + "fio: terminating on signal 15\n"
    run = fio.parse(text)
    assert run.trailing == ("fio: terminating on signal 15",) and run.interrupted


@pytest.mark.parametrize(("edit", "match"), [
    (lambda d: d.pop("jobs"), "not fio JSON"),
    (lambda d: d.update(jobs="x"), "'jobs' is not a list"),
    (lambda d: d["jobs"][0]["read"].pop("iops"), "'iops' is missing"),
    (lambda d: d["jobs"][0]["read"].update(iops="fast"), "not a number"),
    (lambda d: d["jobs"][0].update(error=1.5), "not an integer"),
    (lambda d: d["jobs"][0]["read"]["clat_ns"].update(percentile=[]), "not an object"),
    (lambda d: d["jobs"][0]["read"]["clat_ns"]["percentile"].update({"p99": 1}), "not a number"),
    (lambda d: d["jobs"][0].pop("write"), "no 'write' object"),
    (lambda d: d["jobs"].append(3), r"jobs\[1\] is not an object"),
    (lambda d: d.update({"disk_util": [1]}), "disk_util"),
])
def test_broken_documents_raise_parse_error(edit: object, match: str) -> None:
    doc = _doc()
    edit(doc)  # type: ignore[operator]
    with pytest.raises(ParseError, match=match) as exc:
        fio.parse(json.dumps(doc))
    assert exc.value.tool == "fio"


def test_truncated_json() -> None:
    text = SATA.read_text()
    with pytest.raises(ParseError, match="invalid JSON"):
        fio.parse(text[: len(text) // 2])


@pytest.mark.parametrize("text", ["[1, 2]\n", "{}\n", '{"fio version": "fio-3.33"}\n'])
def test_json_that_is_not_fio(text: str) -> None:
    with pytest.raises(ParseError, match="not fio JSON"):
        fio.parse(text)


@pytest.mark.parametrize("text", ["", " \n\t\n"])
def test_empty(text: str) -> None:
    with pytest.raises(ParseError, match="empty"):
        fio.parse(text)


def test_random_bytes() -> None:
    blob = bytes(random.Random(0).randrange(256) for _ in range(4096))
    with pytest.raises(ParseError):
        fio.parse(blob)
    with pytest.raises(ParseError):
        fio.parse(blob.decode("latin-1"))


OTHER = (real_files("11-iperf3") + real_files("12-gpu-bench") + real_files("07-mlxlink-ethtool")
         + real_files("03-nccl"))


@pytest.mark.parametrize("path", OTHER, ids=real_ids(OTHER))
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        fio.parse(path.read_text())
    assert exc.value.tool == "fio"


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    outcomes = mutation_outcomes(fio.parse, path.read_text(), fio.TOOL, rounds=300)
    assert outcomes == {"parsed", "error"}
