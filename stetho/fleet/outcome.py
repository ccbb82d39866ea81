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
from typing import Any, cast

from stetho.checking.nodes import NodeSummary
from stetho.evidence.bundle import Bundle
from stetho.fleet import lazy
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
    #: the ingest's outcome: the evidence JSON as the node sent it (checked to be of its node,
    #: stetho.fleet.lazy), with `evidence` None: parsed only where something reads it
    evidence_raw: bytes | None = None

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


def parse(text: str, host: str | None = None) -> Outcome:
    """The outcome in a node's output, or OutcomeError saying why it cannot be used: not
    there, not JSON, malformed (an unknown status is an error result; a lone surrogate,
    deep nesting or a huge integer refuse the outcome), or, given `host`, speaking for any
    node but `host` (its node, its evidence, a result or its summary)."""
    start = text.find(MARKER)
    if start < 0:
        tail = text.strip().splitlines()[-1:] if text.strip() else ["(no output)"]
        raise OutcomeError(f"no stetho outcome in the check's output: {tail[0][:300]}")
    from stetho.core import untrusted

    try:
        data = untrusted.loads(text[start:].strip().splitlines()[0])
    except (untrusted.UntrustedJsonError, IndexError) as exc:
        raise OutcomeError(f"unreadable stetho outcome: {exc}") from None
    return from_json(data, host)


