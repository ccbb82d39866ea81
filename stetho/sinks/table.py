"""The terminal table: failing rows first, value against expected, and what to do about it."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from stetho.results import SEVERITY, Result, counts, format_value, ordered
from stetho.sinks import safe
from stetho.sinks.spool import Results

if TYPE_CHECKING:
    from rich.console import Console

_STYLE = {"fail": "bold red", "error": "bold magenta", "warn": "yellow", "skip": "dim",
          "pass": "green"}
ALL = ("fail", "error", "warn", "skip", "pass")


class Row(NamedTuple):
    node: str
    check: str
    subject: str
    status: str
    value: str
    message: str
    remediation: str


def rows(results: Sequence[Result], show: tuple[str, ...] = ALL,
         group_ok: bool = True) -> list[Row]:
    """Problems (fail/error/warn) get a row each. With `group_ok`, the passes (or skips) of one
    check on one node share a row, "gpu0..gpu7 (8)", so a healthy node reads at a glance."""
    out: list[Row] = []
    groups: dict[tuple[str, str, str], list[Result]] = {}
    wanted = (results.where(show) if isinstance(results, Results)
              else [r for r in results if r.status in show])
    for r in ordered(wanted):
        if group_ok and r.status in ("pass", "skip"):
            groups.setdefault((r.node, r.check, r.status), []).append(r)
        else:
            out.append(_row(r))
    for members in groups.values():
        if len(members) == 1:
            out.append(_row(members[0]))
            continue
        first, last = members[0], members[-1]
        same = all(m.message == first.message for m in members)
        out.append(Row(first.node, first.check,
                       f"{first.subject}..{last.subject} ({len(members)})", first.status, "",
                       first.message if same else "", ""))
    return sorted(out, key=lambda x: (SEVERITY[x.status], x.node, x.check, x.subject))


def _row(r: Result) -> Row:
    value = format_value(r.value, r.unit)
    if r.expected is not None:
        value = f"{value} (expected {r.expected})" if value else f"expected {r.expected}"
    message = r.message
    if r.override:
        o = r.override
        message = (f"passed with override {o.get('id')} (approved by {o.get('approver')}, "
                   f"expires {o.get('expires_at')}; reason: {o.get('reason')}): {message}")
    return Row(r.node, r.check, r.subject or "-", r.status, value, message,
               r.remediation or "")


def fixes(shown: list[Row]) -> list[tuple[str, str]]:
    """(check, remediation) once each, in the order of the rows (worst first): the same fix
    repeated on every GPU's row says nothing new and pushes the table off the screen."""
    seen: dict[tuple[str, str], None] = {}
    for row in shown:
        if row.remediation and row.status in ("fail", "error", "warn"):
            seen.setdefault((row.check, row.remediation), None)
    return list(seen)


def render(results: Sequence[Result], *, width: int = 160, color: bool = False,
           show: tuple[str, ...] = ALL, group_ok: bool = True) -> str:
    """The table in `width` columns (80 is enough: long values and messages wrap), after a
    "what to do" list with each check's remediation once. Every cell goes through
    stetho.sinks.safe: text a node produced never reaches the terminal as an escape sequence."""
    try:
        shown = rows(results, show, group_ok)
    except safe.WRITE_ERRORS:  # a value format_value cannot print
        shown = rows(safe.results(results), show, group_ok)
    shown = [Row(*(safe.text(x) for x in r)) for r in shown]
    cells: list[tuple[str, ...]] = [(r.node, r.check, r.subject, r.status.upper(), r.value,
                                     r.message) for r in shown]
    widths = _widths(cells, width)
    buf = io.StringIO()
    console: _Plain | Console = _Plain(buf)
    if color:  # rich only for colour: a prolog's or CI's plain table needs none of it
        from rich.console import Console

        console = Console(file=buf, width=width, force_terminal=True, highlight=False,
                          soft_wrap=False)
    _escape = _markup_escape if color else _as_is
    todo = fixes(shown)
    if todo:
        console.print("[bold]What to do[/]" if color else "What to do")
        import textwrap

        for check, fix in todo:
            console.print(_escape(textwrap.fill(f"{check}: {fix}", max(40, width - 1),
                                                initial_indent="  ", subsequent_indent="    ",
                                                break_on_hyphens=False)),
                          overflow="ignore", crop=False)
    if shown:
        for head in _lay(_HEADERS, widths):
            console.print(_escape(head), style="bold" if color else None)
        console.print("-" * min(width, sum(widths) + 2 * (len(widths) - 1)))
        for row, cell in zip(shown, cells, strict=True):
            for i, line in enumerate(_lay(cell, widths)):
                text = _escape(line)
                if i == 0 and color:  # the status cell, coloured in place
                    at = sum(widths[:3]) + 6
                    text = (_escape(line[:at]) + f"[{_STYLE[row.status]}]{line[at:at + 6]}[/]"
                            + _escape(line[at + 6:]))
                console.print(text, overflow="ignore", crop=False)
    c = counts(results)
    hidden = sum(n for status, n in c.items() if status not in show)
    console.print(summary(results) + (f" ({hidden} not shown)" if hidden else ""))
    return buf.getvalue()


