"""mlxlink's values, read the same way from its JSON and its text: numbers, counts, BER with
its zero-error sentinel (`15E-255`), flags, dBm readings, `[min..max]` ranges inside a value
and comma-joined per-lane lists. Every malformed value is a ParseError naming the field."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TypeVar

from stetho.parsers import ParseError
from stetho.parsers._text import is_na
from stetho.parsers.mlxlink_model import Range

TOOL = "mlxlink"
T = TypeVar("T")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_NUMBER = re.compile(rf"^{_NUM}$")
_COUNT = re.compile(r"^\d+$")
_RANGE = re.compile(r"^(.*?)\s*\[([^\[\]]*)\.\.([^\[\]]*)\]$", re.DOTALL)
_BER = re.compile(r"^(\d+(?:\.\d*)?)[eE]-(\d+)$")
_SENTINEL_MAGNITUDE = 255
_TRUE = frozenset({"1", "yes", "on", "true"})
_FALSE = frozenset({"0", "no", "off", "false"})


@lru_cache(maxsize=4096)
def _norm(key: str) -> str:
    """Keys repeat across every port and node: normalised once (a replay hot spot)."""
    return " ".join(key.split()).lower()


def _clean(text: str) -> str:
    if "\x1b" not in text:  # nearly always: no colour codes to remove
        return text.strip()
    return _ANSI.sub("", text).strip()


def _scalar(section: Mapping[str, object], key: str) -> str | None:
    """A field as a stripped string; None when missing or N/A."""
    value = section.get(_norm(key))
    if value is None:
        return None
    if type(value) is str:  # nearly always: no type checks, no str(), no colour codes
        text = value.strip() if "\x1b" not in value else _clean(value)
        return None if is_na(text) else text
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ParseError(TOOL, f"field {key!r} is not a scalar: {str(value)[:80]}")
    text = _clean(str(value))
    return None if is_na(text) else text


def _list(section: Mapping[str, object], key: str) -> tuple[list[str] | None, Range | None]:
    """A per-lane field: from `{"values": [...]}` or a comma-joined string with an optional
    trailing `[low..high]` range. (None, None) when missing or N/A as a whole."""
    value = section.get(_norm(key))
    if value is None:
        return None, None
    if isinstance(value, dict):
        items = value.get("values")
        if not isinstance(items, list):
            raise ParseError(TOOL, f"field {key!r} has no 'values' list")
        out: list[str] = []
        for item in items:
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                raise ParseError(TOOL, f"field {key!r}: lane value is not a scalar: {item!r}"[:200])
            out.append(_clean(str(item)))
        return out, None
    if isinstance(value, list):
        raise ParseError(TOOL, f"field {key!r} is a bare list, expected {{'values': [...]}}")
    text = _scalar(section, key)
    if text is None:
        return None, None
    body, rng = _split_range(key, text)
    if body is None:
        return None, rng
    return [part.strip() for part in body.split(",")], rng


def _split_range(key: str, text: str) -> tuple[str | None, Range | None]:
    """'61 [-10..80]' -> ('61', Range(-10, 80)); text without a range -> (text, None)."""
    m = _RANGE.match(text)
    if not m:
        if "[" in text or "]" in text:
            raise ParseError(TOOL, f"field {key!r}: unreadable range in {text[:80]!r}")
        return text, None
    body = m.group(1).strip()
    rng = Range(_number(key, m.group(2)), _number(key, m.group(3)))
    return (None if is_na(body) else body), rng


@lru_cache(maxsize=8192)
def _number(key: str, text: str | None) -> float | None:
    if text is None or is_na(text):
        return None
    t = text.strip()
    if not _NUMBER.match(t):
        raise ParseError(TOOL, f"field {key!r}: not a number: {t[:40]!r}")
    value = float(t)
    if not math.isfinite(value):
        raise ParseError(TOOL, f"field {key!r}: not a finite number: {t[:40]!r}")
    return value


def _count(key: str, text: str | None) -> int | None:
    if text is None or is_na(text):
        return None
    t = text.strip()
    if not _COUNT.match(t):
        raise ParseError(TOOL, f"field {key!r}: not a count: {t[:40]!r}")
    return _int(key, t)


def _int(key: str, digits: str) -> int:
    try:
        return int(digits)
    except ValueError:  # e.g. more digits than int() converts
        raise ParseError(TOOL, f"field {key!r}: unreadable integer {digits[:40]!r}") from None


def _ber(key: str, text: str | None) -> float | None:
    """'5E-10' -> 5e-10; the sentinel magnitude 255 ('15E-255') -> 0.0; 'N/A' -> None."""
    if text is None or is_na(text):
        return None
    t = text.strip()
    m = _BER.match(t)
    if m and _int(key, m.group(2)) >= _SENTINEL_MAGNITUDE:
        return 0.0
    value = _number(key, t)
    if value is None or value < 0:
        raise ParseError(TOOL, f"field {key!r}: not a BER: {t[:40]!r}")
    return value


def _flag(key: str, text: str | None) -> bool | None:
    if text is None or is_na(text):
        return None
    t = text.strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ParseError(TOOL, f"field {key!r}: not a flag: {text[:40]!r}")


def _dbm(key: str, text: str) -> tuple[float | None, bool]:
    """A power reading: (dBm, dark). '-inf' is a dark lane (0 mW)."""
    if text.strip().lower() == "-inf":
        return None, True
    return _number(key, text), False


def _lane_values(section: Mapping[str, object], key: str,
                 convert: Callable[[str, str], T]) -> tuple[list[T | None] | None, Range | None]:
    items, rng = _list(section, key)
    if items is None:
        return None, rng
    return [None if is_na(item) else convert(key, item) for item in items], rng


def _reading(section: Mapping[str, object], key: str) -> tuple[float | None, Range | None]:
    text = _scalar(section, key)
    if text is None:
        return None, None
    body, rng = _split_range(key, text)
    return _number(key, body), rng
