"""Writing a node's outcome into the spool, and listing what waits there.

Layout: `<spool>/<node>/<run_id>.json`, one file per node and run; `<spool>/<node>/ingested/`
and `<spool>/<node>/bad/` (with a `.why` beside each) once the controller has taken it.
A file is two lines: the body (one compact JSON object: schema, node, run_id, kind, time,
command, outcome) and, when the node holds a key, `{"sig": "hmac-sha256:..."}` over the
body's exact bytes (stetho.spool.keys).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.core import atomic, hostlist
from stetho.core.record import record
from stetho.errors import ConfigError

if TYPE_CHECKING:
    from stetho.fleet.outcome import Outcome

SCHEMA = "stetho.spool"
VERSION = 1
#: The runs that spool, by what started them (a file's `kind`; others are refused).
KINDS = ("check", "sweep-slurm", "health-check", "prolog", "epilog", "nightly",
         "gate-health-check", "gate-prolog")
#: A run id as it may appear in a file name: no separator, no dot-name, bounded.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,95}")
#: The folders the controller moves files into, beside those still pending.
DONE, BAD = "ingested", "bad"


class SpoolError(ValueError):
    """A spool file cannot be taken as its node's outcome: the message says why."""


@record
class SpoolFile:
    """A pending file: its path, the node it is about (its folder), the run id of its name."""

    path: Path
    node: str
    run_id: str


def node_dir(spool: Path, node: str) -> Path:
    """`<spool>/<node>/`: the only folder a node's files are taken from as that node's."""
    return spool / hostlist.validate(node, f"spool {spool}")


def check_run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id) or run_id.endswith(".json"):
        raise ConfigError(f"invalid spool run id {run_id!r}: letters, digits, '_', '.', ':' "
                          "and '-' only, at most 96")
    return run_id


def write(spool: Path, outcome: Outcome, *, run_id: str, kind: str, when: float,
          key: bytes | None = None, command: str = "",
          detail: dict[str, object] | None = None) -> Path:
    """Leave `outcome` in `<spool>/<outcome.node>/<run_id>.json`, atomically (a dot-name,
    fsync, rename: a node that crashes after the rename leaves a whole file), signed with the
    node's `key` when given. `detail`: what the run adds for people (a gate hook's verdict:
    blocked, job, policy), kept in the file, never judged. Returns the file's path."""
    from stetho.spool import keys

    if kind not in KINDS:
        raise ConfigError(f"unknown spool kind {kind!r} (known: {', '.join(KINDS)})")
    folder = node_dir(spool, outcome.node)
    name = f"{check_run_id(run_id)}.json"
    body = json.dumps({"schema": SCHEMA, "schema_version": VERSION, "node": outcome.node,
                       "run_id": run_id, "kind": kind, "time": when, "command": command,
                       "outcome": outcome.to_json(), **({"detail": detail} if detail else {})},
                      separators=(",", ":"), default=str).encode()
    data = body + b"\n"
    if key is not None:
        data += json.dumps({"sig": keys.sign(key, body)}).encode() + b"\n"
    folder.mkdir(parents=True, exist_ok=True)
    return atomic.write(folder / name, data, fsync=True)


def pending(spool: Path, run: str | None = None, nodes: frozenset[str] | None = None
            ) -> tuple[list[SpoolFile], list[str]]:
    """The files waiting in `spool` (only run `run`'s, only `nodes`' when given), oldest
    first per node (run ids start with their UTC time), and the folder entries that are no
    node's folder (named in words, never taken)."""
    files: list[SpoolFile] = []
    strays: list[str] = []
    try:
        entries = sorted(spool.iterdir())
    except OSError as exc:
        raise ConfigError(f"cannot read the spool {spool}: {exc.strerror or exc}") from None
    for folder in entries:
        if folder.name.startswith("."):
            continue
        try:
            node = hostlist.validate(folder.name)
        except ConfigError:
            strays.append(f"{folder}: not a node's folder (invalid node name)")
            continue
        if not folder.is_dir() or folder.is_symlink():
            strays.append(f"{folder}: not a folder; a node's files go in {folder}/")
            continue
        if nodes is not None and node not in nodes:
            continue
        names = [run + ".json"] if run is not None else sorted(
            e.name for e in _scan(folder) if e.name.endswith(".json"))
        for name in names:
            path = folder / name
            if name.startswith(".") or not (path.is_file() or path.is_symlink()):
                continue
            files.append(SpoolFile(path, node, name[:-len(".json")]))
    return files, strays


def _scan(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []
