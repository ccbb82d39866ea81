"""A node's whole outcome in one JSON document: what `stetho check --outcome -` prints.

The sweep reads it from the check task's stdout (no extra fetch round trip per node) and
splits it into the run folder's evidence bundle, results JSON and JUnit for that node. The
evidence bundle travels gzip-compressed (base64): raw it is ~200 KB a node, Ansible carries the
stdout twice in each event, and ansible-runner drops an event's result above MAX_EVENT_RES.
"""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import dataclass
from typing import Any

from stetho.checking.nodes import NodeSummary
from stetho.evidence.bundle import Bundle
from stetho.results import Result

SCHEMA = "stetho.outcome"
VERSION = 1
#: Where an outcome starts in a node's stdout: one compact JSON line, schema first.
MARKER = '{"schema":"stetho.outcome"'


@dataclass(frozen=True)
class Outcome:
    node: str
    exit_code: int
    results: list[Result]
    junit: str
    evidence: Bundle | None
    summary: NodeSummary | None = None  # versions, busbw and metrics, for fleet/history

    def to_json(self) -> dict[str, Any]:
        from stetho.sinks import json_out

        return {"schema": SCHEMA, "schema_version": VERSION, "node": self.node,
                "exit_code": self.exit_code, "results": json_out.document(self.results),
                "junit": self.junit,
                "evidence_gz": _pack(self.evidence.to_json()) if self.evidence else None,
                "summary": self.summary}

    def render(self) -> str:
        """One line of compact JSON, schema first, so a reader finds it among anything else
        the node printed."""
        return json.dumps(self.to_json(), separators=(",", ":"), default=str) + "\n"

    @classmethod
    def of(cls, results: list[Result], bundle: Bundle | None,
           summary: NodeSummary | None) -> Outcome:
        """A node's outcome from its check: results, their JUnit, evidence and summary."""
        from stetho.results import exit_code
        from stetho.sinks import junit

        node = bundle.node if bundle is not None else (results[0].node if results else "?")
        return cls(node, exit_code(results), results, junit.render(results), bundle, summary)


class OutcomeError(ValueError):
    """The text is not a stetho outcome (a crash, a traceback, an old stetho on the node)."""


def parse(text: str) -> Outcome:
    start = text.find(MARKER)
    if start < 0:
        tail = text.strip().splitlines()[-1:] if text.strip() else ["(no output)"]
        raise OutcomeError(f"no stetho outcome in the check's output: {tail[0][:300]}")
    try:
        data = json.loads(text[start:].strip().splitlines()[0])
    except (json.JSONDecodeError, IndexError) as exc:
        raise OutcomeError(f"unreadable stetho outcome: {exc}") from None
    if data.get("schema_version", 0) > VERSION:
        raise OutcomeError(f"the node's stetho writes outcome version {data['schema_version']}, "
                           f"newer than this controller's ({VERSION})")
    raw = data.get("evidence")
    if data.get("evidence_gz"):
        try:
            raw = json.loads(gzip.decompress(base64.b64decode(data["evidence_gz"])))
        except (ValueError, OSError, EOFError) as exc:
            raise OutcomeError(f"unreadable evidence in the stetho outcome: {exc}") from None
    from stetho.core import hostlist
    from stetho.errors import ConfigError

    try:
        node = hostlist.validate(str(data.get("node", "")))
    except ConfigError as exc:
        raise OutcomeError(f"stetho outcome: {exc}") from None
    evidence = Bundle.from_json(raw, source="outcome") if raw else None
    return Outcome(node=node, exit_code=int(data["exit_code"]),
                   results=[Result.from_json(r) for r in data["results"]["results"]],
                   junit=str(data.get("junit", "")), evidence=evidence,
                   summary=data.get("summary"))


def _pack(doc: dict[str, Any]) -> str:
    return base64.b64encode(gzip.compress(json.dumps(doc, separators=(",", ":"))
                                          .encode(), 6)).decode("ascii")
