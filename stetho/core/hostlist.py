"""Slurm hostlist expressions: `gpu[001-064,100]` <-> the node names they stand for.

Wherever nodes are named (--limit, --nodes, reports) a person can write them the way Slurm
prints them. Zero padding is kept (`gpu[001-003]` -> gpu001, gpu002, gpu003); several bracket
groups multiply out (`rack[1-2]-gpu[1-2]`); lists are comma separated outside brackets. Names
are also validated: only letters, digits, '.', '_' and '-', so a node name can never carry
shell metacharacters into a command line.
"""

from __future__ import annotations

import re
from itertools import product

from stetho.errors import ConfigError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MAX_HOSTS = 1_000_000
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


#: Longest hostlist expression read (a list of every node of a large fleet by name fits).
MAX_EXPR = 1_000_000


def expand(expr: str) -> list[str]:
    """'gpu[001-003,010],login1' -> ['gpu001', 'gpu002', 'gpu003', 'gpu010', 'login1'].
    At most MAX_HOSTS names in all, from at most MAX_EXPR characters: more is ConfigError."""
    if len(expr) > MAX_EXPR:
        raise ConfigError(f"hostlist of {len(expr)} characters is longer than {MAX_EXPR}")
    names: list[str] = []
    for part in _split_top(expr.strip()):
        names.extend(_expand_one(part, expr, MAX_HOSTS - len(names)))
    seen: set[str] = set()
    out = []
    for n in names:
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


def _split_top(expr: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"hostlist {expr!r}: unbalanced ']'")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ConfigError(f"hostlist {expr!r}: unbalanced '['")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_one(part: str, expr: str, room: int = MAX_HOSTS) -> list[str]:
    """One comma-free part's names; more than `room` (what MAX_HOSTS leaves) is ConfigError."""
    pieces = re.split(r"(\[[^\]]*\])", part)
    choices: list[list[str]] = []
    total = 1
    for piece in pieces:
        if piece.startswith("["):
            values = _range_values(piece[1:-1], expr)
            total *= len(values)
            if total > room:
                raise ConfigError(f"hostlist {expr!r} expands to more than {MAX_HOSTS} names")
            choices.append(values)
        elif piece:
            choices.append([piece])
    if total > room:
        raise ConfigError(f"hostlist {expr[:200]!r} expands to more than {MAX_HOSTS} names")
    names = ["".join(c) for c in product(*choices)]
    for n in names:
        validate(n, expr)
    return names


def _range_values(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise ConfigError(f"hostlist {expr!r}: {item!r} is not a number or a range a-b")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise ConfigError(f"hostlist {expr!r}: range {item!r} runs backwards")
        if int(hi) - int(lo) >= MAX_HOSTS:
            raise ConfigError(f"hostlist {expr!r} expands to more than {MAX_HOSTS} names")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        out.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
    return out


def validate(name: str, context: str | None = None) -> str:
    if not NAME.fullmatch(name) or len(name) > 253:
        where = f" in {context!r}" if context and context != name else ""
        raise ConfigError(f"invalid node name {name!r}{where}: only letters, digits, '.', '_' "
                          "and '-' are allowed")
    return name


def compress(names: list[str]) -> str:
    """['gpu001', 'gpu002', 'gpu003', 'gpu010', 'login1'] -> 'gpu[001-003,010],login1'."""
    groups: dict[tuple[str, str, int], list[int]] = {}
    plain: list[str] = []
    for n in names:
        m = re.match(r"^(.*?)(\d+)(\D*)$", n)
        if not m:
            plain.append(n)
            continue
        prefix, digits, suffix = m.groups()
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((prefix, suffix, width), []).append(int(digits))
    out = []
    for (prefix, suffix, width), nums in groups.items():
        nums = sorted(set(nums))
        if len(nums) == 1:
            out.append(f"{prefix}{str(nums[0]).zfill(width)}{suffix}")
            continue
        ranges, start, prev = [], nums[0], nums[0]
        tail: list[int | None] = [*nums[1:], None]
        for x in tail:
            if x is not None and x == prev + 1:
                prev = x
                continue
            a, b = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(a if start == prev else f"{a}-{b}")
            if x is not None:
                start = prev = x
        out.append(f"{prefix}[{','.join(ranges)}]{suffix}")
    return ",".join(out + plain)
