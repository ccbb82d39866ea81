"""`stetho ingest` over a real spool folder and a real SQLite history, through the CLI.

The outcomes are a simulated node's real one (`stetho check --sim --spool`), copied under
other node names the way another node would have written its own.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stetho import spool as spool_mod
from stetho.fleet import outcome as outcome_mod
from stetho.history.store import History
from tests.conftest import REPO


def _stetho(*args: str, env: dict[str, str] | None = None, timeout: float = 300
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One simulated node's outcome, as `check --sim --spool` leaves it."""
    return sim_outcome(tmp_path_factory.mktemp("sim"))


def sim_outcome(base: Path) -> dict[str, Any]:
    built = _stetho("sim", "build", str(base / "sim"), "--nodes", "1")
    assert built.returncode == 0, built.stderr
    node = next(p for p in (base / "sim").iterdir() if p.is_dir())
    r = _stetho("check", "--sim", str(node), "--no-history", "-q", "--spool",
                str(base / "spool"), "--spool-kind", "health-check")
    assert r.returncode == 0, r.stdout + r.stderr
    (path,) = (base / "spool" / node.name).glob("*.json")
    body = json.loads(path.read_bytes().partition(b"\n")[0])
    assert body["kind"] == "health-check" and body["node"] == node.name
    return dict(body["outcome"])


def outcome_for(template: dict[str, Any], node: str, busbw: float | None = None
                ) -> outcome_mod.Outcome:
    """The template's outcome as `node`'s own: every name in it is `node`."""
    doc = copy.deepcopy(template)
    doc["node"] = node
    for r in doc["results"]["results"]:
        r["node"] = node
    evidence = json.loads(gzip.decompress(base64.b64decode(doc["evidence_gz"])))
    evidence["node"] = node
    doc["evidence_gz"] = base64.b64encode(gzip.compress(json.dumps(evidence).encode())).decode()
    doc["summary"]["node"] = node
    if busbw is not None:
        doc["summary"]["busbw"] = {"8589934592": busbw}
    return outcome_mod.from_json(doc, node)


def _write(spool: Path, template: dict[str, Any], nodes: list[str], run: str = "r1",
           **kw: Any) -> list[Path]:
    return [spool_mod.write(spool, outcome_for(template, n), run_id=f"20260101T000000Z-{run}",
                            kind="health-check", when=time.time(), **kw) for n in nodes]


