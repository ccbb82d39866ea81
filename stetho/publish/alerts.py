"""An alert, and what it says on the wire: a generic JSON body, or Slack's blocks."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

Severity = Literal["critical", "warning"]
SEVERITIES: tuple[str, ...] = ("critical", "warning")

FORMATS: tuple[str, ...] = ("generic", "slack")
#: Slack refuses section text over 3000 characters; keep well inside it.
SLACK_SECTION_MAX = 2900


@dataclass(frozen=True)
class Alert:
    """One thing worth telling a human about a node. `cause` is the rate-limit key together
    with `node`: use a stable identifier (check name, fault class), not free text, or every
    variation counts as a new cause and the limit does nothing."""

    node: str
    cause: str
    title: str
    summary: str
    severity: Severity = "warning"
    report: str | None = None  # a link or path to the diagnosis report
    run: str | None = None

    def __post_init__(self) -> None:
        # Statically enforced by the Literal; checked here too so a typo fails in tests, at
        # construction, rather than rendering an unknown colour in a channel.
        if self.severity not in SEVERITIES:
            raise ValueError(f"alert severity must be one of {SEVERITIES}, not {self.severity!r}")


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds").replace(
        "+00:00", "Z")


def _human(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def slack_escape(text: str) -> str:
    """Slack's three control characters in message text: &, <, > (in that order, so the & of
    an escape is not escaped again)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: max(0, n - 1)] + "…"


def _slack_report(report: str | None) -> str:
    if not report:
        return ""
    if report.startswith(("http://", "https://")) and "|" not in report:
        return f"<{slack_escape(report)}|Diagnosis report>"
    return f"Report: `{slack_escape(report)}`"


def render(alert: Alert, fmt: str, silenced: bool = False, *, now: float | None = None,
           until: float | None = None) -> dict[str, Any]:
    """The JSON body for `alert` in format `fmt` ("generic" or "slack"). `silenced` renders the
    one notice that further alerts for this node and cause are held back until `until`."""
    when = time.time() if now is None else now
    if fmt == "generic":
        return {
            "source": "stetho", "node": alert.node, "cause": alert.cause,
            "title": alert.title, "summary": alert.summary, "severity": alert.severity,
            "report": alert.report, "run": alert.run, "silenced": silenced,
            "time": iso(when),
        } | ({"silenced_until": iso(until) if until is not None else None}
             if silenced else {})
    if fmt == "slack":
        return _render_slack(alert, silenced, when, until)
    raise ValueError(f"unknown webhook format {fmt!r}; expected one of {FORMATS}")


def _render_slack(alert: Alert, silenced: bool, when: float,
                  until: float | None) -> dict[str, Any]:
    e = slack_escape
    node, cause, title = e(alert.node), e(alert.cause), e(alert.title)
    report = _slack_report(alert.report)
    if silenced:
        horizon = _human(until) if until is not None else "the 24 h window ends"
        text = (f"stetho: further alerts for {node} / {cause} are silenced until {horizon}"
                f" (latest: {title})")
        body = (f":mute: *Further alerts for `{node}` / `{cause}` are silenced until "
                f"{horizon}.*\nLatest: *{title}*")
    else:
        icon = ":red_circle:" if alert.severity == "critical" else ":warning:"
        text = f"stetho {alert.severity.upper()}: {node}: {title}"
        head = (f"{icon} *{alert.severity.upper()}* *{title}*\n"
                f"*Node:* `{node}`  *Cause:* `{cause}`")
        tail = "\n".join(x for x in (
            f"*Run:* `{e(alert.run)}`" if alert.run else "", report) if x)
        room = SLACK_SECTION_MAX - len(head) - len(tail) - 2
        summary = _clip(e(alert.summary), max(0, room))
        body = "\n".join(x for x in (head, summary, tail) if x)
        report = ""  # already in the body
    if report:
        body = f"{body}\n{report}"
    body = _clip(body, SLACK_SECTION_MAX)
    return {
        "text": _clip(text, SLACK_SECTION_MAX),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": body}},
            {"type": "context", "elements": [
                {"type": "mrkdwn", "text": f"stetho · {iso(when)}"}]},
        ],
    }
