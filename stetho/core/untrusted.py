"""JSON that comes from outside the controller (a node's outcome, a bundle, a results file):
read so that garbage is a named error for that one document, never a crash of the run.

Python's json module accepts what later breaks other code far from the read: lone surrogate
escapes (`"\\ud800"`: a str no file or database can encode), integers of thousands of digits
(ValueError when converted), and nesting deep enough to exhaust the recursion of whatever
walks it. `loads` refuses each with the reason; `check` does the same for data already parsed.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

#: Deepest nesting a document from a node may have (a bundle is 4 deep, an outcome 6).
MAX_DEPTH = 32
#: A surrogate escape in JSON text: only then can a decoded string hold a lone surrogate.
SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


class UntrustedJsonError(ValueError):
    """The document cannot be used: the message says why, for the node it came from."""


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON text, or raise UntrustedJsonError: not JSON, NaN or Infinity, an integer
    too long to convert, nested deeper than `max_depth`, or a string with a lone surrogate."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    try:
        data = json.loads(raw, parse_constant=reject_constant)
    except json.JSONDecodeError as exc:
        raise UntrustedJsonError(f"not valid JSON ({exc.msg} at line {exc.lineno} column "
                                 f"{exc.colno})") from None
    except RecursionError:
        raise UntrustedJsonError(f"JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # an integer past int_max_str_digits, bytes not UTF-8, NaN
        raise UntrustedJsonError(f"unreadable JSON ({exc})") from None
    check(data, max_depth, strings=surrogate_escapes(raw))
    return data


def surrogate_escapes(raw: bytes) -> bool:
    """Whether JSON text has a surrogate escape (only then can a string in it be a lone
    surrogate): a plain `in` first, 20x cheaper than the pattern over a bundle's 300 KB."""
    return b"\\u" in raw and SURROGATE.search(raw) is not None


def check(data: Any, max_depth: int = MAX_DEPTH, strings: bool = True) -> None:
    """Raise UntrustedJsonError where parsed data nests deeper than `max_depth` or (with
    `strings`: the text had surrogate escapes) holds a string that is not valid Unicode.
    Iterative, so it cannot exhaust the recursion it guards against."""
    todo: list[tuple[Any, int]] = [(data, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            children: Any = [*value.keys(), *value.values()] if strings else value.values()
        elif isinstance(value, list):
            children = value
        else:
            if strings and isinstance(value, str):
                _text(value)
            continue
        if depth > max_depth:
            raise UntrustedJsonError(f"JSON nested deeper than {max_depth} levels")
        todo.extend([(c, depth + 1) for c in children
                     if strings or isinstance(c, (dict, list))])


def reject_constant(name: str) -> Any:
    """json's parse_constant: NaN and Infinity are no reading (they compare false to every
    limit, so a check could never fail on them)."""
    raise ValueError(f"{name} is not a number stetho reads")


def finite(value: Any) -> bool:
    """A real number (int or float, not bool), finite."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past a float's range
        return False


def _text(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UntrustedJsonError(f"a string holds a lone surrogate ({exc.object[exc.start]!r} "
                                 f"at character {exc.start}): not text") from None
