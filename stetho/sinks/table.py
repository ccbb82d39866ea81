"""The terminal table: failing rows first, value against expected, and what to do about it."""

from __future__ import annotations

import io

from stetho.results import Result, counts, format_value, ordered

_STYLE = {"fail": "bold red", "error": "bold magenta", "warn": "yellow", "skip": "dim",
          "pass": "green"}


def render(results: list[Result], *, width: int = 160, color: bool = False,
           show: tuple[str, ...] = ("fail", "error", "warn", "skip", "pass")) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold", expand=False)
    for col, kw in (("node", {"no_wrap": True}), ("check", {"no_wrap": True}),
                    ("subject", {"no_wrap": True}), ("status", {"no_wrap": True}),
                    ("value / expected", {"max_width": 44}), ("message", {"max_width": 60}),
                    ("remediation", {"max_width": 60})):
        table.add_column(col, overflow="fold", **kw)
    rows = [r for r in ordered(results) if r.status in show]
    for r in rows:
        table.add_row(r.node, r.check, r.subject or "-",
                      f"[{_STYLE[r.status]}]{r.status.upper()}[/]", _value(r), _escape(r.message),
                      _escape(r.remediation or ""))
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, no_color=not color,
                      highlight=False, soft_wrap=False)
    if rows:
        console.print(table)
    hidden = len(results) - len(rows)
    console.print(summary(results) + (f" ({hidden} rows not shown)" if hidden else ""))
    return buf.getvalue()


def _value(r: Result) -> str:
    value = format_value(r.value, r.unit)
    if r.expected is None:
        return _escape(value)
    return _escape(f"{value} (expected {r.expected})" if value else f"expected {r.expected}")


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def summary(results: list[Result]) -> str:
    c = counts(results)
    nodes = len({r.node for r in results if r.node != "*"})
    parts = [f"{c[s]} {s}" for s in ("fail", "error", "warn", "skip", "pass")]
    return f"{nodes} node{'s' if nodes != 1 else ''}, {len(results)} results: " + ", ".join(parts)
