"""How good the rules are, measured on what technicians found (resolved reports).

For each rule (a cause id), over the resolved reports dated in the window:

* **precision** = reports diagnosed as the cause whose technician found that cause, over
  reports diagnosed as it (a `no-fault-found` or another found cause counts against it);
* **recall** = the same hits over the reports where the technician found that cause (a report
  diagnosed as something else, or undiagnosed, counts against it);
* the **confusion pairs**: diagnosed X, found Y (X != Y), with counts, most frequent first;
* the **no-fault-found rate**: the share of resolved reports where nothing was wrong.

A figure with nothing under it is None, never 0 or 1: a rule no resolved report was diagnosed
as has no precision, and with no resolved report at all there are no figures, only the count
(`resolved: 0`). `measure` returns plain JSON-ready data, which `stetho kb accuracy --json`
prints and the run page and the Prometheus textfile render (stetho.sinks), so every view shows
the same numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from stetho.publish.reports import ReportMeta, _iso
from stetho.publish.resolve import NO_FAULT_FOUND

#: A report no rule explained: it has no precision, but what was found there is a miss.
UNDIAGNOSED = "undiagnosed"


def _ratio(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def measure(reports: Iterable[ReportMeta], *, since: datetime | None,
            rules: Iterable[str] = ()) -> dict[str, Any]:
    """The figures over the resolved reports dated at or after `since` (None: all). `rules`
    are the catalogue's cause ids: each gets a row even with no resolved report (its figures
    None), so a rule never measured is seen as such."""
    window = [r for r in reports if since is None or r.date >= since]
    resolved = [r for r in window if r.resolution is not None]
    pairs = [(r.cause, r.resolution.found) for r in resolved if r.resolution is not None]
    diagnosed = Counter(d for d, _ in pairs)
    found = Counter(f for _, f in pairs)
    correct = Counter(d for d, f in pairs if d == f)
    nff_by = Counter(d for d, f in pairs if f == NO_FAULT_FOUND)
    names = set(rules) | {d for d, _ in pairs} | {f for _, f in pairs}
    names -= {NO_FAULT_FOUND, UNDIAGNOSED}
    rows = []
    if resolved:
        for name in sorted(names):
            rows.append({"rule": name, "diagnosed": diagnosed[name], "found": found[name],
                         "correct": correct[name],
                         "precision": _ratio(correct[name], diagnosed[name]),
                         "recall": _ratio(correct[name], found[name]),
                         "no_fault_found": nff_by[name]})
    confusion = Counter((d, f) for d, f in pairs if d != f)
    nff = found[NO_FAULT_FOUND]
    return {
        "since": _iso(since) if since is not None else None,
        "reports": len(window),
        "resolved": len(resolved),
        "no_fault_found": nff,
        "no_fault_found_rate": _ratio(nff, len(resolved)),
        "rules": rows,
        "confusion": [{"diagnosed": d, "found": f, "count": n} for (d, f), n in
                      sorted(confusion.items(), key=lambda kv: (-kv[1], kv[0]))],
    }


def summary(acc: dict[str, Any]) -> str:
    """One line: how many resolved reports, and the overall share confirmed."""
    since = f" since {acc['since'][:10]}" if acc.get("since") else ""
    n = acc["resolved"]
    if not n:
        return (f"no resolved reports{since} ({acc['reports']} reports in the window): no "
                "precision or recall to show; record repairs with `stetho kb resolve`")
    hits = sum(r["correct"] for r in acc["rules"])
    rate = acc["no_fault_found_rate"]
    return (f"{n} resolved report{'s' if n != 1 else ''}{since} (of {acc['reports']}): "
            f"{hits} confirmed the diagnosed cause, no fault found in {acc['no_fault_found']} "
            f"({rate:.0%})")


def of_repo(repo: str, since: str = "180d", rules: Iterable[str] = ()) -> dict[str, Any]:
    """The figures of a knowledge base over the last `since` (a duration: 180d, 12w), with a
    row for each of `rules` (the catalogue's cause ids: stetho.diagnosis.rules.causes)."""
    from datetime import timedelta, timezone

    from stetho.history.store import parse_since
    from stetho.publish import kb

    start = datetime.now(timezone.utc) - timedelta(seconds=parse_since(since))
    return measure(kb.reports(repo), since=start, rules=rules)


def of_repo_or_why(repo: str | None, since: str = "180d", rules: Iterable[str] = ()
                   ) -> dict[str, Any] | None:
    """For the run page and the sweep's textfile: the figures, {"error": why} when the
    knowledge base could not be read (said so, never holding a run up), None without one."""
    from stetho.errors import StethoError

    if not repo:
        return None
    try:
        return of_repo(repo, since, rules)
    except (StethoError, OSError) as exc:
        return {"error": str(exc)}
