"""A node's results of one run as history stores them (node_runs.results): a zlib'd JSON list,
one result per line, each written compact as results.json writes it.

Why one per line: the lines a reader keeps are the exact text results.json holds for those
results, so the gate's run folder copies them instead of encoding them again (splitting a
227-result row into lines costs 0.16 ms; encoding the 132 results a pre-job gate keeps of it
0.68 ms, measured in process). It stays one JSON list, parsed whole (one json.loads of the
row costs less than finding and parsing only the lines kept, measured), so every reader that
parses the whole list, and any older stetho, reads it as before. Rows written before
(`json.dumps`, one line) and any row not laid out a result a line read the same, with nothing
to copy. What is read is the blob the row's MAC covers (stetho.history.integrity), nothing
beside it.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Container, Iterable
from typing import Any

from stetho.core import fastjson
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
    where that line is exactly the result's JSON (results.json may copy it): ASCII bytes, as
    the row holds them and the file is written (never decoded to text and encoded again);
    None for a row stored before lines (parsed whole), one with text past ASCII, or a result
    not read as stored (an unknown status made an error, another version's key order)."""

    __slots__ = ("results", "lines")

    def __init__(self, results: list[Result], lines: list[bytes | None]) -> None:
        self.results = results
        self.lines = lines


def decode(node: str, run: str, blob: bytes, known: Container[str] = (),
           keep: Container[str] | None = None) -> Decoded:
    """The results of `blob`, less those of checks in `known` (found in a newer run already)
    and, given `keep`, of checks not in it. The whole list is parsed (one json.loads of a
    227-result row costs less than finding and parsing only the 132 a pre-job gate keeps,
    measured); a row with one result a line also gives each kept result's line. A named
    HistoryCorrupt where the blob is unreadable."""
    try:
        raw = zlib.decompress(blob)
        dicts = fastjson.loads(raw)  # bytes as UTF-8 with surrogatepass (json's own rule)
        kept = [(i, d) for i, d in enumerate(dicts) if not (
            d["check"] in known or (keep is not None and d["check"] not in keep))]
        results = [adopt(d) for _, d in kept]
    except (zlib.error, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise HistoryCorrupt(f"the results of {node} in run {run} are unreadable "
                             f"({type(exc).__name__}: {exc})") from None
    lines = None
    if raw.startswith(b"[\n{") and raw.endswith(b"}\n]") and raw.isascii():
        lines = raw.split(b",\n")  # a line break only ever ends a line (JSON escapes
        if len(lines) != len(dicts):  # them): as many lines as results, each is one
            lines = None
        else:  # the list's brackets off the first and last (not a copy of the whole row)
            lines[0] = lines[0][2:]
            lines[-1] = lines[-1][:-2]
    if lines is None:  # before lines, or written otherwise: nothing to copy
        return Decoded(results, [None] * len(results))
    # a result whose dict is the one parsed (stetho.results.adopt): its line parses to
    # exactly its JSON, so results.json may hold the line
    return Decoded(results, [lines[i] if vars(r) is d else None
                             for r, (i, d) in zip(results, kept, strict=True)])
