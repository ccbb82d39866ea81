"""The tail every fleet run shares once its nodes have reported (`stetho sweep` through
Ansible or Slurm, `stetho ingest` from the spool): what killed checks left is evaluated, the
counter checks are judged again against history, nodes with nothing are errors, the fleet
checks compare peers of one profile, the run is recorded, and the run folder, reports, alerts,
run page and textfile are written. One function, so every way in judges the same.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from stetho.checking.nodes import NodeSummary
from stetho.evidence.bundle import Bundle
from stetho.evidence.busy import Busy
from stetho.fleet import outcome as outcome_mod
from stetho.results import Result, exit_code
from stetho.sinks.suite import SuiteSummary


@dataclass
class HostState:
    name: str
    done: bool = False
    results: list[Result] = field(default_factory=list)
    error: str | None = None
    install_failed: str | None = None
    busy: Busy | None = None  # what the node said before anything invasive (None: not asked)
    killed: str | None = None  # the hard timeout killed its check: why, while its evidence comes
    partial: Bundle | None = None  # the evidence a killed check left, evaluated here
    #: the summary the node sent (the ingest keeps it here; else read from summary.json)
    summary: NodeSummary | None = None


@dataclass
class SweepResult:
    run_dir: Path
    results: list[Result]
    hosts: dict[str, HostState]
    suite: SuiteSummary | None = None  # with --bench: the suite's night over the fleet
    #: what of the run folder could not be written (a full disk): the verdict stands
    output_problems: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return exit_code(self.results)



@dataclass
class Finish:
    """How a fleet run's tail differs by the way in: the history run's kind and command, the
    page's title, what a node with nothing gets (`missing`, and `remediation` per node), the
    runner's status for summary.json, and `then`: statements run in the history's own
    transaction when the run is recorded (the ingest's ledger), so both land or neither."""

    kind: str
    command: str
    title: str
    missing: str
    remediation: Callable[[str], str]
    probe: str = "ansible"
    db: Path | None = None
    reports: bool = True
    kb_repo: str | None = None
    textfile: Path | None = None
    bench: str | None = None
    runner: dict[str, Any] = field(default_factory=dict)
    gate: str = "nightly sweep"
    then: Callable[[sqlite3.Connection], None] | None = None


def finish(run_dir: Path, hosts: dict[str, HostState], run_id: str, started: datetime,
           f: Finish) -> SweepResult:
    """The fleet's verdict from what its hosts reported (see the module's docstring)."""
    evaluate_partial(run_dir, hosts)
    if f.db is not None:
        judge_windows(run_dir, hosts, f.db)
    results: list[Result] = []
    problems: list[str] = []
    for name in sorted(hosts):
        st = hosts[name]
        if not st.done:
            st.done = True
            st.error = st.install_failed or st.killed or f.missing
        if st.error:
            st.results = [host_error(name, st.error, f.remediation(name), f.probe)]
            try:
                write_results(run_dir / "hosts" / name / "results.json", st.results)
            except OSError as exc:
                problems.append(cannot_write(exc, run_dir / "hosts" / name))
        results.extend(st.results)
    summaries = node_summaries(run_dir, hosts)
    from stetho.checking import fleet as fleetchecks

    results.extend(fleetchecks.evaluate(list(summaries.values())))
    if f.db is not None:
        from stetho.history import recording

        results.extend(recording.after_run(f.kind, run_id, results, summaries, f.db,
                                           command=f.command, run_dir=str(run_dir),
                                           then=f.then))
    suite = None
    try:
        suite = write_run_folder(run_dir, results, hosts, f, run_id, started)
    except OSError as exc:  # the verdict is in memory: it is shown, the failure named
        problems.append(cannot_write(exc, run_dir))
    return SweepResult(run_dir, results, hosts, suite, problems)


def cannot_write(exc: OSError, where: Path) -> str:
    """A write that failed, in words: the file (or the folder it was going to) and why."""
    return f"cannot write {exc.filename or where}: {exc.strerror or exc}"


def write_run_folder(run_dir: Path, results: list[Result], hosts: dict[str, HostState],
                     opts: Finish, run_id: str, started: datetime) -> SuiteSummary | None:
    """The fleet's files, the failing nodes' diagnosis reports, then the run page linking
    them (and, with a knowledge base, the rules' accuracy); with --bench, the suite's night
    in all of them; with a textfile, the results and the accuracy for node_exporter."""
    from stetho.fleet import run_folder
    from stetho.publish import accuracy as accuracy_mod
    from stetho.sinks import suite as suite_mod

    busy = {h: s.busy.skip_reason() for h, s in sorted(hosts.items())
            if s.busy and not s.busy.idle}
    suite = suite_mod.summarize(opts.bench, results, hosts, busy) if opts.bench else None
    run_folder.write_reports(
        run_dir, results, run_id=run_id, hosts=len(hosts), busy=busy,
        unreachable=[h for h, s in hosts.items() if s.error and s.error.startswith("unreachable")],
        ansible=opts.runner, suite=suite, command=opts.kind)
    written: dict[str, Path] = {}
    if opts.reports:
        from stetho.diagnosis import runs

        written = {d.node: path for d, path in runs.diagnose_results(
            results, run_dir=run_dir, run=run_id, out=run_dir / "reports", db=opts.db,
            gate=opts.gate, kb_repo=opts.kb_repo)}
    acc = accuracy_mod.of_repo_or_why(opts.kb_repo, rules=_causes() if opts.kb_repo else ())
    title = f"{opts.title} {run_id}" + (f" ({opts.bench} suite)" if opts.bench else "")
    run_folder.write_page(run_dir, results, title=title, reports=written, suite=suite,
                          accuracy=acc)
    if opts.textfile is not None:
        try:
            run_folder.write_textfile(opts.textfile, results, run_id=run_id, started=started,
                                      accuracy=acc)
        except OSError as exc:  # named by its own path, not the run folder's
            raise OSError(exc.errno, exc.strerror, str(exc.filename or opts.textfile)) from None
    return suite



def _causes() -> Any:
    """The rules' causes, for the accuracy a knowledge base is scored on: the rules are read
    only then, not on every run (a healthy sweep diagnoses nothing)."""
    from stetho.diagnosis.rules import causes

    return causes()


def evaluate_partial(run_dir: Path, hosts: dict[str, HostState]) -> None:
    """Evaluate here what killed checks left: what finished keeps its verdict, each probe that
    did not is `timeout` in the bundle, so its checks are errors (never a pass)."""
    from stetho import check

    partial = {n: st for n, st in hosts.items() if st.partial is not None}
    if not partial:
        return
    bundles = tuple(st.partial for st in partial.values() if st.partial is not None)
    run = check.run(check.CheckRequest(command="sweep", bundles=bundles))
    for name, st in partial.items():
        assert st.partial is not None
        st.results = [r for r in run.results if r.node == name] + [host_error(
            name, st.killed or "killed", sweep_again(name), "ansible")]
        save_host(run_dir, name, outcome_mod.Outcome.of(st.results, st.partial,
                                                         run.summaries.get(name)))


def judge_windows(run_dir: Path, hosts: dict[str, HostState], db: Path) -> None:
    """A node's own run has no history (`--no-history`: it lives here), so it judged its
    counters on their counts since boot. Here, where the history is, the counter checks run
    again over the evidence each node sent, against its earlier readings, and their results
    replace the node's (and its results.json). Only nodes the history holds readings of are
    judged again: without one the window judges the same counts the node judged (a fresh
    history costs nothing; the work scales with the nodes that have a past)."""
    from stetho import check
    from stetho.checking.windowed import WINDOWED_CHECKS

    ready = {n for n, st in hosts.items() if st.done and not st.error and st.partial is None}
    files = {n: run_dir / "hosts" / n / "evidence.json" for n in sorted(with_readings(db, ready))}
    files = {n: p for n, p in files.items() if p.is_file()}
    if not files:
        return
    run = check.run(check.CheckRequest(
        command="sweep", evidence=tuple(str(p) for p in files.values()), metrics=False,
        summaries=False, select=" or ".join(WINDOWED_CHECKS), db=db, fleet=False,
        workers=cores() if len(files) >= JUDGE_IN_POOL and cores() > 1 else None))
    judged: dict[str, list[Result]] = {}
    for r in run.results:
        if r.check in WINDOWED_CHECKS:  # -k selects by name: only these replace the node's
            judged.setdefault(r.node, []).append(r)
    for name in files:
        st = hosts[name]
        if name not in judged:
            continue
        st.results = [r for r in st.results if r.check not in WINDOWED_CHECKS] + judged[name]
        write_results(run_dir / "hosts" / name / "results.json", st.results)



def with_readings(db: Path, nodes: set[str]) -> set[str]:
    """Those of `nodes` the history holds any counter reading of (a superset of those with
    one in their window); every one of them where the history cannot be read (the re-judge
    then names why), none where it does not exist yet."""
    if not nodes or not db.exists():
        return set()
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            names = sorted(nodes)
            found: set[str] = set()
            for i in range(0, len(names), 500):
                part = names[i:i + 500]
                found.update(n for (n,) in conn.execute(
                    "SELECT n.name FROM nodes n WHERE n.name IN "
                    f"({','.join('?' * len(part))}) AND EXISTS "
                    "(SELECT 1 FROM metrics m WHERE m.node_id = n.id)", part))
            return found
        finally:
            conn.close()
    except sqlite3.Error:
        return set(nodes)


def save_host(run_dir: Path, name: str, out: outcome_mod.Outcome) -> None:
    """A node's files in the run folder; evidence the ingest kept unparsed is written as the
    bytes the node sent (Bundle.load reads either)."""
    from stetho.core import atomic

    folder = run_dir / "hosts" / name
    folder.mkdir(parents=True, exist_ok=True)
    if out.evidence is not None:
        out.evidence.save(folder / "evidence.json")
    elif out.evidence_raw is not None:
        atomic.write(folder / "evidence.json", out.evidence_raw)
    write_results(folder / "results.json", out.results)
    (folder / "junit.xml").write_text(out.junit, encoding="utf-8")
    if out.summary:  # compact: the ingest writes ten thousand and keeps them in memory
        atomic.write(folder / "summary.json", json.dumps(out.summary, separators=(",", ":")))


def host_error(name: str, message: str, remediation: str, probe: str) -> Result:
    """The one result of a node that brought back nothing usable: an error, never a pass."""
    return Result(node=name, check="sweep", subject="", status="error", message=message,
                  remediation=remediation, probe=probe)


def sweep_again(name: str) -> str:
    return ("fix the node's reachability/installation and sweep it again "
            f"(`stetho sweep --limit {name}`)")


def node_summaries(run_dir: Path, hosts: dict[str, HostState]) -> dict[str, NodeSummary]:
    """Each host's summary (versions, busbw, metrics) from the outcome it sent back."""
    out: dict[str, NodeSummary] = {}
    for name in sorted(hosts):
        path = run_dir / "hosts" / name / "summary.json"
        if hosts[name].summary:
            out[name] = hosts[name].summary  # type: ignore[assignment]
        elif path.is_file():
            out[name] = json.loads(path.read_text())
    return out


def write_results(path: Path, results: list[Result]) -> None:
    """A host's results.json, compact: indented, json takes its pure-Python encoder, and
    writing ten thousand hosts' files cost more than reading them (bench/ingest.py)."""
    from stetho.core import atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write(path, json.dumps(results_doc(results), separators=(",", ":"), default=str))


def results_doc(results: list[Result]) -> dict[str, Any]:
    from stetho.sinks import json_out

    return json_out.document(results)


#: From this many nodes the re-judgement of counter windows is spread over one process a
#: core (pytest-xdist, as a replay is): below, the workers' start costs more than it saves.
JUDGE_IN_POOL = 128


def cores() -> int:
    """The cores this process may run on (a cgroup or taskset's, not the machine's)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
