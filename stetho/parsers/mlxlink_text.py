"""Read mlxlink's text output (`mlxlink -d DEV -m -c` without `--json`) into JSON-shaped sections.

mlxlink prints each section as a title underlined with dashes, then `Key   : value` lines:

    Operational Info
    ----------------
    State                              : Active
    Physical state                     : LinkUp

These are the same sections and keys `--json` puts under `result.output`, so the text is turned
into that shape here and `mlxlink` reads both formats with one set of rules (15E-255, per-lane
comma lists, `[low..high]` ranges, N/A). MFT 4.35 pads some values with a trailing space; CX-6
builds print ` ` (one space) lines; `-E-` and `-W-` lines are mlxlink's errors and warnings on
stderr, merged anywhere into the text. A line inside a section that is none of these is a
ParseError: half-read text must not pass for a clean link.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError

_RULE = re.compile(r"^\s*-{3,}\s*$")
_KEY_VALUE = re.compile(r"^(?P<key>[^:\s][^:]*?)\s*:(?:\s+(?P<value>.*?))?\s*$")
_MESSAGE = re.compile(r"^\s*-(?P<kind>[EWI])-\s*(?P<text>.*?)\s*$")


@record
class TextOutput:
    """Sections as `{name: {key: value}}` in output order, and mlxlink's -E-/-W- messages."""

    sections: dict[str, dict[str, object]]
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


def read(tool: str, data: str) -> TextOutput:
    """Split mlxlink text output into sections. Lines before the first section title are
    ignored (a shell prompt, a banner); raises ParseError (for `tool`) for a line inside a
    section that is not `Key : value`, a title with no dashes under it, or a repeated title."""
    lines = data.splitlines()
    sections: dict[str, dict[str, object]] = {}
    errors: list[str] = []
    warnings: list[str] = []
    current: dict[str, object] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip():
            continue
        if m := _MESSAGE.match(line):
            (errors if m.group("kind") == "E" else warnings).append(m.group("text"))
            continue
        if i < len(lines) and _RULE.match(lines[i]) and ":" not in line:
            title = " ".join(line.split())
            if title in sections:
                raise ParseError(tool, f"line {i}: section {title!r} printed twice")
            current = sections[title] = {}
            i += 1
            continue
        if _RULE.match(line):
            raise ParseError(tool, f"line {i}: a rule of dashes without a section title")
        if current is None:
            continue  # before the first section: prompts, banners
        m = _KEY_VALUE.match(line)
        if not m:
            raise ParseError(tool, f"line {i}: not 'Key : value': {line.strip()[:80]!r}")
        current[m.group("key")] = m.group("value") or ""
    return TextOutput(sections, tuple(errors), tuple(warnings))
