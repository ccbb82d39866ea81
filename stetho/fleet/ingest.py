"""`stetho ingest SPOOL`: the outcomes nodes left in the spool, judged as one fleet run.

One batch takes at most one pending file per node (its oldest), so every file a node left is
its own row in the history. Each file is read as its folder's node's (stetho.spool.reader):
what cannot be taken is that node's `error`, never a result for the node its content names.
Then the tail every sweep has (stetho.fleet.finish): counters judged again against history,
fleet checks over peers, recording, run folder, reports, alerts, textfile.

Exactly once: the ledger rows of the batch's files are written in the same SQLite transaction
as the run's history rows (stetho.history.ledger); only then are the files moved to
`<node>/ingested/` (or `<node>/bad/`, with a `.why`). A crash before the commit leaves
nothing recorded and every file in place; after it, the next ingest finds each file's key in
the ledger and moves it without recording it again. Without a history (`db` None) there is no
ledger: files are moved once the run folder is written.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from stetho.core.locks import SweepLock, SweepLocked
from stetho.errors import ConfigError
from stetho.fleet.finish import Finish, HostState, SweepResult, finish
from stetho.fleet.ingest_read import Reader, Taken, read_all, share
from stetho.spool.files import BAD, DONE, SpoolError, SpoolFile, pending


@dataclass
class IngestOptions:
    spool: Path
    out: Path  # run folders: out/<run id>/
    db: Path | None = None  # history (and the ledger); None: neither, files moved when written
    #: nodes that must report: one with no file (of `run`, when given) is its `error`
    expect: list[str] | None = None
    run: str | None = None  # only files of this run id; None: every pending file
    reports: bool = True
    kb_repo: str | None = None
    textfile: Path | None = None
    progress: Callable[[str, int, int, int], None] | None = None  # node, done, total, failing
    #: the controller's spool secret: then only files signed with their node's key are taken
    secret: bytes | None = None
    run_id: str | None = None  # this ingest's run id (None: a new one)
    max_bytes: int | None = None  # a bigger file is its node's error (None: max_bundle_mb)
    warn: Callable[[str], None] | None = None  # spool entries that are no node's (stderr)
    #: the history run's kind (when the files' own kinds differ) and command
    kind: str = "ingest"
    command: str = ""
    #: hosts the caller already settled (done, with results or an error, busy): merged in
    #: before the run's tail, never looked for in the spool (sweep --via slurm's busy,
    #: drained and down nodes, and the nodes srun killed)
    decided: dict[str, HostState] = field(default_factory=dict)
    #: processes reading the batch's files (None: one a core for a big batch; 0: this one)
    workers: int | None = None


@dataclass
class IngestResult(SweepResult):
    """A sweep's result, and what became of the batch's files: taken as their nodes'
    outcomes, refused (node -> why; in <node>/bad/), expected with none, and files settled
    without recording (their key was already in the ledger)."""

    taken: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    settled: int = 0


@dataclass
class _Batch:
    files: dict[str, SpoolFile] = field(default_factory=dict)  # node -> its file this batch
    digests: dict[str, str] = field(default_factory=dict)  # node -> file digest
    bad: dict[str, str] = field(default_factory=dict)  # node -> why its file is refused
    settled: set[str] = field(default_factory=set)  # nodes whose file the ledger held
    kinds: set[str] = field(default_factory=set)  # what ran on the nodes (files' kinds)
    strings: dict[str, str] = field(default_factory=dict)  # one copy of each result text


def ingest(opts: IngestOptions) -> IngestResult:
    """One batch of the spool as one fleet run (see the module's docstring). With nothing
    pending and nothing expected, no run folder is made and the result has no hosts."""
    from stetho.history.store import new_run_id

    if not opts.spool.is_dir():
        raise ConfigError(f"result spool {opts.spool}: no such folder")
    run_id = opts.run_id or new_run_id()
    try:
        lock = SweepLock(opts.spool / ".ingest.lock", run_id).__enter__()
    except SweepLocked as exc:
        raise SweepLocked(str(exc).replace("another sweep", "another ingest of this spool")
                          ) from None
    try:
        # the workers reading files close their copy of the lock's descriptor
        return _ingest(opts, run_id, getattr(lock, "_fd", None))
    finally:
        lock.__exit__(None, None, None)


def has_pending(spool: Path, run: str | None = None) -> bool:
    """Whether any file waits in `spool` (of run `run`)."""
    return bool(pending(spool, run)[0])


def _ingest(opts: IngestOptions, run_id: str, lock_fd: int | None = None) -> IngestResult:
    from stetho import config

    say = opts.warn or (lambda m: print(f"stetho: warning: {m}", file=sys.stderr))
    expect = list(dict.fromkeys(opts.expect or []))
    files, strays = pending(opts.spool, opts.run)
    for line in strays:
        say(line)
    batch = _Batch()
    for f in files:
        if f.node not in opts.decided:
            batch.files.setdefault(f.node, f)
    expect = [n for n in expect if n not in opts.decided]
    _settle_known(opts, batch)
    # an expected node whose file an earlier ingest recorded (then died) has reported
    reported = batch.settled | _recorded_runs(opts, [n for n in expect
                                                     if n not in batch.files])
    expect = [n for n in expect if n not in reported]
    started = datetime.now(timezone.utc)
    run_dir = opts.out / run_id
    if not batch.files and not expect and not opts.decided:
        return IngestResult(run_dir, [], {}, settled=len(batch.settled))
    (run_dir / "hosts").mkdir(parents=True)
    names = sorted(set(batch.files) | set(expect))
    hosts = {n: HostState(n) for n in names}
    cap = opts.max_bytes if opts.max_bytes is not None else int(
        config.active().max_bundle_mb * 2**20)
    failing = 0
    taken = read_all(Reader(opts.secret, cap, run_dir),
                     [batch.files[n] for n in names if n in batch.files], opts.workers,
                     lock_fd)
    for done, name in enumerate(names, 1):
        st = hosts[name]
        st.done = True
        if name not in batch.files:
            st.error = (f"no outcome from {name} in the spool {opts.spool}"
                        + (f" for run {opts.run}" if opts.run else ""))
        else:
            _apply(batch, next(taken), st)
        failing += bool(st.error or any(r.status in ("fail", "error") for r in st.results))
        if opts.progress:
            opts.progress(name, done, len(names), failing)
    taken.close()  # the workers end here
    hosts.update(opts.decided)
    # a run of one kind keeps its name in history (gate-prolog, sweep-slurm, ...)
    kind = next(iter(batch.kinds)) if len(batch.kinds) == 1 else opts.kind
    result = finish(run_dir, hosts, run_id, started, Finish(
        kind=kind, command=opts.command or f"ingest {opts.spool}", title="stetho ingest",
        missing="no outcome in the spool", remediation=lambda n: _remediation(opts.spool, n),
        probe="spool", db=opts.db, reports=opts.reports, kb_repo=opts.kb_repo,
        textfile=opts.textfile, runner={"status": "ingested", "spool": str(opts.spool)},
        gate="spool ingest", then=_ledger_rows(batch, run_id, started.timestamp())))
    _move_recorded(opts, batch)
    return IngestResult(result.run_dir, result.results, result.hosts, result.suite,
                        result.output_problems,
                        taken=sorted(n for n in batch.files if n not in batch.bad),
                        refused=dict(sorted(batch.bad.items())),
                        missing=sorted(n for n in expect if n not in batch.files),
                        settled=len(batch.settled))


def _apply(batch: _Batch, t: Taken, st: HostState) -> None:
    batch.digests[t.node] = t.digest
    if t.error is not None:
        batch.bad[t.node] = st.error = t.error
        return
    batch.kinds.add(t.kind)
    share(t.results, batch.strings)
    st.results, st.summary, st.busy = t.results, t.summary, t.busy


def _remediation(spool: Path, node: str) -> str:
    return (f"see {spool / node}/bad/ for why its file was refused; check the node again "
            f"(`stetho check --local --spool {spool}` on {node})")


def _ledger_rows(batch: _Batch, run_id: str, when: float
                 ) -> Callable[[object], None]:
    from stetho.history import ledger

    rows = [ledger.Row(n, f.run_id, batch.digests.get(n, ""),
                       "bad" if n in batch.bad else "ingested")
            for n, f in sorted(batch.files.items())]

    def then(conn: object) -> None:
        import sqlite3

        assert isinstance(conn, sqlite3.Connection)
        ledger.add(conn, rows, run_id, when)

    return then


def _settle_known(opts: IngestOptions, batch: _Batch) -> None:
    """Move the files whose key the ledger already holds (a crash after the commit, a copy
    dropped again) to where their verdict sends them, and out of the batch."""
    if opts.db is None or not batch.files:
        return
    from stetho.history.backend import open_history

    with open_history(opts.db) as h:
        seen = h.ledger_known((n, f.run_id) for n, f in batch.files.items())
    from stetho import config
    from stetho.spool.reader import digest_of, read_bytes

    cap = opts.max_bytes if opts.max_bytes is not None else int(
        config.active().max_bundle_mb * 2**20)
    for (node, _key), (verdict, digest) in seen.items():
        f = batch.files.pop(node)
        batch.settled.add(node)
        try:
            same = digest_of(read_bytes(f, cap)) == digest
        except SpoolError:
            same = verdict == "bad"  # unreadable then, unreadable now: the same refusal
        if not same:  # a new file under a recorded name: never recorded, never silent
            _move(f, BAD, f"spool file {f.path.name}: its run id was already ingested for "
                  f"{node} with other content ({digest}); give each run its own id")
        else:
            _move(f, BAD if verdict == "bad" else DONE,
                  "already recorded by an earlier ingest" if verdict == "bad" else None)


def _recorded_runs(opts: IngestOptions, nodes: list[str]) -> set[str]:
    """Those of `nodes` the ledger holds run `opts.run` of (their file already moved)."""
    if opts.db is None or opts.run is None or not nodes:
        return set()
    from stetho.history.backend import open_history

    with open_history(opts.db) as h:
        return {n for n, _k in h.ledger_known((n, opts.run) for n in nodes)}


def _move_recorded(opts: IngestOptions, batch: _Batch) -> None:
    """Move each file of the batch that is recorded (the ledger holds its key; without a
    history: every file) to ingested/ or bad/."""
    recorded: set[str] = set(batch.files)
    if opts.db is not None:
        from stetho.history.backend import open_history

        with open_history(opts.db) as h:
            recorded = {n for n, _k in h.ledger_known(
                (n, f.run_id) for n, f in batch.files.items())}
    for node in sorted(recorded):
        why = batch.bad.get(node)
        _move(batch.files[node], BAD if why is not None else DONE, why)


def _move(f: SpoolFile, where: str, why: str | None) -> None:
    folder = f.path.parent / where
    folder.mkdir(exist_ok=True)
    if why is not None:
        (folder / f"{f.path.name}.why").write_text(why + "\n")
    try:
        os.replace(f.path, folder / f.path.name)
    except FileNotFoundError:  # another ingest moved it meanwhile (it holds no lock on it)
        pass
