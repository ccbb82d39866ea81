"""The release gate's verdict kept in history, as the pre-job gate's shadow decisions are:
one `gate-release` run and a row per canary in `gate_decisions` (stetho.history.decisions),
so `stetho history decisions` shows which release was let through or held, and why.

A verdict that could not be kept is a warning, never a change of the verdict: the release
was judged either way."""

from __future__ import annotations

from pathlib import Path

from stetho.gate.release.run import ReleaseOutcome
from stetho.history.decisions import NodeDecision

#: The release gate's verdict as a node decision (anything else: unevaluated, never go).
VERDICTS = {"pass": "go", "fail": "block"}


def decisions(outcome: ReleaseOutcome) -> list[NodeDecision]:
    """Each canary's decision: the release's verdict, with the benchmarks that did not pass."""
    verdict = VERDICTS.get(outcome.verdict, "unevaluated")
    bad = tuple(c.benchmark for c in outcome.comparisons if c.verdict != "pass")
    return [NodeDecision(outcome.policy, "release", n, verdict,
                         () if verdict == "go" else bad) for n in outcome.canaries]


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