def _ingest(spool: Path, tmp: Path, *extra: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return _stetho("ingest", str(spool), "--db", str(tmp / "h.db"), "--out", str(tmp / "runs"),
                   "-q", *extra, env=env)


def _rows(db: Path) -> dict[str, int]:
    """node -> how many history rows it has."""
    with History(db) as h:
        return dict(h.conn.execute(
            "SELECT n.name, count(*) FROM node_runs nr JOIN nodes n ON n.id = nr.node_id "
            "GROUP BY n.name"))


def _latest(db: Path, node: str) -> list[Any]:
    with History(db) as h:
        return h.latest_results([node], max_age_s=10**9)[node][2]


NODES = ["n01", "n02", "n03"]


def test_each_node_is_recorded_once_and_a_rerun_records_nothing(
        template: dict[str, Any], tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    _write(spool, template, NODES)
    r = _ingest(spool, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ingested 3 spool files in 1 run" in r.stdout
    assert _rows(tmp_path / "h.db") == {n: 1 for n in NODES}
    for n in NODES:
        assert not list((spool / n).glob("*.json"))
        assert len(list((spool / n / "ingested").glob("*.json"))) == 1
    (run_dir,) = (tmp_path / "runs").iterdir()  # the sweep's run folder, per node and fleet
    for n in NODES:
        assert {p.name for p in (run_dir / "hosts" / n).iterdir()} >= {
            "evidence.json", "results.json", "junit.xml", "summary.json"}
    assert {"results.json", "junit.xml", "summary.json", "index.html"} <= {
        p.name for p in run_dir.iterdir()}
    again = _ingest(spool, tmp_path)
    assert again.returncode == 0 and "nothing to ingest" in again.stdout
    assert _rows(tmp_path / "h.db") == {n: 1 for n in NODES}


def test_several_files_of_a_node_are_each_its_own_run(template: dict[str, Any],
                                                      tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    _write(spool, template, ["n01", "n02"], run="a")
    _write(spool, template, ["n01"], run="b")
    r = _ingest(spool, tmp_path)
    assert r.returncode == 0 and "ingested 3 spool files in 2 runs" in r.stdout, r.stdout
    assert _rows(tmp_path / "h.db") == {"n01": 2, "n02": 1}


KILL = """
import os, signal, sys
import stetho.fleet.ingest as ingest
import stetho.fleet.ingest_read as ingest_read
stage, after = sys.argv.pop(1), int(sys.argv.pop(1))
count = [0]
main_pid = os.getpid()  # a worker reading files kills the ingest, not itself
def hit():
    count[0] += 1
    if count[0] > after:
        os.kill(main_pid, signal.SIGKILL)
if stage.startswith("reading"):  # killed while the batch is read: nothing recorded yet
    real_save = ingest_read.save_host
    def save_host(*a, **k):
        hit()
        return real_save(*a, **k)
    ingest_read.save_host = save_host
else:  # killed between the commit and the moves: recorded, files still in place
    real_move = ingest._move
    def _move(*a, **k):
        hit()
        return real_move(*a, **k)
    ingest._move = _move
from stetho.cli import main
sys.argv[0] = "stetho"
main()
"""


@pytest.mark.parametrize("stage", ["reading", "reading-in-workers", "moving"])
def test_an_ingest_killed_mid_way_and_run_again_records_each_node_once(
        template: dict[str, Any], tmp_path: Path, stage: str) -> None:
    """Killed while reading (in this process, or while worker processes read: they die with
    it and hold neither the lock nor its output, so the run returns and the rerun starts),
    or between the commit and the moves."""
    nodes = ["n01", "n02", "n03", "n04"]
    spool = tmp_path / "spool"
    _write(spool, template, nodes)
    workers = ["--workers", "2"] if stage == "reading-in-workers" else ["--workers", "0"]
    after = "1" if stage == "reading-in-workers" else "2"  # each worker counts its own
    killed = subprocess.run([sys.executable, "-c", KILL, stage, after, "ingest", str(spool),
                             "--db", str(tmp_path / "h.db"), "--out", str(tmp_path / "runs"),
                             "-q", *workers], capture_output=True, text=True, timeout=300,
                            cwd=REPO)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    pending = sorted(n for n in nodes if list((spool / n).glob("*.json")))
    if stage.startswith("reading"):
        assert pending == nodes and not _rows(tmp_path / "h.db")
    else:  # two moved, two recorded but still waiting
        assert pending == nodes[2:] and _rows(tmp_path / "h.db") == {n: 1 for n in nodes}
    r = _ingest(spool, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _rows(tmp_path / "h.db") == {n: 1 for n in nodes}
    assert not [n for n in nodes if list((spool / n).glob("*.json"))]
    if stage == "moving":
        assert "2 spool files were already in the history" in r.stdout
        assert "nothing to ingest" in r.stdout


def test_a_file_claiming_another_node_is_its_folders_nodes_error(
        template: dict[str, Any], tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    (theirs,) = _write(spool, template, ["n02"], run="x")
    (spool / "n01").mkdir()
    os.replace(theirs, spool / "n01" / theirs.name)  # n02's outcome, left in n01's folder
    r = _ingest(spool, tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert _rows(tmp_path / "h.db") == {"n01": 1}  # n02 has nothing from it
    (err,) = _latest(tmp_path / "h.db", "n01")
    assert err.status == "error" and "claims node 'n02'" in err.message
    why = (spool / "n01" / "bad" / f"{theirs.name}.why").read_text()
    assert "claims node 'n02'" in why


def test_content_naming_another_node_inside_is_refused_too(template: dict[str, Any],
                                                           tmp_path: Path) -> None:
    """The body says n01, but a result inside is n02's: none of it is recorded."""
    spool = tmp_path / "spool"
    out = outcome_for(template, "n01")
    forged = outcome_mod.Outcome("n01", out.exit_code,
                                 [*out.results[:-1], _renamed(out.results[-1], "n02")],
                                 out.junit, out.evidence, out.summary)
    spool_mod.write(spool, forged, run_id="20260101T000000Z-y", kind="check", when=time.time())
    r = _ingest(spool, tmp_path)
    assert r.returncode == 3
    (err,) = _latest(tmp_path / "h.db", "n01")
    assert "claims node 'n02'" in err.message and "results for n02" in err.message


def _renamed(result: Any, node: str) -> Any:
    from stetho.results import Result

    return Result.from_json({**result.to_json(), "node": node})


@pytest.mark.parametrize("content", [b"{not json", b"", b'{"schema": "stetho.spool"',
                                     b"\x00\xff" * 10])
def test_garbage_is_the_nodes_error_moved_to_bad(template: dict[str, Any], tmp_path: Path,
                                                 content: bytes) -> None:
    spool = tmp_path / "spool"
    _write(spool, template, ["n02"])
    (spool / "n01").mkdir()
    (spool / "n01" / "20260101T000000Z-g.json").write_bytes(content)
    r = _ingest(spool, tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "1 refused" in r.stdout
    (err,) = _latest(tmp_path / "h.db", "n01")
    assert err.status == "error" and "20260101T000000Z-g.json" in err.message
    assert (spool / "n01" / "bad" / "20260101T000000Z-g.json").exists()
    assert (spool / "n01" / "bad" / "20260101T000000Z-g.json.why").read_text().strip()
    assert all(r.node == "n02" for r in _latest(tmp_path / "h.db", "n02"))


def test_a_file_over_the_cap_is_refused(template: dict[str, Any], tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    _write(spool, template, ["n01"])
    r = _ingest(spool, tmp_path, env={"STETHO_MAX_BUNDLE_MB": "0.01"})
    assert r.returncode == 3
    (err,) = _latest(tmp_path / "h.db", "n01")
    assert "over the 10485 byte cap (max_bundle_mb)" in err.message


def test_with_a_secret_only_files_signed_with_their_nodes_key_are_taken(
        template: dict[str, Any], tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    env = {"STETHO_SPOOL_SECRET": str(secret)}
    keys = {}
    for n in ("n01", "n02"):
        k = _stetho("spool", "key", n, env=env)
        assert k.returncode == 0, k.stderr
        keys[n] = k.stdout.strip().encode()
    spool = tmp_path / "spool"
    _write(spool, template, ["n01"], key=keys["n01"])
    _write(spool, template, ["n02"], key=keys["n01"])  # signed with another node's key
    _write(spool, template, ["n03"])  # unsigned
    r = _ingest(spool, tmp_path, env=env)
    assert r.returncode == 3, r.stdout + r.stderr
    assert _latest(tmp_path / "h.db", "n01")[0].status != "error"
    (mis,) = _latest(tmp_path / "h.db", "n02")
    assert "is not signed with n02's key" in mis.message
    (unsigned,) = _latest(tmp_path / "h.db", "n03")
    assert "is not signed" in unsigned.message


def test_a_node_signs_its_spool_file_from_the_check_cli(tmp_path: Path,
                                                        template: dict[str, Any]) -> None:
    """`check --spool` with STETHO_SPOOL_KEY: the file verifies under the controller's
    secret for that node, and for no other."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"0123456789abcdef0123456789abcdef")
    key = spool_mod.node_key(secret.read_bytes(), "node01")
    (tmp_path / "key").write_bytes(key)
    spool = tmp_path / "spool"
    built = _stetho("sim", "build", str(tmp_path / "sim"), "--nodes", "1")
    assert built.returncode == 0
    r = _stetho("check", "--sim", str(tmp_path / "sim" / "node01"), "--no-history", "-q",
                "--spool", str(spool), "--spool-run", "20260101T000000Z-s",
                env={"STETHO_SPOOL_KEY": str(tmp_path / "key")})
    assert r.returncode == 0, r.stderr
    f = spool_mod.SpoolFile(spool / "node01" / "20260101T000000Z-s.json", "node01",
                            "20260101T000000Z-s")
    assert spool_mod.read(f, secret=secret.read_bytes()).signed
    other = spool_mod.SpoolFile(f.path, "node02", f.run_id)
    with pytest.raises(spool_mod.SpoolError, match="not signed with node02's key"):
        spool_mod.read(other, secret=secret.read_bytes())


def test_a_file_not_written_by_the_folders_owner_is_refused(template: dict[str, Any],
                                                             tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("chown needs root")
    spool = tmp_path / "spool"
    (mine,) = _write(spool, template, ["n01"])
    (other,) = _write(spool, template, ["n02"])
    os.chown(spool / "n01", 4242, 4242)  # the folder is n01's account's
    os.chown(mine, 4242, 4242)  # written by it: taken
    os.chown(spool / "n02", 4343, 4343)
    os.chown(other, 4242, 4242)  # n01's account wrote into n02's folder: refused
    r = _ingest(spool, tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert _latest(tmp_path / "h.db", "n01")[0].status != "error"
    (err,) = _latest(tmp_path / "h.db", "n02")
    assert "owned by uid 4242" in err.message and "belongs to uid 4343" in err.message


def test_an_expected_node_with_no_file_is_its_error(template: dict[str, Any],
                                                    tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    _write(spool, template, ["n01", "n02"], run="e")
    r = _ingest(spool, tmp_path, "--expect", "n[01-03]", "--run", "20260101T000000Z-e")
    assert r.returncode == 3, r.stdout + r.stderr
    (err,) = _latest(tmp_path / "h.db", "n03")
    assert err.message == f"no outcome from n03 in the spool {spool} for run 20260101T000000Z-e"


def test_fleet_checks_compare_the_ingested_peers(template: dict[str, Any],
                                                 tmp_path: Path) -> None:
    """Eight nodes of one profile: the one whose busbw is far under its peers' fails
    fleet_busbw, a check no node can judge alone."""
    spool = tmp_path / "spool"
    for i in range(1, 9):
        node = f"n{i:02d}"
        spool_mod.write(spool, outcome_for(template, node, busbw=300.0 if i == 5 else
                                           480.0 + i), run_id="20260101T000000Z-f",
                        kind="nightly", when=time.time())
    r = _ingest(spool, tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    busbw = {x.node: x for n in ("n01", "n05") for x in _latest(tmp_path / "h.db", n)
             if x.check == "fleet_busbw"}
    assert busbw["n05"].status == "fail" and "outlier among 8" in busbw["n05"].message
    assert busbw["n01"].status == "pass"
    with History(tmp_path / "h.db") as h:
        assert h.conn.execute("SELECT kind FROM runs").fetchall() == [("nightly",)]


def test_follow_ingests_new_batches_and_stops_on_sigterm(template: dict[str, Any],
                                                         tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "stetho", "ingest", str(spool), "--follow",
                             "--interval", "0.2", "--db", str(tmp_path / "h.db"), "--out",
                             str(tmp_path / "runs"), "-q"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for n in ("n01", "n02"):
            _write(spool, template, [n])
            deadline = time.monotonic() + 120
            while not list((spool / n / "ingested").glob("*.json")):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out + err
    assert "stopped by a signal" in err
    assert _rows(tmp_path / "h.db") == {"n01": 1, "n02": 1}
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_ingest_without_a_spool_is_a_usage_error(tmp_path: Path) -> None:
    r = _stetho("ingest", env={"STETHO_RESULT_SPOOL": ""})
    assert r.returncode == 2
    missing = _stetho("ingest", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such folder" in missing.stderr


def test_a_new_file_under_an_ingested_run_id_is_refused_not_recorded(
        template: dict[str, Any], tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    (first,) = _write(spool, template, ["n01"])
    assert _ingest(spool, tmp_path).returncode == 0
    out = outcome_for(template, "n01")
    spool_mod.write(spool, outcome_mod.Outcome("n01", 1, out.results[:3], "", None),
                    run_id=first.stem, kind="check", when=time.time())  # same run id, new body
    r = _ingest(spool, tmp_path)
    assert r.returncode == 0 and "nothing to ingest" in r.stdout, r.stdout
    assert _rows(tmp_path / "h.db") == {"n01": 1}
    why = (spool / "n01" / "bad" / f"{first.name}.why").read_text()
    assert "already ingested for n01 with other content" in why


def test_a_rerun_after_a_kill_does_not_call_recorded_expected_nodes_missing(
        template: dict[str, Any], tmp_path: Path) -> None:
    """What a Slurm sweep's ingest does (--expect, --run), killed after its commit: the rerun
    moves the recorded files and records no "no outcome" error for their nodes."""
    nodes = ["n01", "n02", "n03"]
    spool = tmp_path / "spool"
    _write(spool, template, nodes, run="k")
    args = ["ingest", str(spool), "--db", str(tmp_path / "h.db"), "--out",
            str(tmp_path / "runs"), "-q", "--expect", "n[01-03]", "--run",
            "20260101T000000Z-k"]
    killed = subprocess.run([sys.executable, "-c", KILL, "moving", "1", *args],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    r = _stetho(*args)
    assert r.returncode == 0 and "nothing to ingest" in r.stdout, r.stdout + r.stderr
    assert _rows(tmp_path / "h.db") == {n: 1 for n in nodes}
    assert all(x.status != "error" for n in nodes for x in _latest(tmp_path / "h.db", n))


@pytest.mark.parametrize("flag", ["--all", "--problems", "-q"])
def test_ingest_prints_the_shared_results_table(template: dict[str, Any], tmp_path: Path,
                                                flag: str) -> None:
    """The table (or summary line) is the one `stetho sweep` and `stetho check` print, from
    the one helper in stetho/cli/common.py, for the run folder's own results."""
    import click
    from click.testing import CliRunner

    from stetho.cli.common import show_results
    from stetho.sinks import json_out

    spool = tmp_path / "spool"
    _write(spool, template, NODES)
    r = _stetho("ingest", str(spool), "--db", str(tmp_path / "h.db"), "--out",
                str(tmp_path / "runs"), flag)
    assert r.returncode == 0, r.stdout + r.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    results = json_out.load((run_dir / "results.json").read_text())

    @click.command()
    def shown() -> None:
        show_results(results, quiet=flag == "-q", problems=flag == "--problems")

    expected = CliRunner().invoke(shown, env={"COLUMNS": "80"}).output
    assert expected and expected in r.stdout
    assert ("PASS" in expected) == (flag == "--all")  # --problems hides the passing rows
