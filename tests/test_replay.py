"""Replay fails closed: a bundle that cannot be read is its node's error, the same serial and
parallel; the other nodes are still judged, and the run exits 3 (could not evaluate)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stetho.errors import ConfigError
from stetho.evidence.bundle import BundleError, load

pytestmark = pytest.mark.xdist_group("faultsim")

DEPTH = 100_000


def _deep_bundle() -> str:
    """A file that looks like a bundle in its head, nested 100,000 deep further on."""
    return ('{"schema": "stetho.evidence", "schema_version": 1, "node": "deep", '
            '"probes": ' + "[" * DEPTH + "]" * DEPTH + "}")


def _fleet(src: Path, folder: Path) -> Path:
    """Two healthy nodes, and one node per way a bundle can be bad."""
    folder.mkdir()
    healthy = json.loads((src / "healthy.json").read_text())
    for name in ("good1", "good2"):
        (folder / f"{name}.json").write_text(json.dumps(dict(healthy, node=name)))
    text = json.dumps(dict(healthy, node="cut"))
    (folder / "cut.json").write_text(text[: len(text) // 2])
    big = dict(healthy, node="big")
    big["probes"] = dict(healthy["probes"])
    big["probes"]["kernel_log"] = dict(big["probes"]["kernel_log"], stdout="x" * (3 << 20))
    (folder / "big.json").write_text(json.dumps(big))
    (folder / "deep.json").write_text(_deep_bundle())
    for copy in ("twin-a", "twin-b"):
        (folder / f"{copy}.json").write_text(json.dumps(dict(healthy, node="twin")))
    # a run folder's layout (hosts/<node>/evidence.json): a node that died mid-write
    for name, body in (("empty01", ""), ("short01", json.dumps(dict(healthy))[:12])):
        (folder / "hosts" / name).mkdir(parents=True)
        (folder / "hosts" / name / "evidence.json").write_text(body)
    return folder


def _replay(folder: Path, out: Path, *extra: str) -> tuple[int, dict[str, list[dict]]]:
    env = dict(os.environ, STETHO_MAX_BUNDLE_MB="2")
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence", str(folder),
                           "--json", str(out), "-q", *extra],
                          capture_output=True, text=True, timeout=300, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    by_node: dict[str, list[dict]] = {}
    for r in json.loads(out.read_text())["results"]:
        by_node.setdefault(r["node"], []).append(r)
    return proc.returncode, by_node


@pytest.fixture(scope="module")
def replays(fault_bundles: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("badreplay")
    folder = _fleet(fault_bundles, tmp / "run")
    return {"serial": _replay(folder, tmp / "serial.json"),
            "parallel": _replay(folder, tmp / "parallel.json", "-n", "2")}


MODES = ("serial", "parallel")


def _node_errors(replays: dict, mode: str, node: str) -> list[dict]:
    rc, by_node = replays[mode]
    assert rc == 3
    rows = by_node[node]
    assert rows and {r["status"] for r in rows} == {"error"}, rows[:3]
    return rows


@pytest.mark.parametrize("mode", MODES)
def test_truncated_bundle_is_its_nodes_error(replays, mode):
    rows = _node_errors(replays, mode, "cut")
    assert all("cut.json" in r["message"] and "truncated" in r["message"] for r in rows)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("node, reason", [("empty01", "empty (0 bytes)"),
                                          ("short01", "truncated")])
def test_empty_or_cut_run_folder_bundle_is_its_nodes_error(replays, mode, node, reason):
    """A 0-byte or cut hosts/<node>/evidence.json is never skipped: that node's error, named
    by its folder, naming the file and what to do."""
    rows = _node_errors(replays, mode, node)
    assert all(f"hosts/{node}/evidence.json" in r["message"] and reason in r["message"]
               and "collect it again" in r["message"] for r in rows)


@pytest.mark.parametrize("mode", MODES)
def test_oversized_bundle_is_its_nodes_error(replays, mode):
    rows = _node_errors(replays, mode, "big")
    assert all("big.json" in r["message"] and "2 MiB cap" in r["message"] for r in rows)


@pytest.mark.parametrize("mode", MODES)
def test_deeply_nested_bundle_is_its_nodes_error(replays, mode):
    rows = _node_errors(replays, mode, "deep")
    assert all("deep.json" in r["message"] and "nested deeper" in r["message"] for r in rows)


@pytest.mark.parametrize("mode", MODES)
def test_two_bundles_of_one_node_are_an_error_not_a_merge(replays, mode):
    rows = _node_errors(replays, mode, "twin")
    assert all("2 evidence bundles for node twin" in r["message"] for r in rows)
    assert all("twin-a.json" in r["message"] and "twin-b.json" in r["message"] for r in rows)
    checks = [r["check"] for r in rows]
    assert len(checks) == len(set(checks))  # one row per check, not one per copy


@pytest.mark.parametrize("mode", MODES)
def test_other_nodes_are_still_judged(replays, mode):
    _, by_node = replays[mode]
    for name in ("good1", "good2"):
        statuses = {r["status"] for r in by_node[name] if not r["check"].startswith("fleet_")}
        assert "pass" in statuses and "error" not in statuses


def test_serial_and_parallel_replays_agree(replays):
    def rows(mode: str) -> list[tuple]:
        return sorted((r["node"], r["check"], r["subject"], r["status"], r["message"])
                      for rs in replays[mode][1].values() for r in rs)

    assert rows("serial") == rows("parallel")


def test_bundle_load_names_the_file_and_the_reason(tmp_path, stetho_env):
    cut = tmp_path / "cut.json"
    cut.write_text('{"schema": "stetho.evidence", "node": "a", "probes": {')
    with pytest.raises(BundleError, match=r"cut\.json: .*truncated"):
        load(cut)
    deep = tmp_path / "deep.json"
    deep.write_text(_deep_bundle())
    with pytest.raises(BundleError, match=r"deep\.json: .*nested deeper than 32"):
        load(deep)  # never a RecursionError
    shallow_but_deep = tmp_path / "d40.json"
    shallow_but_deep.write_text('{"schema": "stetho.evidence", "probes": ' + "[" * 40
                                + "]" * 40 + "}")
    with pytest.raises(BundleError, match="nested deeper"):
        load(shallow_but_deep)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'{"schema": "stetho.evidence", "node": "\xff\xfe"}')
    with pytest.raises(BundleError, match="not UTF-8"):
        load(binary)
    big = tmp_path / "big.json"
    big.write_text('{"schema": "stetho.evidence"}' + " " * 2048)
    stetho_env.setenv("STETHO_MAX_BUNDLE_MB", "0.001")
    with pytest.raises(BundleError, match=r"big\.json: .*larger than the 0\.001 MiB cap"):
        load(big)


def test_bundle_size_cap_must_be_a_positive_size(stetho_env):
    with pytest.raises(ConfigError, match="STETHO_MAX_BUNDLE_MB"):
        stetho_env.setenv("STETHO_MAX_BUNDLE_MB", "lots")
    with pytest.raises(ConfigError, match="positive"):
        stetho_env.setenv("STETHO_MAX_BUNDLE_MB", "0")


def test_batch_groups_are_bounded_however_many_nodes():
    from stetho.checking.session import BATCH_GROUPS, GROUP_NODES, NodeSource, Session

    for n, biggest in ((100, 4), (BATCH_GROUPS * GROUP_NODES * 5, GROUP_NODES)):
        s = Session.__new__(Session)
        s._sources = [NodeSource(f"n{i}") for i in range(n)]
        groups = s.groups()
        assert max(map(len, groups)) == biggest
        assert [name for g in groups for name in g] == [f"n{i}" for i in range(n)]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_replay_shows_how_far_it_is_on_stderr(fault_bundles, tmp_path, workers):
    """A fleet's replay runs for a minute: its progress goes to stderr, a line at each tenth
    of the check items in a log (never on stdout), and nothing under --quiet."""
    folder = tmp_path / "run"
    folder.mkdir()
    healthy = json.loads((fault_bundles / "healthy.json").read_text())
    for i in range(3):
        (folder / f"n{i}.json").write_text(json.dumps(dict(healthy, node=f"n{i}")))
    argv = [sys.executable, "-m", "stetho", "check", "--evidence", str(folder), "-n", workers]
    shown = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    lines = [ln for ln in shown.stderr.splitlines() if ln.startswith("replay: ")]
    assert lines[0].startswith("replay: 0% of the checks done (1/")
    assert lines[-1].startswith("replay: 100% of the checks done (")
    done, total = lines[-1].rsplit("(", 1)[1].rstrip(")").split("/")
    assert done == total and int(total) > 10 and len(lines) == 11
    assert "replay:" not in shown.stdout
    quiet = subprocess.run([*argv, "-q"], capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0 and "replay:" not in quiet.stderr + quiet.stdout


def test_a_fleet_replay_table_shows_its_problems_unless_all(fault_bundles, tmp_path):
    """Past 16 nodes the table lists only fail/error/warn rows (10,240 nodes' passes took as
    long to lay out as to check); --all still shows every row, and nothing else changes."""
    folder = tmp_path / "run"
    folder.mkdir()
    healthy = json.loads((fault_bundles / "healthy.json").read_text())
    for i in range(17):
        (folder / f"n{i:02d}.json").write_text(json.dumps(dict(healthy, node=f"n{i:02d}")))
    powersave = json.loads((fault_bundles / "governor.json").read_text())
    (folder / "slow.json").write_text(json.dumps(dict(powersave, node="slow")))
    argv = [sys.executable, "-m", "stetho", "check", "--evidence", str(folder), "-k",
            "cpu_governor"]
    fleet = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert fleet.returncode == 1, fleet.stderr
    rows = [ln for ln in fleet.stdout.splitlines() if " cpu_governor " in ln]
    assert rows and all(ln.startswith("slow ") and " FAIL " in ln for ln in rows)
    import re

    m = re.search(r"18 nodes, \d+ results: 1 fail, 0 error, 0 warn, 0 skip, (\d+) pass "
                  r"\((\d+) not shown\)", fleet.stdout)
    assert m and m.group(1) == m.group(2) and int(m.group(1)) >= 17, fleet.stdout[-500:]
    every = subprocess.run([*argv, "--all"], capture_output=True, text=True, timeout=300)
    assert every.returncode == 1
    assert sum(" PASS " in ln for ln in every.stdout.splitlines()) == int(m.group(1))


def test_a_batch_lists_a_nodes_subjects_once_per_group_without_tracebacks():
    """Checks of one kind share a node's subjects within its group (listed once, not per
    check); an unavailable subject kept that long holds no traceback, whose frames would keep
    a finished group's facts alive; a new group lists them afresh."""
    from stetho import profiles
    from stetho.checking.nodes import CheckNode
    from stetho.checking.session import Session

    prof = profiles.load("h100-sxm-8gpu")
    s = Session.__new__(Session)
    s._nodes, s._subjects, s._group = {}, {}, ()
    empty = CheckNode.unreadable("n0", prof, "unused").facts  # a node with no probes at all
    s._nodes["n0"] = CheckNode(empty, prof)
    s.enter_group(("n0",))
    first = s.subjects("disk", "n0")
    assert s.subjects("disk", "n0") is first
    [sub] = first
    assert sub.unavailable is not None and sub.unavailable.__traceback__ is None
    assert sub.unavailable.status in ("skip", "error")
    s.enter_group(("n1",))
    s._nodes["n0"] = CheckNode(empty, prof)
    s.enter_group(("n0",))
    assert s.subjects("disk", "n0") is not first
