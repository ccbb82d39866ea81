"""Version ordering for drivers, firmware, CUDA, NCCL and kernels: never string comparison.

"535.161.08" > "535.54.03" and "28.41.1000" > "28.39.1002", which plain string comparison
gets wrong. Versions are split into numeric and alphanumeric pieces; numbers compare as
numbers. VBIOS versions such as "96.00.74.00.0D" carry hex pieces, compared as hex when both
sides' pieces are hex. Suffixes after '+' (build metadata: "2.21.5+cuda12.4") are ignored.
"""

from __future__ import annotations

import re
from functools import total_ordering

_SPLIT = re.compile(r"[.\-_~]")
_DIGITS = re.compile(r"^\d+$")
_HEX = re.compile(r"^[0-9a-fA-F]+$")
_LEADING_NUM = re.compile(r"^(\d+)(.*)$")
_V_PREFIX = re.compile(r"^[vV](?=\d)")
_ANY_DIGIT = re.compile(r"\d")
_Piece = tuple[int, int | str]


@total_ordering
class Version:
    def __init__(self, text: str) -> None:
        self.text = text.strip()
        core = self.text.split("+", 1)[0]
        core = _V_PREFIX.sub("", core)
        if not core or not _ANY_DIGIT.search(core):
            raise ValueError(f"not a version: {text!r}")
        self.parts = tuple(p for p in _SPLIT.split(core) if p != "")

    def _key(self, other: Version) -> tuple[list[_Piece], list[_Piece]]:
        a, b = [], []
        for i in range(max(len(self.parts), len(other.parts))):
            pa = self.parts[i] if i < len(self.parts) else None
            pb = other.parts[i] if i < len(other.parts) else None
            a.append(_piece(pa, pb))
            b.append(_piece(pb, pa))
        return a, b

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        a, b = self._key(other)
        return a == b

    def __lt__(self, other: Version) -> bool:
        a, b = self._key(other)
        return a < b

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Version({self.text!r})"

    def __str__(self) -> str:
        return self.text


def _piece(p: str | None, other: str | None) -> tuple[int, int | str]:
    """A comparable piece. Missing pieces sort lowest (1.2 < 1.2.1); numbers before words."""
    if p is None:
        return (0, 0)
    if _DIGITS.match(p) and (other is None or _DIGITS.match(other) or not _HEX.match(other)):
        return (2, int(p))
    if _HEX.match(p) and other is not None and _HEX.match(other):
        return (2, int(p, 16))
    m = _LEADING_NUM.match(p)
    if m:
        return (2, int(m.group(1))) if not m.group(2) else (1, p.lower())
    return (1, p.lower())


def parse(text: str) -> Version:
    return Version(text)


def at_least(found: str, minimum: str) -> bool:
    return Version(found) >= Version(minimum)
