"""Issue 23: nccl-tests output that does not name its collective (older nccl-tests, a wrapper
script) is judged against the baseline of the collective its table shows, or the one the
profile declares; a run nothing tells is an error, never `skip` with exit 0.

Real recorded outputs with their `# Collective test` marker lines and binary names removed
(what a wrapper script prints), through the checks in-process. A 25% regression is the real
table with every time divided and every bandwidth multiplied by 0.75, as a slower fabric prints
it (algbw = size / time, busbw = algbw x the collective's factor: their ratio is unchanged).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stetho.evidence.bundle import Bundle, ProbeRecord
from stetho.parsers import nccl_tests
from tests.conftest import REAL

pytestmark = pytest.mark.xdist_group("ncclcollective")

GB300 = REAL / "03-nccl" / "allgather-2node-8xGB300-gke-tests2.17.6-whitespace-collapsed.txt"
GB10 = REAL / "03-nccl" / "allgather-2node-2xGB10-nccl2.28.9-tests2.18.3.txt"
OLD = REAL / "03-nccl" / "allreduce-2node-16xA100-40GB-ib-abci-oldformat.txt"
ALLTOALL = REAL / "03-nccl" / "alltoall-2node-16rank-cx8-spcx-nccl2.30.3-tests2.18.3-erratic.txt"


def unnamed(path: Path) -> str:
    text = "\n".join(line for line in path.read_text().splitlines()
                     if "Collective test" not in line)
    return re.sub(r"\b\w+_perf(_mpi)?\b", "run-nccl.sh", text) + "\n"


def slower(text: str, factor: float = 0.75) -> str:
    """Every table row's times / factor and bandwidths x factor; the Avg line x factor."""
    out = []
    for line in text.splitlines():
        toks = line.split()
        groups = {13: (5, 9), 12: (4, 8)}.get(len(toks))
        if groups and toks[0].isdigit() and toks[1].isdigit():
            for g in groups:
                toks[g] = f"{float(toks[g]) / factor:.2f}"
                toks[g + 1] = f"{float(toks[g + 1]) * factor:.2f}"
                toks[g + 2] = f"{float(toks[g + 2]) * factor:.2f}"
            line = "  ".join(toks)
        elif "Avg bus bandwidth" in line:
            value = line.split(":")[1].split()[0]
            line = line.replace(value, f"{float(value) * factor:.4f}")
        out.append(line)
    return "\n".join(out) + "\n"


def no_check(text: str) -> str:
    """The same run with checking off (-c 0): nccl-tests prints N/A for every #wrong."""
    rows = re.compile(r"^(\s*\d+\s+\d+\s+float\s+none\s+-1(?:\s+\S+){3})\s+0((?:\s+\S+){3})"
                      r"\s+0\s*$", re.MULTILINE)
    out, n = rows.subn(r"\1    N/A\2    N/A", text)
    assert n > 0
    return out


def _baseline(name: str, text: str) -> str:
    """A profile baseline block for the run's own shape, from its real (healthy) figures."""
    run = nccl_tests.parse(text)
    shape = run.shape
    collective = shape.collective or "all_gather"
    sizes = [r for r in run.rows if (r.oop_busbw_gbps or 0) >= 1.0][-4:]
    return (f"    {name}:\n"
            f"      shape: {{collective: {collective}, ranks: {shape.ranks}, nodes: "
            f"{shape.nodes}, gpus_per_node: {shape.gpus_per_node}}}\n"
            "      busbw_gbps:\n"
            + "".join(f"        {r.size_bytes}: {r.oop_busbw_gbps}\n" for r in sizes))


def _profile(tmp: Path, name: str, baselines: str, collective: str | None = None) -> str:
    path = tmp / f"{name}.yml"
    path.write_text(f"profile: {name}\nextends: generic\nnccl:\n"
                    "  saved_output: /nonexistent/nccl-tests.txt\n  tolerance_pct: 5\n"
                    + (f"  collective: {collective}\n" if collective else "")
                    + "  baselines:\n" + baselines)
    return str(path)


def _judge(profile: str, outputs: dict[str, str]) -> dict[str, list]:
    from stetho.checking.run import run

    bundles = [Bundle(node, "2026-01-01T00:00:00Z", "test", "generic", {
        "nccl_tests": ProbeRecord("nccl_tests", "command", "ok", argv=("run-nccl.sh",),
                                  stdout=text)}) for node, text in outputs.items()]
    out: dict[str, list] = {n: [] for n in outputs}
    for r in run(bundles, profile=profile, select="test_nccl").results:
        out[r.node].append(r)
    return out


def _busbw(rows: list) -> list:
    return [r for r in rows if r.check == "nccl_busbw"]


