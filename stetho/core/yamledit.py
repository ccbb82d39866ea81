"""Replace one block of a YAML file in place, keeping every other line (and comment) as is.

`stetho baseline record` rewrites the measured values of a profile that people review like
code: a full YAML round trip through PyYAML would drop their comments and reorder keys.
"""

from __future__ import annotations

from typing import Any

import yaml

from stetho.core import yamlconf


def set_block(text: str, path: tuple[str, ...], value: Any, file: str = "<yaml>") -> str:
    """Return `text` with the mapping key at `path` (e.g. ("nccl", "baseline")) set to
    `value`, its old block replaced; parents are created when missing."""
    doc = yamlconf.loads(text, file)
    lines = text.splitlines()
    if path in doc.lines and _exists(doc.data, path):
        start = doc.lines[path] - 1
        indent = _indent(lines[start])
        end = _block_end(lines, start, indent)
        return "\n".join(lines[:start] + _render(path[-1], value, indent) + lines[end:]) + "\n"
    parent = path[:-1]
    if parent and not _exists(doc.data, parent):
        return set_block(text, parent, {path[-1]: value}, file)
    if not parent:
        body = lines + ([""] if lines and lines[-1].strip() else [])
        return "\n".join(body + _render(path[-1], value, 0)) + "\n"
    start = doc.lines[parent] - 1
    indent = _indent(lines[start])
    end = _block_end(lines, start, indent)
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    child = _child_indent(lines, start, end, indent)
    return "\n".join(lines[:end] + _render(path[-1], value, child) + lines[end:]) + "\n"


def _exists(data: Any, path: tuple[str, ...]) -> bool:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return False
        data = data[key]
    return True


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block_end(lines: list[str], start: int, indent: int) -> int:
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and _indent(line) <= indent and not line.lstrip().startswith("#"):
            break
        if line.strip().startswith("#") and _indent(line) <= indent:
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _child_indent(lines: list[str], start: int, end: int, indent: int) -> int:
    for line in lines[start + 1:end]:
        if line.strip() and not line.lstrip().startswith("#"):
            return _indent(line)
    return indent + 2


def _render(key: str, value: Any, indent: int) -> list[str]:
    dumped = yaml.safe_dump({key: value}, sort_keys=False, default_flow_style=False,
                            width=96, allow_unicode=True).rstrip("\n").splitlines()
    return [" " * indent + line for line in dumped]
