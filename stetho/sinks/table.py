"""The terminal table: failing rows first, value against expected, and what to do about it."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import NamedTuple

from stetho.results import SEVERITY, Result, counts, format_value, ordered
from stetho.sinks.spool import Results

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


def render(results: Sequence[Result], *, width: int = 160, color: bool = False,
           show: tuple[str, ...] = ALL, group_ok: bool = True) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(header_style="bold")
    for col, kw in (("node", {"no_wrap": True}), ("check", {"no_wrap": True}),
                    ("subject", {"no_wrap": True}), ("status", {"no_wrap": True}),
                    ("value / expected", {"max_width": 44}), ("message", {"max_width": 60}),
                    ("remediation", {"max_width": 60})):
        table.add_column(col, overflow="fold", **kw)
    shown = rows(results, show, group_ok)
    for row in shown:
        table.add_row(row.node, row.check, _escape(row.subject),
                      f"[{_STYLE[row.status]}]{row.status.upper()}[/]", _escape(row.value),
                      _escape(row.message), _escape(row.remediation))
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color,
                      highlight=False, soft_wrap=False)
    if shown:
        console.print(table)
    c = counts(results)
    hidden = sum(n for status, n in c.items() if status not in show)
    console.print(summary(results) + (f" ({hidden} not shown)" if hidden else ""))
    return buf.getvalue()


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def summary(results: Sequence[Result]) -> str:
    c = counts(results)
    nodes = (results.node_count() if isinstance(results, Results)
             else len({r.node for r in results if r.node != "*"}))
    parts = [f"{c[s]} {s}" for s in ALL]
    return f"{nodes} node{'s' if nodes != 1 else ''}, {len(results)} results: " + ", ".join(parts)
