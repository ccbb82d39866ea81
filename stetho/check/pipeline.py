"""collect -> check -> record -> emit, once: `run(request)` is every command's check run.

The CLI commands, the gate's local path, the sweep's own evaluation and baseline screening
each used to write this sequence out themselves, so an output added to one (the Prometheus
textfile, the run page) reached none of the others. Nothing here prints: progress goes to the
request's callbacks and the outcome carries what the caller shows.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.check.outcome import CheckOutcome, NothingSelected
from stetho.check.request import COMMANDS, CheckRequest
from stetho.errors import ConfigError

if TYPE_CHECKING:
    from stetho.checking.nodes import NodeSummary
    from stetho.evidence.bundle import Bundle
    from stetho.results import Result


def run(request: CheckRequest) -> CheckOutcome:
    """Collect (or load) the evidence, run the checks, record the run in history when asked,
    then write every output the request selects. Raises NothingSelected for a selection that
    matches no check when `select_must_match` (before any output is written)."""
    from stetho.checking import run as checkrun
    from stetho.history.store import new_run_id

    _validate(request)
    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    run_id = new_run_id()
    bundles = _bundles(request)
    checked = checkrun.run(bundles, evidence=list(request.evidence) or None,
                           profile=request.profile, extra_checks=request.extra_checks,
                           select=request.select, workers=request.workers,
                           metrics=request.metrics, summaries=request.summaries,
                           progress=request.replay_progress,
                           history=request.db, fleet=request.fleet)
    if request.select and request.select_must_match and not checked.items:
        raise NothingSelected(request.select, checkrun.check_names(request.extra_checks))
    results = checked.results
    if request.record and request.db is not None:
        results = _record(request, run_id, list(results), checked.summaries)
    outcome = CheckOutcome(request, results, checked.summaries, bundles, run_id, started,
                           time.monotonic() - clock, checked.items,
                           run_dir=request.outputs.run_dir)
    if request.outputs.any():
        from stetho.check import outputs

        outcome.written = outputs.write(outcome)
    return outcome


def _validate(request: CheckRequest) -> None:
    if request.command not in COMMANDS:
        raise ConfigError(f"unknown check command label {request.command!r}")
    if request.evidence and (request.sim or request.bundles is not None):
        raise ConfigError("--evidence replays saved bundles; it cannot be combined with "
                          "--local or --sim")
    if request.evidence and (request.outputs.evidence_out or request.bench
                             or request.deadline_s):
        raise ConfigError("--evidence-out, --bench and --deadline are for what --local "
                          "collects")
    if request.record and request.db is None:
        raise ConfigError("recording a run needs a history database")


def _bundles(request: CheckRequest) -> list[Bundle] | None:
    """The bundles to check in memory: given, or collected now (None for a replay, whose
    files the checks load themselves: a fleet's bundles never all sit in memory)."""
    if request.bundles is not None:
        return list(request.bundles)
    if request.evidence:
        from stetho.evidence.bundle import require_bundles

        # Only that there are bundles is checked here (exit 3 naming the path); a bundle that
        # cannot be read is its node's error inside the run, the same serial and parallel.
        for e in request.evidence:
            require_bundles(Path(e))
        return None
    from stetho.check.partial import PartialFile
    from stetho.evidence import collect
    from stetho.evidence.runner import Watch

    keep = request.outputs.evidence_out
    # the evidence file holds the evidence so far while probes run: a node killed
    # mid-collection still leaves a bundle to evaluate (unfinished probes timed out)
    partial = PartialFile(keep) if keep is not None else None
    try:
        bundle = collect.collect_local(profile=request.profile, sim=request.sim,
                                       node=request.node, bench=request.bench,
                                       on_partial=partial,
                                       watch=Watch.within(request.deadline_s,
                                                          progress=request.probe_progress))
    finally:
        if partial is not None:
            partial.close()
        if request.collected is not None:
            request.collected()
    return [bundle]


def _record(request: CheckRequest, run_id: str, results: list[Result],
            summaries: dict[str, NodeSummary]) -> list[Result]:
    """The run in history, with the drift results it adds."""
    from stetho.history import recording

    assert request.db is not None
    run_dir = str(request.outputs.run_dir) if request.outputs.run_dir else ""
    return results + recording.after_run(
        request.command, run_id, results, summaries, request.db,
        command=request.command_line, run_dir=run_dir, warn=request.warn,
        max_evidence_age_s=request.max_evidence_age_s)
