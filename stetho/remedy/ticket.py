"""An RMA / data-centre ticket: one JSON document POSTed to the ticket webhook, naming the
node, the cause and the part as the evidence identifies it (GPU index, PCI address, serial,
UUID; HCA, port, GUID, the cable's far end and serial), with the evidence against what was
expected, so a technician knows which part to pull without opening the report.

Delivered once: a 2xx answer is `done`; anything else is `failed` (and is tried again at the
next run, since only a delivered ticket counts as done). The URL is a secret (it may carry a
token): it is never printed, and error texts have it redacted.
"""

from __future__ import annotations

from typing import Any

import requests

from stetho import __version__
from stetho.publish.redact import Redactor, error_text
from stetho.remedy.outcome import Outcome
from stetho.remedy.plan import Step

SCHEMA = "stetho.ticket"
TIMEOUT_S = 15.0
#: The keys of a part the payload carries, in the order a person reads them.
PART_KEYS = ("gpu", "pci", "serial", "uuid", "slot", "device", "port", "guid", "cable",
             "cable_serial", "disk")


def payload(step: Step, run: str = "", report: str = "") -> dict[str, Any]:
    where = dict(step.where)
    return {
        "schema": SCHEMA, "schema_version": 1, "stetho_version": __version__,
        "node": step.node, "cause": step.cause, "title": step.title,
        "severity": step.severity, "summary": step.summary, "part": step.part,
        "parts": {k: where[k] for k in PART_KEYS if k in where},
        "why": step.why,
        "evidence": [{"signal": e.signal, "value": e.value, "expected": e.expected,
                      "check": e.check, "subject": e.subject, "log_line": e.log_line}
                     for e in step.evidence],
        "earlier": [r.to_json() for r in step.earlier],
        "run": run, "report": report,
    }


def send(step: Step, url: str | None, act: bool, run: str = "") -> Outcome:
    """POST the ticket (with --act), or say what would be sent."""
    if not url:
        return Outcome(step, "planned", "no ticket webhook configured (--webhook, "
                       "STETHO_TICKET_URL): the ticket is not sent")
    if not act:
        return Outcome(step, "planned", f"dry run: would send a ticket for {step.part}")
    redact = Redactor(url)
    try:
        r = requests.post(url, json=payload(step, run), timeout=(TIMEOUT_S, TIMEOUT_S),
                          allow_redirects=False, headers={"User-Agent": "stetho"})
    except requests.RequestException as exc:
        return Outcome(step, "failed", f"ticket not delivered: {error_text(exc, redact)}")
    if not 200 <= r.status_code < 300:
        body = redact(" ".join(r.text.split()))[:200]
        return Outcome(step, "failed", f"ticket not delivered: HTTP {r.status_code}"
                       + (f": {body}" if body else ""))
    return Outcome(step, "done", f"ticket sent for {step.part} (HTTP {r.status_code})")