@pytest.fixture(scope="module")
def undeclared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    tmp = tmp_path_factory.mktemp("nccl-undeclared")
    profile = _profile(tmp, "unnamed", _baseline("gb300", unnamed(GB300))
                       + _baseline("abci", unnamed(OLD)) + _baseline("gb10", unnamed(GB10)))
    return _judge(profile, {
        "gb300": unnamed(GB300), "gb300slow": slower(unnamed(GB300)),
        "abci": unnamed(OLD), "abcislow": slower(unnamed(OLD)),
        "alltoall": unnamed(ALLTOALL), "unchecked": no_check(unnamed(GB10)),
    })


def test_a_regression_of_an_unnamed_all_gather_fails(undeclared):
    healthy = _busbw(undeclared["gb300"])
    assert healthy and {r.status for r in healthy} == {"pass"}
    slow = _busbw(undeclared["gb300slow"])
    assert slow and {r.status for r in slow} == {"fail"}, [r.message for r in slow]
    assert all("25.0% below the baseline" in r.message for r in slow)
    assert "in-place #wrong checked: not alltoall" in slow[0].evidence


def test_a_regression_of_an_unnamed_all_reduce_fails_and_names_its_signals(undeclared):
    assert {r.status for r in _busbw(undeclared["abci"])} == {"pass"}
    slow = _busbw(undeclared["abcislow"])
    assert slow and {r.status for r in slow} == {"fail"}
    assert all(r.subject.startswith("allreduce@") for r in slow)
    assert ("collective from: redop column 'sum': a reduction (all_reduce, reduce_scatter, "
            "reduce); no root column: no root; busbw/algbw 1.875 = 2(n-1)/n for 16 ranks "
            "(all_reduce)") in slow[0].evidence


def test_an_alltoall_is_not_taken_for_all_reduce(undeclared):
    rows = _busbw(undeclared["alltoall"])
    assert len(rows) == 1 and rows[0].status == "skip"
    assert "no baseline for alltoall 16 ranks / 2 nodes" in rows[0].message


def test_a_collective_nothing_tells_is_an_error_saying_how_to_declare_it(undeclared):
    rows = _busbw(undeclared["unchecked"])
    assert len(rows) == 1 and rows[0].status == "error", rows
    assert "does not say which collective" in rows[0].message
    assert "all_gather or alltoall" in rows[0].message
    assert "nccl.collective:" in rows[0].remediation


def test_a_declared_collective_is_judged_and_a_contradiction_is_an_error(tmp_path: Path):
    base = _baseline("gb10", unnamed(GB10))
    declared = _profile(tmp_path, "declared", base, collective="all_gather")
    got = _judge(declared, {"unchecked": no_check(unnamed(GB10)),
                            "slow": slower(no_check(unnamed(GB10)))})
    assert {r.status for r in _busbw(got["unchecked"])} == {"pass"}
    slow = _busbw(got["slow"])
    assert slow and {r.status for r in slow} == {"fail"}
    assert "declared by profile declared nccl.collective" in slow[0].evidence
    wrong = _profile(tmp_path, "wrong", base.replace("all_gather", "all_reduce"),
                     collective="all_reduce")
    got = _judge(wrong, {"gb10": unnamed(GB10), "unchecked": no_check(unnamed(GB10))})
    said = _busbw(got["gb10"])
    assert len(said) == 1 and said[0].status == "error"
    assert "declares all_reduce, but the nccl-tests output is all_gather" in said[0].message
    open_ = _busbw(got["unchecked"])
    assert len(open_) == 1 and open_[0].status == "error"
    assert "can only be all_gather or alltoall" in open_[0].message


def test_an_unknown_declared_collective_is_a_profile_error(tmp_path: Path):
    from stetho import profiles
    from stetho.errors import ConfigError

    bad = _profile(tmp_path, "bad", _baseline("gb10", unnamed(GB10)), collective="allreduce")
    with pytest.raises(ConfigError, match="unknown collective 'allreduce'"):
        profiles.load(bad)


def test_nccl_wrong_fails_nccl_run_without_any_baseline(tmp_path: Path):
    """The real RTX 3090 run (`#wrong` in every size, `Out of bounds values : 108 FAILED`),
    on a profile with no NCCL baseline at all: busbw skips, nccl-tests' own verdict fails."""
    profile = tmp_path / "nobase.yml"
    profile.write_text("profile: nobase\nextends: generic\nnccl:\n"
                       "  saved_output: /nonexistent/nccl-tests.txt\n")
    wrong = (REAL / "03-nccl" / "allreduce-2node-2xRTX3090-wrong-FAILED.txt").read_text()
    got = _judge(str(profile), {"wrong": wrong, "ok": OLD.read_text()})
    run = [r for r in got["wrong"] if r.check == "nccl_run"]
    assert len(run) == 1 and run[0].status == "fail" and "wrong elements" in run[0].message
    assert "Out of bounds values : 108 FAILED" in run[0].evidence
    assert {r.status for r in _busbw(got["wrong"])} == {"skip"}
    assert [r.status for r in got["ok"] if r.check == "nccl_run"] == ["pass"]
