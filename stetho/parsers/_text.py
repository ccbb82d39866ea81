"""Small helpers shared by parsers: values with units, N/A, and binary-garbage screening."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import TypeVar

from stetho.parsers import ParseError

T = TypeVar("T")

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


def is_deprecated(text: str | None) -> bool:
    """True for nvidia-smi's 'Requested functionality has been deprecated' (NVML's
    NVML_ERROR_DEPRECATED): unknown like N/A, but known to be gone on this driver for good."""
    return text is not None and text.strip().lower().startswith(
        ("requested functionality has been deprecated", "[requested functionality has been"))


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


#: What a parser's own code can raise on input it did not foresee; `guarded` turns each into a
#: ParseError so that no parser lets anything else escape.
UNEXPECTED: tuple[type[Exception], ...] = (
    ValueError, KeyError, IndexError, AttributeError, TypeError, RecursionError,
)


def guarded(tool: str, data: str | bytes, parse: Callable[[str], T],
            prefix: str = "unexpected content: ") -> T:
    """Decode and screen `data` (require_text), then run `parse` on the text.

    The one wrapper every text parser shares: a ParseError passes through unchanged, and any
    of UNEXPECTED becomes a ParseError for `tool` whose reason is `prefix` + the exception text.
    """
    text = require_text(tool, data)
    try:
        return parse(text)
    except ParseError:
        raise
    except UNEXPECTED as exc:
        raise ParseError(tool, f"{prefix}{exc}") from None
