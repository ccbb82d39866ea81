"""Results JSON: the canonical run record every other sink can be rebuilt from."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from stetho import __version__
from stetho.results import (
    RESULTS_SCHEMA,
    RESULTS_SCHEMA_VERSION,
    Result,
    counts,
    exit_code_of,
)

if TYPE_CHECKING:  # a spool's module (sqlite3, tempfile) only where a spool is written
    from stetho.sinks.spool import Results


def _head(results: Sequence[Result], **meta: Any) -> dict[str, Any]:
    tally = counts(results)  # once: a gate's results.json holds 8,000 results
    return {
        "schema": RESULTS_SCHEMA, "schema_version": RESULTS_SCHEMA_VERSION,
        "stetho_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **meta,
        "exit_code": exit_code_of(tally), "counts": tally,
    }


def document(results: Sequence[Result], *, encoded: Sequence[str] | None = None,
             **meta: Any) -> dict[str, Any]:
    """The results document; `encoded`: the results' JSON texts already made (each
    result's, in order: stetho.fleet.run_folder copies them), instead of their dicts."""
    return {**_head(results, **meta),
            "results": [r.to_json() for r in results] if encoded is None else encoded}


#: Above this many results the document is written compact: an indented dump goes through
#: json's pure-Python encoder (3.6 s instead of 1 s for a thousand-node run's 116,000 results).
INDENT_UP_TO = 5000


def render(results: list[Result], **meta: Any) -> str:
    """Strict JSON (no NaN, no lone surrogate): a result that cannot be written as it is
    is written through stetho.sinks.safe, with every other result unchanged."""
    from stetho.sinks import safe  # not on a gate's path: its results.json is run_folder's

    try:
        out = _render(results, **meta)
        if safe.json_text_ok(out):
            return out
    except safe.WRITE_ERRORS:
        pass
    return _render(safe.results(results), **meta)


def _render(results: list[Result], **meta: Any) -> str:
    doc = document(results, **meta)
    if len(results) > INDENT_UP_TO:
        return json.dumps(doc, default=str, separators=(",", ":"), allow_nan=False) + "\n"
    return json.dumps(doc, indent=1, default=str, allow_nan=False) + "\n"


def render_stream(results: Results, **meta: Any) -> Iterator[str]:
    """The same document, compact, in pieces: each result's stored JSON copied through."""
    head = json.dumps(_head(results, **meta), default=str, separators=(",", ":"))
    yield head[:-1] + ',"results":['
    chunk: list[str] = []
    for i, doc in enumerate(results.documents()):
        chunk.append(doc if i == 0 else "," + doc)
        if len(chunk) >= 1000:
            yield "".join(chunk)
            chunk = []
    yield "".join(chunk) + "]}\n"


def load(text: str) -> list[Result]:
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("schema") != RESULTS_SCHEMA:
        raise ValueError("not a stetho results document")
    return [Result.from_json(r) for r in data["results"]]
