"""A localization's run page: index.html beside localize.md, for a person who opens the run
folder in a browser (a CI artifact, a file share).

It leads with what to do first, then the suspects (what was convicted, what never decided),
then every round's group tests and how each one voted. The markup is
templates/localize-page.html.j2 (autoescape on); this module only shapes the view model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stetho.core import hostlist
from stetho.localize.engine import Localization
from stetho.localize.model import FAIL, INTERMITTENT, PASS
from stetho.sinks import runpage

TEMPLATE = "localize-page.html.j2"
#: A verdict's colour, from the run page's palette: a convicting test in the fail colour.
VERDICT_STATUS = {FAIL: "fail", PASS: "pass", INTERMITTENT: "fail"}  # a straggler: never pass


@dataclass(frozen=True)
class TestRow:
    id: int
    rounds: str
    nodes: str
    padding: str
    purpose: str
    verdict: str
    status: str  # the palette's class: fail, pass, or error (undecided or could not run)
    scores: str
    role: str  # "convicts", "clears neighbours" or ""
    error: str


def _status(loc: Localization) -> str:
    return {0: "pass", 1: "fail"}.get(loc.exit_code, "error")


def rows(loc: Localization) -> list[TestRow]:
    """Every group test in the order it ran, with what it did for a finding."""
    convicts = {t for f in loc.findings for t in f.convicting}
    clears = {t for f in loc.findings for t in f.clearing}
    return [TestRow(
        t.id, ", ".join(str(r) for r in t.rounds) or str(t.round),
        hostlist.compress(list(t.nodes)), hostlist.compress(list(t.padding)) if t.padding else "",
        t.purpose, t.verdict or "undecided", VERDICT_STATUS.get(t.verdict or "", "error"),
        ", ".join(f"{s:.2f}" for s in t.scores),
        "convicts" if t.id in convicts else "clears neighbours" if t.id in clears else "",
        t.error or "") for t in loc.tests]


def render(loc: Localization, verdict: str, meta: Mapping[str, object] | None = None,
           cost: str = "") -> str:
    """The page; `verdict` and `cost` are the lines localize.md leads with and quotes."""
    return runpage.template(TEMPLATE).render(
        title=f"localize {meta.get('run', '') if meta else ''}".strip(), verdict=verdict,
        status=_status(loc), findings=[
            {"kind": f.kind, "subject": f.subject, "action": f.action, "detail": f.detail,
             "nodes": hostlist.compress(list(f.nodes)),
             "convicting": ", ".join(map(str, f.convicting)),
             "clearing": ", ".join(map(str, f.clearing))} for f in loc.findings],
        unresolved=hostlist.compress(loc.unresolved) if loc.unresolved else "",
        stopped=loc.stopped or "", tests=rows(loc), cost=cost,
        meta={str(k): str(v) for k, v in (meta or {}).items()})
