"""A node's results of one run as history stores them (node_runs.results): a zlib'd JSON list,
one result per line, each written compact as results.json writes it.

Why one per line: a reader that needs only some checks (the pre-job gate: 26 of a sweep's
checks, and none that a newer run already gave) takes each line's check name from its start
(`{"node":"n01","check":"gpu_ecc",`) and parses only the lines it keeps, in one json.loads;
and the lines it keeps are the exact text results.json holds for those results, so the gate's
run folder copies them instead of encoding them again. It stays one JSON list, so every reader
that parses the whole list (and any older stetho) reads it as before. Rows written before
(`json.dumps`, one line) have no line structure: they are parsed whole, as they always were.
What is read is the blob the row's MAC covers (stetho.history.integrity), nothing beside it.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Container, Iterable
from typing import Any

from stetho.history.errors import HistoryCorrupt
from stetho.results import Result, adopt

_ONE: Callable[[Any], str] | None = None


def line_encoder() -> Callable[[Any], str]:
    """How each line is encoded, and each result of results.json (stetho.fleet.run_folder):
    compact, ASCII, default=str, json's C encoder made once (JSONEncoder.encode makes one per
    call, a third of writing a 64-node gate's 8,000 results); the same text as
    `JSONEncoder(separators=(",", ":"), default=str).encode`, circular references refused
    alike."""
    global _ONE
    if _ONE is None:
        from json import encoder

        make = getattr(encoder, "c_make_encoder", None)  # private to json, hence not typed
        if make is None:
            _ONE = json.JSONEncoder(separators=(",", ":"), default=str).encode
        else:
            c_enc = make({}, str, encoder.encode_basestring_ascii, None, ":", ",", False,
                         False, True)
            _ONE = lambda x: "".join(c_enc(x, 0))  # noqa: E731
    return _ONE


def text_of(results: Iterable[Result]) -> str:
    """The stored JSON list: `[`, one compact result per line, `]`. A result JSON cannot hold
    (a value nested too deep, an integer too large for text) is stored as stetho.sinks.safe
    writes it, the others as they are."""
    results = list(results)
    one = line_encoder()
    try:
        lines = [one(r.to_json()) for r in results]
    except (ValueError, RecursionError, OverflowError, TypeError):
        from stetho.sinks import safe

        lines = [one(r.to_json()) for r in safe.results(results)]
    return "[\n" + ",\n".join(lines) + "\n]"


def encode(results: Iterable[Result]) -> bytes:
    """The results column of a node's row."""
    return zlib.compress(text_of(results).encode(), 6)


class Decoded:
    """A node's results of one run as read back, and for each the line it was stored as,
    where that line is exactly the result's JSON (results.json may copy it): None for a row
    stored before lines (parsed whole), or a result not read as stored (an unknown status made
    an error, another version's key order)."""

    __slots__ = ("results", "lines")

    def __init__(self, results: list[Result], lines: list[str | None]) -> None:
        self.results = results
        self.lines = lines


def decode(node: str, run: str, blob: bytes, known: Container[str] = (),
           keep: Container[str] | None = None) -> Decoded:
    """The results of `blob`, less those of checks in `known` (found in a newer run already)
    and, given `keep`, of checks not in it: only the lines kept are parsed. A named
    HistoryCorrupt where the blob is unreadable."""
    try:
        text = zlib.decompress(blob).decode("utf-8", "surrogatepass")
        if not (text.startswith("[\n{") and text.endswith("}\n]")):  # before lines: whole
            whole = [adopt(d) for d in json.loads(text) if not (
                d["check"] in known or (keep is not None and d["check"] not in keep))]
            return Decoded(whole, [None] * len(whole))
        names, lines = _kept(node, text[2:-2].split(",\n"), known, keep)
        dicts = json.loads("[" + ",".join(lines) + "]")
        results = [adopt(d) for d in dicts]
    except (zlib.error, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise HistoryCorrupt(f"the results of {node} in run {run} are unreadable "
                             f"({type(exc).__name__}: {exc})") from None
    # a line that was not one result, or whose result is not of the check its start named
    # (a repeated key): never guessed at, as what was kept or skipped would be wrong
    if len(results) != len(lines) or any(
            r.check != c for r, c in zip(results, names, strict=True)):
        raise HistoryCorrupt(f"the results of {node} in run {run} are unreadable (a line "
                             "holds other than one result of the check it starts with)")
    # a result whose dict is the one parsed (stetho.results.adopt): its line parses to
    # exactly its JSON, so results.json may hold the line
    return Decoded(results, [line if vars(r) is d else None
                             for r, d, line in zip(results, dicts, lines, strict=True)])


def _kept(node: str, lines: list[str], known: Container[str],
          keep: Container[str] | None) -> tuple[list[str], list[str]]:
    """The lines of the checks wanted, and each one's check. A line starting as this stetho
    writes it gives its check name without parsing (a JSON string with no backslash ends at
    the next quote); any other is parsed to find it."""
    start = '{"node":' + json.dumps(node) + ',"check":"'
    at = len(start)
    names, out = [], []
    for line in lines:
        end = line.find('"', at) if line.startswith(start) else -1
        check = line[at:end] if end > at else ""
        if not check or "\\" in check:
            check = json.loads(line)["check"]
        if check in known or (keep is not None and check not in keep):
            continue
        names.append(check)
        out.append(line)
    return names, out
