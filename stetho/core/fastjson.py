"""`loads` for the hot readers (history's result rows): orjson where it is installed, 2-2.5x
json's speed on real result rows (96 rows of 227 results, the reads of a 64-node gate: 20-29 ms
against 47-70 ms, measured), and json itself otherwise or wherever orjson refuses the text.

What orjson refuses and json reads, json reads as before: NaN and Infinity, a number past
float's range, a lone surrogate escape. The one difference left: an integer past 64 bits
(beyond -2**63 .. 2**64-1) reads as the nearest float, where json keeps it exact. No hardware
counter is wider than 64 bits, and results.json copies a stored result's text, not its
parsed value (stetho.history.blob), so the exact text is kept where it is shown.
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson as _orjson
except ImportError:  # a node or site without the wheel: json's speed, the same values
    _orjson = None  # type: ignore[assignment]


def loads(text: str | bytes) -> Any:
    """json.loads(text); a text neither reads is json's JSONDecodeError (a ValueError)."""
    if _orjson is not None:
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(text)
