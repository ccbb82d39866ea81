"""The check use case as a library call: `stetho.check.run(CheckRequest(...))` collects or
loads the evidence, runs the checks, records the run when asked and writes every output the
request selects, from one outcome."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from stetho import check
from stetho.check.outputs import textfile_path, write_textfile
from stetho.errors import ConfigError
from stetho.evidence.bundle import load
from stetho.history.store import History
from stetho.results import Result

pytestmark = pytest.mark.xdist_group("faultsim")
PROFILE = "h100-sxm-8gpu"


def _samples(path: Path, name: str) -> list[tuple[dict[str, str], float]]:
    fams = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    return [(s.labels, s.value) for s in fams[name].samples] if name in fams else []


def test_a_replay_writes_its_textfile_and_run_folder_from_one_outcome(fault_bundles, tmp_path):
    out = check.Outputs(textfile_dir=tmp_path / "tf", run_dir=tmp_path / "run",
                        json=str(tmp_path / "r.json"), junit=str(tmp_path / "r.xml"))
    outcome = check.run(check.CheckRequest(command="replay", evidence=(str(fault_bundles),),
                                           outputs=out))
    assert outcome.exit_code == 1 and outcome.items > 0 and outcome.bundles is None
    prom = tmp_path / "tf" / "stetho-replay.prom"
    assert prom in outcome.written
    status = {(lb["node"], lb["check"], lb["subject"]): v
              for lb, v in _samples(prom, "stetho_check_status") if lb["command"] == "replay"}
    assert status[("clocks", "gpu_clocks", "gpu3")] == 2  # fail
    assert status[("healthy", "gpu_clocks", "gpu0")] == 0  # pass
    (run,) = [v for lb, v in _samples(prom, "stetho_run_timestamp_seconds")]
    assert run == pytest.approx(outcome.started.timestamp())
    folder = tmp_path / "run"
    for name in ("results.json", "junit.xml", "summary.json", "summary.txt", "index.html"):
        assert (folder / name).is_file(), name
    assert json.loads((folder / "summary.json").read_text())["exit_code"] == 1
    # summary.txt names what made the run: a replay, not a sweep
    assert (folder / "summary.txt").read_text().startswith(f"stetho replay {outcome.run_id}:")
    page = (folder / "index.html").read_text()
    assert 'data-node="clocks"' in page and 'data-node="healthy"' in page
    doc = json.loads((tmp_path / "r.json").read_text())
    assert len(doc["results"]) == len(outcome.results)
    assert not list((tmp_path / "tf").glob("*.tmp")) and not list((tmp_path / "tf").glob(".*"))


def test_given_bundles_are_recorded_only_when_asked(fault_bundles, tmp_path):
    bundles = (load(fault_bundles / "healthy.json"),)
    db = tmp_path / "h.db"
    not_recorded = check.run(check.CheckRequest(bundles=bundles, profile=PROFILE, db=db))
    assert not_recorded.exit_code == 0 and not db.exists()
    recorded = check.run(check.CheckRequest(command="bench", bundles=bundles, profile=PROFILE,
                                            db=db, record=True, command_line="bench run"))
    with History(db) as h:
        assert h.conn.execute("SELECT id, kind FROM runs").fetchall() == [
            (recorded.run_id, "bench")]
    with pytest.raises(ConfigError, match="needs a history database"):
        check.run(check.CheckRequest(bundles=bundles, record=True))


def test_a_selection_of_nothing_is_refused_before_any_output(fault_bundles, tmp_path):
    out = check.Outputs(json=str(tmp_path / "r.json"), textfile_dir=tmp_path / "tf")
    with pytest.raises(check.NothingSelected) as err:
        check.run(check.CheckRequest(evidence=(str(fault_bundles / "healthy.json"),),
                                     select="gpu_clokcs", select_must_match=True, outputs=out))
    assert "gpu_clocks" in err.value.names and "fleet_busbw" in err.value.names
    assert "fleet_versions" in str(err.value) and err.value.exit_code == 2
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "tf").exists()
    # without select_must_match (the gate's own selection), nothing matched is no error
    quiet = check.run(check.CheckRequest(evidence=(str(fault_bundles / "healthy.json"),),
                                         select="gpu_clokcs"))
    assert quiet.items == 0 and list(quiet.results) == []


def test_a_simulated_node_is_collected_and_its_evidence_kept(fault_cluster, tmp_path):
    ev = tmp_path / "ev.json"
    outcome = check.run(check.CheckRequest(
        sim=str(fault_cluster / "clocks"), profile=PROFILE, select="gpu_clocks",
        outputs=check.Outputs(evidence_out=ev, textfile_dir=tmp_path)))
    assert outcome.exit_code == 1 and outcome.bundles and outcome.bundles[0].node == "clocks"
    assert load(ev).node == "clocks" and ev in outcome.written
    assert outcome.nodes() == ["clocks"]
    assert (tmp_path / "stetho-check.prom").is_file()


@pytest.mark.parametrize("bad", [
    dict(evidence=("x",), sim="y"),
    dict(evidence=("x",), deadline_s=5.0),
    dict(evidence=("x",), outputs=check.Outputs(evidence_out=Path("e.json"))),
    dict(command="nonsense"),
])
def test_contradictory_requests_are_config_errors(bad):
    with pytest.raises(ConfigError):
        check.run(check.CheckRequest(**bad))


def test_textfile_names_one_file_per_command_and_keeps_a_prom_path():
    assert textfile_path(Path("/x/tf"), "gate") == Path("/x/tf/stetho-gate.prom")
    assert textfile_path(Path("/x/old.prom"), "sweep") == Path("/x/old.prom")


def test_the_textfile_is_world_readable_and_carries_the_gate_verdict(tmp_path):
    from datetime import datetime, timezone

    r = Result(node="n1", check="cpu_governor", subject="cpu", status="fail", message="m")
    path = write_textfile(tmp_path / "new", "gate", [r], run_id="g1",
                          started=datetime.now(timezone.utc), duration_s=0.5,
                          gate={"pre-job": {"n1": True, "n2": False}})
    assert path == tmp_path / "new" / "stetho-gate.prom"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    blocked = {lb["node"]: v for lb, v in _samples(path, "stetho_gate_blocked")}
    assert blocked == {"n1": 1.0, "n2": 0.0}
    (afile := tmp_path / "a-file").write_text("")  # a folder that cannot be made
    with pytest.raises(ConfigError, match="cannot write the textfile"):
        write_textfile(afile / "tf", "check", [r], run_id="c",
                       started=datetime.now(timezone.utc), duration_s=0.1)


def test_textfile_dir_comes_from_the_config_file_and_db_is_given_only_when_set(tmp_path):
    from stetho import config

    toml = tmp_path / "stetho.toml"
    toml.write_text('textfile_dir = "tf"\n')
    cfg = config.load(env={}, files=[toml])
    assert cfg.textfile_dir == tmp_path / "tf"
    assert "textfile_dir" in cfg.given and "db" not in cfg.given
    assert "db" in config.load(env={"STETHO_DB": str(tmp_path / "h.db")}, files=[]).given
    assert "db" in cfg.with_flags(db=str(tmp_path / "x.db")).given
    assert "db" not in cfg.with_flags(db=None).given


def test_a_gate_output_that_cannot_be_written_leaves_the_verdict_as_it_is(tmp_path):
    """The run folder and the textfile are sinks: a full or read-only disk is a warning the
    CLI prints, never a changed verdict (a prolog must not fail on it)."""
    from stetho import gate

    (afile := tmp_path / "a-file").write_text("")
    outcome = gate.run(gate.GateRequest(policy="pre-job", nodes="n1", out=afile / "runs",
                                        reports=False, textfile_dir=afile / "tf"),
                       db=tmp_path / "h.db")
    # pre-job blocks on errors: a node with no results is blocked (exit 1)
    assert outcome.exit_code == 1 and outcome.run_dir is None and outcome.textfile is None
    assert len(outcome.output_problems) == 2
    assert "run folder" in outcome.output_problems[0]
    assert "cannot write the textfile" in outcome.output_problems[1]
    ok = gate.run(gate.GateRequest(policy="pre-job", nodes="n1", out=tmp_path / "runs",
                                   reports=False, textfile_dir=tmp_path / "tf"),
                  db=tmp_path / "h.db")
    assert ok.exit_code == 1 and ok.output_problems == []
    assert ok.run_dir is not None and (ok.run_dir / "index.html").is_file()
    assert json.loads((ok.run_dir / "results.json").read_text())["exit_code"] == 1
    blocked = _samples(tmp_path / "tf" / "stetho-gate.prom", "stetho_gate_blocked")
    # every gate series says its mode (enforce, or shadow for a policy only watched)
    assert blocked == [({"command": "gate", "policy": "pre-job", "mode": "enforce",
                         "node": "n1"}, 1.0)]
