"""`stetho report` over a real run folder: warn-level causes get a watch report, reporting
twice writes one report, a node without its evidence bundle is said to be so, and the
knowledge base (a real git repository) makes repeat offenders visible."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from stetho.diagnosis import runs
from stetho.diagnosis.report import write
from stetho.results import Result
from stetho.sinks import json_out

pytestmark = pytest.mark.xdist_group("faultsim")

RUN = "20251201T030000Z-abc123"


@pytest.fixture
def run_folder(tmp_path, fault_bundles, fault_results) -> Path:
    run_dir = tmp_path / "runs" / RUN
    results = []
    for node in ("riser", "governor", "optics", "healthy"):
        host = run_dir / "hosts" / node
        host.mkdir(parents=True)
        (host / "evidence.json").write_text((fault_bundles / f"{node}.json").read_text())
        results += [Result.from_json(r) for r in fault_results[node]]
    # a node whose bundle never came back: its results only
    results += [Result.from_json({**r, "node": "nobundle"}) for r in fault_results["xid79"]]
    (run_dir / "results.json").write_text(json_out.render(results))
    (run_dir / "meta.json").write_text(json.dumps({"run_id": RUN}))
    return run_dir


def _report(run_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", "report", str(run_dir), *args],
                          capture_output=True, text=True, timeout=300)


def test_watch_reports_idempotence_and_a_missing_bundle(run_folder, tmp_path):
    out = tmp_path / "reports"
    first = _report(run_folder, "--out", str(out), "--db", str(tmp_path / "none.db"))
    assert first.returncode == 0, first.stderr
    files = sorted(p.name for p in out.glob("*.md"))
    assert [f.split("-rpt-")[0] for f in files] == [
        "governor-cpu-governor", "nobundle-gpu-off-bus", "optics-optics-degrading",
        "riser-riser-pcie-slot"]
    lines = {ln.split(":")[0]: ln for ln in first.stdout.splitlines()}
    assert lines["optics"].startswith("optics: Optics degrading") and "[watch]" in lines["optics"]
    assert lines["riser"].startswith("riser: PCIe path of a GPU") and "[drain]" in lines["riser"]
    assert "healthy" not in first.stdout
    assert "note: No evidence bundle for nobundle" in first.stderr
    missing = next(out.glob("nobundle-*.md")).read_text()
    assert "No evidence bundle for nobundle" in missing
    optics = next(out.glob("optics-*.md")).read_text()
    assert "\ndisposition: watch\n" in optics and "**WATCH optics**" in optics
    before = {p.name: p.read_text() for p in out.iterdir()}
    again = _report(run_folder, "--out", str(out), "--db", str(tmp_path / "none.db"))
    assert again.returncode == 0, again.stderr
    assert {p.name: p.read_text() for p in out.iterdir()} == before


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
                   cwd=repo, check=True, capture_output=True)


def _seed_kb(repo: Path, d, dates: list[str], node: str | None = None,
             grew: bool = True) -> None:
    """Earlier reports of `d`; with `grew`, each with its first evidence counter grown (a new
    event), else the same evidence re-reported (one event)."""
    for i, date in enumerate(dates):
        top = d.hypotheses[0]
        if grew:
            first = replace(top.evidence[0], value=f"{(i + 1) * 100} (earlier)")
            top = replace(top, evidence=(first, *top.evidence[1:]))
        old = replace(d, id=f"rpt-old{i}-{node or d.node}", date=date, run=f"old-run-{i}",
                      node=node or d.node, hypotheses=(top, *d.hypotheses[1:]))
        day = repo / "reports" / date[:4] / date[5:7] / date[8:10]
        write(old, day)


@pytest.mark.parametrize("limit, replaced", [(None, True), ("5/30", False)])
def test_repeat_offenders_from_the_knowledge_base(run_folder, tmp_path, stetho_env, limit,
                                                  replaced):
    if limit:
        stetho_env.setenv("STETHO_REPEAT_LIMIT", limit)
    results = json_out.load((run_folder / "results.json").read_text())
    [(d, _)] = runs.diagnose_results(results, run_dir=run_folder, run=RUN,
                                     out=tmp_path / "first", nodes=["riser"], alert=False)
    kb = tmp_path / "kb"
    kb.mkdir()
    _git(kb, "init", "-q")
    # three in the last 30 days, one older; and the same cause on another node
    _seed_kb(kb, d, ["2025-11-05T03:00:00Z", "2025-11-19T03:00:00Z", "2025-11-28T03:00:00Z",
                     "2025-09-01T03:00:00Z"])
    _seed_kb(kb, d, ["2025-11-20T03:00:00Z"], node="gpu-other")
    _git(kb, "add", "-A")
    _git(kb, "commit", "-qm", "seed")
    [(d, path)] = runs.diagnose_results(results, run_dir=run_folder, run=RUN,
                                        out=tmp_path / "second", nodes=["riser"],
                                        kb_repo=str(kb), alert=False)
    assert [s.date for s in d.repeats] == ["2025-11-28", "2025-11-19", "2025-11-05"]
    assert [s.node for s in d.similar] == ["gpu-other"]
    assert d.replace_hardware is replaced
    text = path.read_text()
    assert ("1. Replace the hardware: riser had 3 earlier new events" in text) is replaced
    assert "Repeat offender: 3 earlier event(s) of riser" in text


def _night(tmp_path: Path, run: str, fault_bundles, fault_results, node: str = "eccdbe"
           ) -> tuple[Path, list[Result]]:
    run_dir = tmp_path / "runs" / run
    host = run_dir / "hosts" / node
    host.mkdir(parents=True)
    (host / "evidence.json").write_text((fault_bundles / f"{node}.json").read_text())
    results = [Result.from_json(r) for r in fault_results[node]]
    (run_dir / "results.json").write_text(json_out.render(results))
    return run_dir, results


@pytest.mark.parametrize("passed_between", [False, True])
def test_a_stale_dbe_reported_every_night_is_one_event(tmp_path, fault_bundles, fault_results,
                                                        passed_between):
    """Four nightly runs of the same GPU with the same two DBEs (nothing new: the counter did
    not grow, the Xid line is the same) are one event, not 'replace the hardware: reported 3
    times'. The same state after a night the node passed is a new event (a failure after a
    pass)."""
    from stetho.history.store import History, NodeRun

    kb = tmp_path / "kb"
    kb.mkdir()
    _git(kb, "init", "-q")
    db = tmp_path / "history.db"
    nights = [f"2025112{k}T030000Z-night{k}" for k in range(5, 9)]
    with History(db) as h:
        if passed_between:  # the night between the second and third report, all green
            healthy = [Result.from_json({**r, "node": "eccdbe"}) for r in fault_results["healthy"]]
            h.record("20251126T150000Z-day", "sweep", [NodeRun("eccdbe", "h100-sxm-8gpu",
                                                               healthy, [])], when=1764169200)
    for i, run in enumerate(nights):
        run_dir, results = _night(tmp_path, run, fault_bundles, fault_results)
        day = kb / "reports" / "2025" / "11" / run[6:8]
        [(d, _)] = runs.diagnose_results(results, run_dir=run_dir, run=run, out=day,
                                         db=db, kb_repo=str(kb), alert=False)
        assert d.cause == "gpu-memory-failing"
        _git(kb, "add", "-A")
        _git(kb, "commit", "-qm", f"night {i}")
    assert d.replace_hardware is False
    if passed_between:
        assert [s.date for s in d.repeats] == ["2025-11-25"]
    else:
        assert d.repeats == ()
    text = next((kb / "reports" / "2025" / "11" / "28").glob("*.md")).read_text()
    assert "Replace the hardware" not in text
    assert f"\nevent: {d.event}\n" in text


def _rowremap_on(tmp_path: Path, gpu: int) -> tuple[Path, list[Result]]:
    """The rowremap node again, its pending remap on another GPU: collected and checked."""
    from stetho import profiles
    from stetho.checking import run as checkrun
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    sim = build_node(tmp_path / "sim-other", "rowremap", [f"rowremap-pending=gpu{gpu}"])
    env, name = collect.sim_environment(str(sim))
    bundle = collect.collect(profiles.load("h100-sxm-8gpu"), env, name)
    path = tmp_path / "rowremap-other.json"
    bundle.save(path)
    return path, [r for r in checkrun.run([bundle]).results if r.node == name]


@pytest.mark.parametrize("same_gpu", [True, False])
def test_a_pending_remap_is_watch_and_escalates_when_it_returns_after_a_reset(
        tmp_path, fault_bundles, fault_results, same_gpu):
    """A pending row remap alone is watch (reset when idle), and two nights of the same
    pending remap are one event. After a night the node passed (the reset applied the remap),
    a pending remap again on the same GPU is a new event: the rule's escalation drains the
    node and replaces the GPU. On another GPU it is that GPU's first: watch. The passes come
    from the history, a real SQLite file."""
    from stetho.history.store import History, NodeRun

    kb = tmp_path / "kb"
    kb.mkdir()
    _git(kb, "init", "-q")
    db = tmp_path / "history.db"
    History(db).close()

    def night(k: int, other: tuple[Path, list[Result]] | None = None):
        run = f"2025112{k}T030000Z-night{k}"
        run_dir, results = _night(tmp_path, run, fault_bundles, fault_results, node="rowremap")
        if other is not None:
            (run_dir / "hosts" / "rowremap" / "evidence.json").write_text(other[0].read_text())
            results = other[1]
            (run_dir / "results.json").write_text(json_out.render(results))
        [(d, path)] = runs.diagnose_results(results, run_dir=run_dir, run=run,
                                            out=kb / "reports" / "2025" / "11" / f"2{k}",
                                            db=db, kb_repo=str(kb), alert=False)
        _git(kb, "add", "-A")
        _git(kb, "commit", "-qm", run)
        return d, path.read_text()

    for k in (4, 5):
        d, text = night(k)
        assert d.cause == "gpu-remap-pending" and d.disposition == "watch", (k, d.cause)
        assert d.repeats == () and not d.replace_hardware
        assert "\ndisposition: watch\n" in text and "Reset GPU" in text
        assert f"\nimplicated: {list(d.implicated)}".replace("'", '"') in text
    with History(db) as h:  # the GPU was reset on the 26th: the node passed its checks
        healthy = [Result.from_json({**r, "node": "rowremap"}) for r in fault_results["healthy"]]
        h.record("20251126T150000Z-day", "sweep", [NodeRun("rowremap", "h100-sxm-8gpu",
                                                           healthy, [])], when=1764169200)
    if not same_gpu:
        d, text = night(7, _rowremap_on(tmp_path, 2))
        assert d.cause == "gpu-remap-pending" and dict(d.top.evidence[0].where)["gpu"] == "2"
        assert d.repeats == () and not d.replace_hardware and d.disposition == "watch"
        return
    d, text = night(7)
    assert [s.date for s in d.repeats] == ["2025-11-24"]
    assert d.replace_hardware and d.disposition == "drain"
    assert "\ndisposition: drain\n" in text and "**DRAIN rowremap**" in text
    gpu = dict(d.top.evidence[0].where)["gpu"]
    assert "has a row remap pending again after the reset" in d.top.steps[0]
    assert f"RMA GPU {gpu}" in text and "1. Replace the hardware: rowremap had 1 earlier" in text


def test_a_pending_remap_with_a_remap_failure_is_failing_memory():
    """The same GPU with a remap failure too: gpu_ecc fails, so it is failing memory (drain),
    and the pending remap does not make it watch."""
    from stetho.diagnosis import engine
    from stetho.diagnosis.signals import NodeContext

    row = Result("n1", "gpu_ecc", "gpu3", "fail", "row remapping failed", value=0,
                 unit="uncorrectable ECC errors since the last reset", expected=0,
                 evidence="remapped rows corr=0 uncorr=1 pending=True failure=True")
    d = engine.diagnose(NodeContext("n1", [row]), run="20251201T030000Z-x")
    assert d.cause == "gpu-memory-failing" and d.disposition == "drain"
    assert "gpu-remap-pending" not in [h.cause for h in d.hypotheses]
