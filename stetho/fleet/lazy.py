"""What the ingest decodes of a node's outcome, and what it leaves as the node sent it.

The node judged its own checks; the controller records its results and summary. Its evidence
(300 KB of JSON a node) is read by little on the controller: the windowed re-judge of nodes
with earlier readings, the diagnosis of failing nodes. So the ingest keeps it as the bytes
the node sent and parses it only where it is read, after checking, without parsing, what
must hold of it now: that it is a bundle of the folder's node and, where it holds a busy
probe, what that probe says (a busy node is listed, not judged).

`plain` is strict: anything it cannot settle from the bytes alone (a unicode escape, which
could spell a key; a second "node" or "busy" token; another header) sends the outcome down
the full parse, which refuses as before. So the fast path never takes what the full one
would refuse for a node's name.
"""

from __future__ import annotations

import json
import re
from typing import Any

from stetho.core import untrusted
from stetho.evidence.bundle import SCHEMA, SCHEMA_VERSION
from stetho.evidence.busy import PROBE
from stetho.results import Result, known_status

#: The head a node's compact evidence starts with (json.dumps of Bundle.to_json).
_HEAD = re.compile(rb'\{"schema":"' + re.escape(SCHEMA.encode()) +
                   rb'","schema_version":(\d{1,4}),"node":"([^"\\]{1,253})","')
_NODE = b'"node"'
_BUSY = b'"' + PROBE.encode() + b'"'
#: The busy probe as the node's compact dump writes it: key, then the record's name first.
_BUSY_AT = _BUSY + b':{"name":' + _BUSY + b","
_FIELDS = tuple(Result.__dataclass_fields__)
_NESTS = frozenset((dict, list))


def plain(raw: bytes, node: str) -> bool:
    """Whether the evidence JSON `raw` is plainly `node`'s bundle: its head names it, no
    other "node" key can exist (no unicode escape, one "node" token), and a busy probe, if
    any, can be read on its own (`busy_record`)."""
    m = _HEAD.match(raw)
    if m is None or int(m.group(1)) > SCHEMA_VERSION or m.group(2) != node.encode():
        return False
    if b"\\u" in raw or raw.count(_NODE) != 1:
        return False
    busy = raw.count(_BUSY)
    return busy == 0 or (busy == 2 and raw.count(_BUSY_AT) == 1)


def busy_record(raw: bytes) -> dict[str, Any] | None:
    """The busy probe's record in evidence `plain` accepted, or None when it holds none.
    ValueError when it is not JSON there."""
    at = raw.find(_BUSY_AT)
    if at < 0:
        return None
    doc, _end = json.JSONDecoder().raw_decode(raw[at + len(_BUSY) + 1:].decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("the busy probe is not a JSON object")
    return doc


def loads(body: bytes) -> Any:
    """A spool file's body as untrusted.loads reads it (the same refusals, the same words),
    checked for depth without walking every result's scalars: the rows' values are checked
    one by one, and only those that nest are walked. Text with a surrogate escape takes
    untrusted.loads' full walk."""
    if untrusted.surrogate_escapes(body):
        return untrusted.loads(body)
    try:
        doc = json.loads(body, parse_constant=untrusted.reject_constant)
    except (ValueError, RecursionError):
        return untrusted.loads(body)  # raises the error it names
    rows = _rows(doc)
    if rows is None:
        untrusted.check(doc, strings=False)
        return doc
    outcome = doc["outcome"]
    untrusted.check({**doc, "outcome": {**outcome, "results": {**outcome["results"],
                                                               "results": []}}},
                    strings=False)
    for r in rows:  # a row is 5 deep in the body (body, outcome, results, list, row)
        if not isinstance(r, dict):
            untrusted.check(r, untrusted.MAX_DEPTH - 4, strings=False)
            continue
        if not _NESTS.isdisjoint(map(type, r.values())):  # json makes exact dicts, lists
            for v in r.values():
                if isinstance(v, (dict, list)):
                    untrusted.check(v, untrusted.MAX_DEPTH - 5, strings=False)
    return doc


def _rows(doc: Any) -> list[Any] | None:
    outcome = doc.get("outcome") if isinstance(doc, dict) else None
    results = outcome.get("results") if isinstance(outcome, dict) else None
    rows = results.get("results") if isinstance(results, dict) else None
    return rows if isinstance(rows, list) else None


def results(rows: list[Any]) -> list[Result]:
    """Results from a node's JSON rows: a row with exactly Result's fields in their order (what
    Result.to_json writes) becomes one without copying; any other through Result.from_json.
    An unknown status is an error either way (known_status)."""
    out = []
    for d in rows:
        if tuple(d) == _FIELDS:
            r = Result.__new__(Result)
            object.__setattr__(r, "__dict__", d)
            out.append(known_status(r))
        else:
            out.append(Result.from_json(d))
    return out
