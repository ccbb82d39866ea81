"""Results every output format can hold, whatever a node's output put into them.

A check copies text from a node into its result (a message quoting nvidia-smi, a subject from
sysfs) and parses numbers out of it, so a result can carry what no output format takes: a lone
surrogate from bytes that were not UTF-8 (the page and the textfile cannot be encoded), control
characters (invalid XML; in the terminal table an escape sequence that rewrites the screen),
NaN or infinity (not JSON), an integer too large for text or for a float, a value nested deeper
than the encoders recurse. One such result must not cost the run its outputs, nor the other
nodes their verdicts.

Writers render as they always did and fall back to `results()` only when the first attempt
raises or its text cannot be written (the cheap checks in `encodable`), so a healthy fleet pays
nothing; the fallback keeps every result, with each unwritable piece replaced by a named
placeholder (U+FFFD for a character, "<integer of N digits>", "NaN") instead of dropping it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any
from xml.parsers.expat import ExpatError

from stetho.results import Result

#: C0 and C1 controls but tab, newline and carriage return; lone surrogates; the two
#: non-characters XML refuses.
_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
#: A \\uXXXX escape of a lone surrogate in ASCII JSON (a pair is a high then a low escape).
_LONE_ESCAPE = re.compile(r"(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
                          r"|\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])")
REPLACEMENT = "\ufffd"
#: Deeper than this, a value is replaced: json and repr recurse once per level.
MAX_DEPTH = 32
#: Larger than this, an integer is replaced: no float holds it, and str() refuses 4,300 digits.
MAX_INT_BITS = 1000

#: What a writer raises on a value it cannot hold (ExpatError: an XML parser's).
WRITE_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, OverflowError,
                                                 RecursionError, ExpatError, SyntaxError)

_TEXT = ("node", "check", "subject", "status", "message", "unit", "remediation", "evidence",
         "probe", "limit_op")
_VALUES = ("value", "expected", "threshold", "reference", "limit", "override")


def text(s: str) -> str:
    """`s` with every character no output takes replaced by U+FFFD."""
    return _BAD.sub(REPLACEMENT, s) if _BAD.search(s) else s


def value(v: Any, depth: int = 0) -> Any:
    """`v` as every writer can hold it: text cleaned, non-finite floats as the words JSON
    readers know ("NaN", "Infinity", "-Infinity"), huge integers and deep nesting named."""
    t = type(v)
    if v is None or t is bool:
        return v
    if t is str:
        return text(v)
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, int):
        bits = v.bit_length()
        return v if bits <= MAX_INT_BITS else f"<integer of about {int(bits * 0.30103) + 1} digits>"
    if isinstance(v, (list, tuple, dict)):
        if depth >= MAX_DEPTH:
            return f"<value nested deeper than {MAX_DEPTH} levels>"
        if isinstance(v, dict):
            return {text(str(k)): value(x, depth + 1) for k, x in v.items()}
        return [value(x, depth + 1) for x in v]
    try:
        return text(str(v))[:1000]
    except WRITE_ERRORS:
        return f"<unprintable {t.__name__}>"


def clean(r: Result) -> Result:
    """`r` with every field writable (the fields that already are stay the same objects;
    `r` itself when all are, the common case: a run diagnoses thousands of nodes' results)."""
    return r if writable(r) else _clean(r)


def _clean(r: Result) -> Result:
    d = r.to_json()
    for key in _TEXT:
        x = d[key]
        if x is not None:
            d[key] = text(x) if type(x) is str else text(str(value(x)))
    for key in _VALUES:
        if d[key] is not None:
            d[key] = value(d[key])
    dur = d["duration_s"]
    d["duration_s"] = dur if type(dur) in (int, float) and math.isfinite(dur) and dur >= 0 else 0.0
    if d["limit"] is not None and type(d["limit"]) is not float and type(d["limit"]) is not int:
        d["limit"] = None  # "NaN" or a placeholder: no number to compare with
    return Result(**d)


_bad = _BAD.search


def writable(r: Result) -> bool:
    """Whether `clean` would leave `r` as it is: text without a character to replace, plain
    finite numbers, small integers, no containers (those take the full path)."""
    d = r.__dict__
    for key in _TEXT:
        x = d[key]
        if x is not None and (type(x) is not str or _bad(x)):
            return False
    for key in _VALUES:
        x = d[key]
        t = type(x)
        if x is None or t is bool:
            continue
        if t is str:
            if _bad(x):
                return False
        elif t is float:
            if not math.isfinite(x):
                return False
        elif t is not int or x.bit_length() > MAX_INT_BITS:
            return False
    dur, limit = d["duration_s"], d["limit"]
    return (type(dur) in (int, float) and math.isfinite(dur) and dur >= 0
            and (limit is None or type(limit) is float or type(limit) is int))


def results(rs: Iterable[Result]) -> list[Result]:
    return [clean(r) for r in rs]


def encodable(out: str) -> bool:
    """Whether `out` can be written as UTF-8 (ASCII checked first: it is most output)."""
    if out.isascii():
        return True
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_text_ok(out: str) -> bool:
    """Whether ASCII JSON text holds no lone surrogate escape (strict readers refuse one)."""
    return "\\ud" not in out or _LONE_ESCAPE.search(out) is None
