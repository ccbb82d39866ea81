"""What every stetho page shares, apart from any template engine: the status colours and the
links to reports. The sweep's page (stetho.sinks.runpage, Jinja2) and the gate's
(stetho.sinks.gatepage, no template) read them here, so a page that never renders a template
never imports one."""

from __future__ import annotations

from urllib.parse import quote

#: The colour of each status (the grid, the legend and the chart use the same).
COLOURS = {"fail": "#d62728", "error": "#9467bd", "warn": "#f2b705", "skip": "#c7c7c7",
           "pass": "#2ca02c"}
ORDER = ("fail", "error", "warn", "skip", "pass")
#: Problem rows listed under the grid at most (the grid and the reports have the rest).
MAX_PROBLEMS = 500


def href(path: str) -> str:
    """A relative link that stays a relative link: no scheme survives quoting ':', and a
    leading '/' (absolute or protocol-relative '//host') is made relative with './'. The
    page escapes the result like any other value."""
    link = quote(path, safe="/#")
    return "./" + link if link.startswith("/") else link