class _Plain:
    """The few calls render makes of rich's Console, for plain text: lines as given."""

    def __init__(self, buf: io.StringIO) -> None:
        self.buf = buf

    def print(self, text: str, style: str | None = None, **_: object) -> None:
        self.buf.write(text + "\n")


def _as_is(text: str) -> str:
    return text


_HEADERS = ("node", "check", "subject", "status", "value / expected", "message")
#: Widest each column may be before the message; the message gets the rest, at least MIN_MSG.
_CAPS = (32, 22, 18, 6, 24)
MIN_MSG = 24
#: The columns that give up characters when the terminal is narrow, the widest first among
#: value, subject and check, then the node (the name a person acts on); never status.
_SHRINK = (4, 2, 1, 0)
_FLOOR = (8, 6, 4, 6, 6)


def _widths(cells: list[tuple[str, ...]], width: int) -> list[int]:
    """Column widths that fit `width`: each column as wide as its longest cell (up to its
    cap), then the widest shrinks until the message has MIN_MSG columns; long cells wrap."""
    natural = [max([len(h) if i != 4 else 8] + [len(c[i]) for c in cells])
               for i, h in enumerate(_HEADERS)]
    cols = [min(n, cap) for n, cap in zip(natural, _CAPS, strict=False)]
    gaps = 2 * (len(_HEADERS) - 1)
    # a node's name up to 30 characters stays whole when the terminal has 80 columns
    floor = (min(cols[0], 30 if width >= 80 else _FLOOR[0]), *_FLOOR[1:])
    while width - sum(cols) - gaps < MIN_MSG:
        # the widest of value, subject and check gives a character first; the node last
        open_ = [i for i in _SHRINK[:-1] if cols[i] > floor[i]]
        if not open_:
            open_ = [0] if cols[0] > floor[0] else []
        if not open_:
            break
        cols[max(open_, key=lambda i: cols[i])] -= 1
    return cols + [max(16, min(natural[-1], width - sum(cols) - gaps))]


def _lay(cells: tuple[str, ...], widths: list[int]) -> list[str]:
    """One row as lines: each cell wrapped (words first, long words split) in its width."""
    import textwrap
    from itertools import zip_longest

    wrapped = [textwrap.wrap(c, w, break_on_hyphens=False) or [""]
               for c, w in zip(cells, widths, strict=True)]
    return ["  ".join(part.ljust(w) for part, w in zip(parts, widths, strict=True)).rstrip()
            for parts in zip_longest(*wrapped, fillvalue="")]


def _markup_escape(text: str) -> str:
    return text.replace("[", r"\[")


def node_count(results: Sequence[Result]) -> int:
    return (results.node_count() if isinstance(results, Results)
            else len({r.node for r in results if r.node != "*"}))


def summary(results: Sequence[Result]) -> str:
    c = counts(results)
    nodes = node_count(results)
    parts = [f"{c[s]} {s}" for s in ALL]
    return f"{nodes} node{'s' if nodes != 1 else ''}, {len(results)} results: " + ", ".join(parts)
