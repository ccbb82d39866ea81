"""The release gate's verdict kept in history, as the pre-job gate's shadow decisions are:
one `gate-release` run, a row for the release itself (node `*`: promote or hold, with the
reason in words) and a row per canary in `gate_decisions` (stetho.history.decisions), so
`stetho history decisions` shows which release was let through or held, and why.

A verdict that could not be kept is a warning, never a change of the verdict: the release
was judged either way."""

from __future__ import annotations

from pathlib import Path

from stetho.gate.release.run import ReleaseOutcome
from stetho.history.decisions import RELEASE_NODE, NodeDecision

#: The release gate's verdict as a node decision (anything else: unevaluated, never go).
VERDICTS = {"pass": "go", "fail": "block"}


def decisions(outcome: ReleaseOutcome) -> list[NodeDecision]:
    """The release's own decision (promote only on a pass: hold when blocked or not
    evaluated), then each canary's: the release's verdict, with the benchmarks that did not
    pass."""
    verdict = VERDICTS.get(outcome.verdict, "unevaluated")
    bad = () if verdict == "go" else tuple(
        c.benchmark for c in outcome.comparisons if c.verdict != "pass")
    whole = NodeDecision(outcome.policy, "release", RELEASE_NODE,
                         "promote" if verdict == "go" else "hold", bad, reason(outcome))
    return [whole, *(NodeDecision(outcome.policy, "release", n, verdict, bad)
                     for n in outcome.canaries)]


def reason(outcome: ReleaseOutcome) -> str:
    """Why, in words: the verdict line, who was compared, each benchmark's first reason and
    what the stage may do."""
    from stetho.core.hostlist import compress

    parts = [outcome.summary(), f"canaries {compress(outcome.canaries)} vs controls "
             f"{compress(outcome.controls)}"]
    parts += [f"{c.benchmark}: {c.verdict}: {c.reasons[0]}" if c.reasons else
              f"{c.benchmark}: {c.verdict}" for c in outcome.comparisons]
    return "; ".join(parts + ([outcome.stage] if outcome.stage else []))


def keep(db: Path, gate_id: str, outcome: ReleaseOutcome, now: float, command: str
         ) -> str | None:
    """Record the verdict in history; why it was not, as a warning, or None."""
    import sqlite3

    from stetho.history import decisions as ledger
    from stetho.history.store import History, HistoryError, describe

    try:
        with History(db) as h:
            ledger.record(h, gate_id, decisions(outcome), when=now, command=command,
                          kind=ledger.RELEASE_KIND, exit_code=outcome.exit_code)
    except HistoryError as exc:
        return f"release decision not recorded: {exc}"
    except (sqlite3.Error, OSError) as exc:
        return f"release decision not recorded in {db}: {describe(exc)}"
    return None