def from_json(data: Any, host: str | None = None, *, keep_evidence: str | None = None
              ) -> Outcome:
    """The outcome in `data` (already parsed, e.g. inside a spool file), or OutcomeError as
    `parse` says. `keep_evidence` (a node's name; the ingest): evidence that is plainly
    that node's is kept as the bytes the node sent (`evidence_raw`), not parsed."""
    if not isinstance(data, dict):
        raise OutcomeError("unreadable stetho outcome: not a JSON object")
    version = data.get("schema_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise OutcomeError("unreadable stetho outcome: schema_version is not a number")
    if version > VERSION:
        raise OutcomeError(f"the node's stetho writes outcome version {version}, "
                           f"newer than this controller's ({VERSION})")
    try:
        out = _outcome(data, keep_evidence)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise OutcomeError(f"malformed stetho outcome ({type(exc).__name__}: "
                           f"{str(exc)[:300]})") from None
    return out if host is None else own(out, host)


def _outcome(data: dict[str, Any], host: str | None = None) -> Outcome:
    from stetho.core import hostlist, untrusted
    from stetho.errors import ConfigError
    from stetho.evidence.bundle import BundleError

    raw = data.get("evidence")
    kept: bytes | None = None
    if data.get("evidence_gz"):
        try:
            text = unpack(data["evidence_gz"])
            if host is not None and lazy.plain(text, host):
                kept, raw = text, None
            else:
                raw = untrusted.loads(text)
        except (ValueError, OSError, EOFError) as exc:
            raise OutcomeError(f"unreadable evidence in the stetho outcome: {exc}") from None
    try:
        node = hostlist.validate(str(data.get("node", "")))
    except ConfigError as exc:
        raise OutcomeError(f"stetho outcome: {exc}") from None
    try:
        evidence = Bundle.from_json(raw, source="outcome") if raw else None
    except BundleError as exc:
        raise OutcomeError(str(exc)) from None
    code = data["exit_code"]
    if not isinstance(code, int) or isinstance(code, bool) or not 0 <= code < 256:
        raise OutcomeError(f"stetho outcome: exit code {str(code)[:40]} is not an exit code")
    rows = data["results"]["results"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise OutcomeError("stetho outcome: results is not a list of results")
    summary = data.get("summary")
    if summary is not None:
        _check_summary(summary)
    out = Outcome(node=node, exit_code=code, results=lazy.results(rows),
                  junit=str(data.get("junit", "")), evidence=evidence,
                  summary=cast("NodeSummary | None", summary))
    return out if kept is None else Outcome(
        out.node, out.exit_code, out.results, out.junit, None, out.summary, kept)


def _check_summary(s: Any) -> None:
    """A node summary of the shape NodeSummary says (fleet checks and history read it)."""
    from stetho.core.untrusted import finite

    def text(v: Any) -> bool:
        return isinstance(v, str)

    ok = (isinstance(s, dict) and all(text(s.get(k)) for k in ("node", "profile"))
          and isinstance(s.get("versions", {}), dict)
          and all(text(k) and isinstance(v, list) and all(map(text, v))
                  for k, v in s.get("versions", {}).items())
          and isinstance(s.get("busbw", {}), dict)
          and all(text(k) and finite(v) for k, v in s.get("busbw", {}).items())
          and isinstance(s.get("metrics", []), list)
          and all(isinstance(m, list) and len(m) == 5 and all(map(text, m[:3]))
                  and finite(m[3]) and text(m[4]) for m in s.get("metrics", [])))
    if not ok:
        raise OutcomeError("stetho outcome: malformed node summary (versions, busbw or "
                           "metrics not of their shape)")
    from stetho import profiles
    from stetho.errors import ConfigError

    try:  # fleet checks and history load it: a name, never a path
        profiles.check_name(s["profile"])
    except ConfigError as exc:
        raise OutcomeError(f"stetho outcome: node summary: {exc}") from None
    if not isinstance(s.get("collected_at", ""), str):
        raise OutcomeError("stetho outcome: node summary: collected_at is not text")


#: A result a node's own run names no node in: a site check file that would not load.
ANY_NODE = "*"


def own(out: Outcome, host: str) -> Outcome:
    """`out` if everything in it is about `host`, else OutcomeError naming what is not: one
    node's output never speaks for another (its results would be recorded under that name).
    A node's own run reports a site check file that would not load under node `*`: that
    result is the host's."""
    strays = sorted({str(r.node)[:60] for r in out.results
                     if r.node != host and r.node != ANY_NODE})
    others = [f"results for {', '.join(strays[:5])}{' ...' if len(strays) > 5 else ''}"
              ] if strays else []
    if out.node != host:
        others.insert(0, f"its node is {out.node}")
    if out.evidence is not None and out.evidence.node != host:
        others.append(f"its evidence is of {out.evidence.node}")
    if out.summary is not None and out.summary.get("node", host) != host:
        others.append(f"its summary is of {str(out.summary.get('node'))[:60]}")
    if others:
        raise OutcomeError(f"the output of {host} speaks for other nodes ({'; '.join(others)})"
                           ": none of it is recorded")
    results = [r if r.node == host else _as_host(r, host) for r in out.results]
    return Outcome(host, out.exit_code, results, out.junit, out.evidence, out.summary,
                   out.evidence_raw)


def own_bundle(bundle: Bundle, host: str) -> Bundle:
    """`bundle` if it is `host`'s evidence, else OutcomeError: evidence speaks for its node."""
    if bundle.node != host:
        raise OutcomeError(f"the evidence {host} sent names node {bundle.node!r}; not judged")
    return bundle


def _as_host(r: Result, host: str) -> Result:
    d = r.to_json()
    d["node"] = host
    return Result.from_json(d)


def unpack(text: object) -> bytes:
    """The compressed evidence, never inflated past the bundle size cap (max_bundle_mb)."""
    import zlib

    from stetho import config

    if not isinstance(text, str):
        raise ValueError("evidence_gz is not text")
    cap = int(config.active().max_bundle_mb * 2**20)
    inflate = zlib.decompressobj(wbits=31)  # gzip
    raw = inflate.decompress(base64.b64decode(text, validate=True), cap + 1)
    if len(raw) > cap or inflate.unconsumed_tail:
        raise ValueError(f"evidence larger than the {cap / 2**20:g} MiB cap (max_bundle_mb)")
    if not inflate.eof:
        raise ValueError("evidence is truncated")
    return raw


def _pack(doc: dict[str, Any]) -> str:
    return base64.b64encode(gzip.compress(json.dumps(doc, separators=(",", ":"))
                                          .encode(), 6)).decode("ascii")
