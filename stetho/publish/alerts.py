"""An alert, and what it says on the wire: a generic JSON body, or Slack's blocks. A message
also says when it took the last slot of the rate limit (further alerts are held back until a
time) and summarises the alerts held back since the last message that was sent."""

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


@dataclass(frozen=True)
class Suppressed:
    """Alerts for one node and cause that the rate limit held back: how many, the first and the
    last time. `upto` is the state's last row they cover (to forget them once reported)."""

    count: int
    first: float
    last: float
    upto: int = 0


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


def render(alert: Alert, fmt: str, *, now: float | None = None,
           held_until: float | None = None, suppressed: Suppressed | None = None
           ) -> dict[str, Any]:
    """The JSON body for `alert` in format `fmt` ("generic" or "slack"). `held_until`: this
    message took the last slot, further alerts for the node and cause are held back until
    then. `suppressed`: what was held back since the last message sent, summarised here."""
    when = time.time() if now is None else now
    if fmt == "generic":
        return {
            "source": "stetho", "node": alert.node, "cause": alert.cause,
            "title": alert.title, "summary": alert.summary, "severity": alert.severity,
            "report": alert.report, "run": alert.run, "time": iso(when),
            "held_back_until": iso(held_until) if held_until is not None else None,
            "suppressed": ({"count": suppressed.count, "first": iso(suppressed.first),
                            "last": iso(suppressed.last)} if suppressed else None),
        }
    if fmt == "slack":
        return _render_slack(alert, when, held_until, suppressed)
    raise ValueError(f"unknown webhook format {fmt!r}; expected one of {FORMATS}")


def _notes(alert: Alert, held_until: float | None, suppressed: Suppressed | None) -> str:
    """The rate limit's lines: what was held back before this message, what will be after."""
    node, cause = slack_escape(alert.node), slack_escape(alert.cause)
    lines = []
    if suppressed is not None:
        n = suppressed.count
        lines.append(f":information_source: {n} alert{'s' if n != 1 else ''} for `{node}` / "
                     f"`{cause}` held back since the last message (first "
                     f"{_human(suppressed.first)}, last {_human(suppressed.last)}).")
    if held_until is not None:
        lines.append(f":mute: Further alerts for `{node}` / `{cause}` are held back until "
                     f"{_human(held_until)}.")
    return "\n".join(lines)


def _render_slack(alert: Alert, when: float, held_until: float | None,
                  suppressed: Suppressed | None) -> dict[str, Any]:
    e = slack_escape
    node, title = e(alert.node), e(alert.title)
    icon = ":red_circle:" if alert.severity == "critical" else ":warning:"
    text = f"stetho {alert.severity.upper()}: {node}: {title}"
    head = (f"{icon} *{alert.severity.upper()}* *{title}*\n"
            f"*Node:* `{node}`  *Cause:* `{e(alert.cause)}`")
    tail = "\n".join(x for x in (f"*Run:* `{e(alert.run)}`" if alert.run else "",
                                 _slack_report(alert.report),
                                 _notes(alert, held_until, suppressed)) if x)
    room = SLACK_SECTION_MAX - len(head) - len(tail) - 2
    summary = _clip(e(alert.summary), max(0, room))
    body = _clip("\n".join(x for x in (head, summary, tail) if x), SLACK_SECTION_MAX)
    return {
        "text": _clip(text, SLACK_SECTION_MAX),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": body}},
            {"type": "context", "elements": [
                {"type": "mrkdwn", "text": f"stetho · {iso(when)}"}]},
        ],
    }
