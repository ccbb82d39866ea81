"""Verdicts the Slurm hooks leave in a shared folder, and their way into the history.

A prolog or health check runs on a compute node: the history it records into is the node's
own, and the controller never hears of it. So each hook also writes its verdict as one JSON
file into the result spool (a folder the nodes and the controller share, STETHO_RESULT_SPOOL),
and `stetho history ingest` records every file there into the history, moving it to
`ingested/` only once recorded. A file is written under a dot-name and renamed, so ingest
never reads half of one; a run id the history already holds is not recorded again, so a crash
between recording and moving loses nothing and counts nothing twice. A file that cannot be
read goes to `bad/` with the reason beside it, never silently dropped.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stetho.core import atomic
from stetho.results import Result

#: The keys every verdict file carries.
REQUIRED = ("run_id", "node", "kind", "time", "exit_code", "results")


@dataclass
class Ingested:
    """What one `ingest` did: runs recorded, files already in the history, files refused."""

    recorded: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        text = (f"ingested {len(self.recorded)} verdicts"
                + (f", {len(self.duplicates)} already in the history" if self.duplicates else ""))
        return text + (f", {len(self.bad)} unreadable (moved to bad/)" if self.bad else "")


def write(folder: Path, doc: dict[str, Any]) -> Path:
    """Leave `doc` (a verdict with the REQUIRED keys) in the spool folder, atomically."""
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"verdict lacks {', '.join(missing)}")
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{doc['run_id']}.{doc['node']}.json"
    # fsync: a node that crashes after the rename leaves a whole file
    return atomic.write(folder / name, json.dumps(doc, default=str), fsync=True)


def _read(path: Path) -> tuple[dict[str, Any], list[Result]]:
    """A verdict file, or ValueError saying why it cannot be recorded: not JSON (or NaN, a
    lone surrogate, a huge integer, deep nesting), a key missing, a value out of its type or
    range, or a result for any node but the file's own (a node's verdict speaks only for
    that node)."""
    from stetho.core import hostlist, untrusted
    from stetho.errors import ConfigError

    doc = untrusted.loads(path.read_bytes())
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"lacks {', '.join(missing)}")
    try:
        node = hostlist.validate(str(doc["node"]))
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    if not untrusted.finite(doc["time"]) or not isinstance(doc["exit_code"], int) \
            or not 0 <= doc["exit_code"] < 256:
        raise ValueError("time or exit_code is not a number of its range")
    if not isinstance(doc["results"], list) or \
            not all(isinstance(r, dict) for r in doc["results"]):
        raise ValueError("results is not a list of results")
    results = [Result.from_json(r) for r in doc["results"]]
    strays = sorted({str(r.node)[:60] for r in results if r.node not in (node, "*")})
    if strays:
        raise ValueError(f"the verdict of {node} holds results for other nodes "
                         f"({', '.join(strays[:5])}); not recorded")
    return doc, results


def ingest(folder: Path, db: Path) -> Ingested:
    """Record every verdict file in `folder` into the history at `db`, oldest name first."""
    from stetho.history.backend import open_history
    from stetho.history.store import NodeRun

    out = Ingested()
    files = sorted(p for p in folder.glob("*.json") if not p.name.startswith("."))
    if not files:
        return out
    done, bad = folder / "ingested", folder / "bad"
    done.mkdir(exist_ok=True)
    with open_history(db) as h:
        for path in files:
            try:
                doc, results = _read(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                bad.mkdir(exist_ok=True)
                why = f"{type(exc).__name__}: {exc}"
                (bad / f"{path.name}.why").write_text(why + "\n")
                os.replace(path, bad / path.name)
                out.bad.append((path.name, why))
                continue
            run_id = str(doc["run_id"])
            if h.has_run(run_id):
                out.duplicates.append(run_id)
            else:
                try:
                    h.record(run_id, str(doc["kind"]),
                             [NodeRun(str(doc["node"]), str(doc.get("profile") or ""), results,
                                      [])],
                             when=float(doc["time"]), exit_code=int(doc["exit_code"]),
                             command=str(doc.get("command") or ""))
                    out.recorded.append(run_id)
                except sqlite3.IntegrityError:  # another ingest recorded it meanwhile
                    out.duplicates.append(run_id)
            os.replace(path, done / path.name)
    return out
