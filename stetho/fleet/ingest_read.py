"""Reading a batch's spool files into their nodes' states, on both cores when it pays.

Each file is read, digested, verified (owner, size, signature, its node's name everywhere)
and parsed without its evidence (stetho.fleet.lazy); its node's files are written into the
run folder. That is all per-file work with no shared state, so a batch of READ_IN_POOL files
or more is read by worker processes (one a core) while the main process only gathers what
they send back: results, summary, busy, digest, or the file's refusal. Recording, the ledger
and the moves stay in the main process (stetho.fleet.ingest), so exactly-once is unchanged:
a worker writes nothing but the run folder's per-node files.

A worker closes its copy of the ingest lock's descriptor, takes SIGTERM's default (the CLI's
handler finishes a batch: in a worker it would ignore the pool's terminate) and dies with its
parent (Linux PR_SET_PDEATHSIG), so a killed ingest leaves no worker holding the lock or an
output pipe.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.core.forked import worker_signals
from stetho.evidence import busy as busy_mod
from stetho.fleet.finish import cores, save_host
from stetho.spool.files import SpoolError, SpoolFile

if TYPE_CHECKING:
    from stetho.checking.nodes import NodeSummary
    from stetho.fleet.outcome import Outcome
    from stetho.results import Result

#: From this many files a batch is read by worker processes (below, their start costs more).
READ_IN_POOL = 64


@dataclass
class Taken:
    """What became of one file: its digest ('' when unreadable) and either why it is refused
    or what its node said."""

    node: str
    digest: str = ""
    error: str | None = None
    kind: str = ""
    results: list[Result] = field(default_factory=list)
    summary: NodeSummary | None = None
    busy: busy_mod.Busy | None = None


@dataclass(frozen=True)
class Reader:
    """How every file of a batch is read: the controller's secret, the size cap, the run
    folder its node's files go into."""

    secret: bytes | None
    cap: int
    run_dir: Path

    def __call__(self, f: SpoolFile) -> Taken:
        from stetho.spool.reader import digest_of, parse, read_bytes

        try:
            data = read_bytes(f, self.cap)
        except SpoolError as exc:
            return Taken(f.node, error=str(exc))
        digest = digest_of(data)
        try:
            entry = parse(f, data, secret=self.secret, lazy=True, digest=digest)
            busy = _busy(entry.outcome, f)
        except SpoolError as exc:
            return Taken(f.node, digest, error=str(exc))
        out = entry.outcome
        save_host(self.run_dir, f.node, out)
        return Taken(f.node, digest, None, entry.kind, out.results, out.summary, busy)


def read_all(reader: Reader, files: list[SpoolFile], workers: int | None = None,
             keep_fd: int | None = None) -> Generator[Taken, None, None]:
    """Each file read, in order. `workers`: processes (None: one a core from READ_IN_POOL
    files on; 0 or 1: in this process). `keep_fd`: the lock descriptor workers close."""
    if workers is None:
        workers = cores() if len(files) >= READ_IN_POOL else 0
    workers = min(workers, len(files))
    if workers <= 1:
        yield from map(reader, files)
        return
    import multiprocessing

    ctx = multiprocessing.get_context("fork")  # the parsers are loaded: no start-up to pay
    with ctx.Pool(workers, initializer=_worker_start, initargs=(os.getpid(), keep_fd)) as pool:
        yield from pool.imap(reader, files, chunksize=max(1, min(16, len(files) // workers
                                                                 // 8)))
        pool.close()  # every file is read: the workers exit on their own
        pool.join()


def share(results: list[Result], seen: dict[str, str]) -> None:
    """One copy of each text among the batch's results (check names, statuses, subjects,
    the messages and remediations nodes share): the batch's results stay in memory until
    it is recorded, ten thousand nodes' worth of them."""
    for r in results:
        d = r.__dict__
        for k, v in d.items():
            if type(v) is str:
                d[k] = seen.setdefault(v, v)


def _worker_start(parent: int, lock_fd: int | None) -> None:
    worker_signals()  # the CLI's handlers (finish the batch) are the main process's
    if lock_fd is not None:
        try:
            os.close(lock_fd)
        except OSError:
            pass
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the pool's own shutdown still applies
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _busy(out: Outcome, f: SpoolFile) -> busy_mod.Busy | None:
    """What the node said it was running (None: it was not asked), from its evidence."""
    if out.evidence is not None:
        return busy_mod.from_bundle(out.evidence)
    if out.evidence_raw is None:
        return None
    from stetho.evidence.bundle import ProbeRecord
    from stetho.fleet import lazy

    try:
        rec = lazy.busy_record(out.evidence_raw)
        return busy_mod.interpret(ProbeRecord.from_json(rec)) if rec is not None else None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SpoolError(f"spool file {f.path.name}: unreadable busy probe in its evidence "
                         f"({type(exc).__name__}: {str(exc)[:200]})") from None
