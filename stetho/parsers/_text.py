"""Small helpers shared by parsers: values with units, N/A, and binary-garbage screening."""

from __future__ import annotations

import re
from functools import lru_cache

from stetho.parsers import ParseError

_NA = {"n/a", "na", "", "[n/a]", "not available", "unknown error", "[unknown error]"}
_NUMBER = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/()\s.]*)$")


# Both are pure and see the same few hundred strings ("N/A", "0", "16x", "1980 MHz") thousands
# of times per node: cached, they stop showing in the profile of a thousand-node replay.
@lru_cache(maxsize=8192)
def is_na(text: str | None) -> bool:
    """True for the many spellings of 'no value': N/A, empty, or a sentence like 'deprecated'."""
    if text is None:
        return True
    t = text.strip().lower()
    return t in _NA or t.startswith(("requested functionality", "not supported"))


@lru_cache(maxsize=8192)
def quantity(text: str | None) -> float | None:
    """'27 C' -> 27.0, '67.03 W' -> 67.03, '16x' -> 16.0, 'N/A' -> None.

    Returns None for N/A-like values; raises ValueError for text that is neither.
    """
    if is_na(text):
        return None
    assert text is not None
    m = _NUMBER.match(text.strip().rstrip("x"))
    if not m:
        raise ValueError(f"not a number with a unit: {text!r}")
    return float(m.group(1))


def integer(text: str | None) -> int | None:
    """Like `quantity`, as an int ('4' -> 4, '1.04858e+06' -> 1048580, 'N/A' -> None)."""
    q = quantity(text)
    return None if q is None else int(round(q))


def require_text(tool: str, data: str | bytes) -> str:
    """Decode and screen input: empty and binary input raise ParseError before any parsing."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(tool, f"binary input, not text ({exc.reason})") from None
    if not data.strip():
        raise ParseError(tool, "empty output")
    if "\x00" in data:
        raise ParseError(tool, "binary input (NUL bytes), not text")
    return data
