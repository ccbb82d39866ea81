"""What a check run is asked to do, as one value: what to collect or replay, how to judge it,
where its history is, and which outputs to write. Every command that checks (check, replay,
bench, gate --local, the sweep's own evaluation, baseline screening) builds one of these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.core.record import record

if TYPE_CHECKING:
    from stetho.evidence.bench_run import BenchRequest
    from stetho.evidence.bundle import Bundle
    from stetho.evidence.runner import ProbeEvent

#: The command labels: the textfile's `command` label, history's run kind, the file name.
COMMANDS = ("check", "replay", "bench", "gate", "sweep", "baseline")


@record
class Outputs:
    """The sinks a run writes when it ends (stetho.check.outputs), each None when not wanted."""

    junit: str | None = None  # JUnit XML ('-': stdout)
    json: str | None = None  # the results JSON ('-': stdout)
    evidence_out: Path | None = None  # the collected bundle (kept current while collecting)
    textfile_dir: Path | None = None  # node_exporter textfile folder: stetho-<command>.prom
    run_dir: Path | None = None  # a run folder: results, JUnit, summaries, index.html
    outcome: str | None = None  # the sweep's machine outcome ('-': stdout)
    spool: SpoolTarget | None = None  # the node's outcome into the result spool

    def any(self) -> bool:
        return any(v is not None for v in (self.junit, self.json, self.evidence_out,
                                           self.textfile_dir, self.run_dir, self.outcome,
                                           self.spool))


@record
class SpoolTarget:
    """Where and as what a node's outcome goes into the spool (stetho.spool.write): the run
    id (None: the check's own), the kind of run, the node's key (None: unsigned)."""

    folder: Path
    run_id: str | None = None
    kind: str = "check"
    key: bytes | None = None


@record
class CheckRequest:
    """One check run. Exactly one source: `bundles` (already in memory), `evidence` (bundle
    files or folders: a replay), else collection on this node or the simulated `sim` folder.
    `db` is the history the counters' windows are read from; the run is recorded there only
    with `record`. Progress callbacks come from the caller (the CLI owns the terminal)."""

    command: str = "check"
    sim: str | None = None
    evidence: tuple[str, ...] = ()
    bundles: tuple[Bundle, ...] | None = None
    node: str | None = None
    profile: str | None = None
    bench: BenchRequest | None = None
    deadline_s: float | None = None
    select: str | None = None  # pytest -k
    #: a selection that matches no check is the caller's usage error (NothingSelected)
    select_must_match: bool = False
    extra_checks: tuple[str, ...] = ()
    workers: int | str | None = None
    fleet: bool = True  # the fleet checks over the nodes of the run (several nodes only)
    metrics: bool = True  # keep the metrics in the summaries (what history records)
    #: the nodes' summaries at all (versions, busbw, metrics): a re-judgement of some checks
    #: whose caller keeps the nodes' own summaries needs none (each parses the whole node)
    summaries: bool = True
    db: Path | None = None
    record: bool = False
    max_evidence_age_s: float | None = None  # older evidence is not recorded (its verdict stands)
    command_line: str = ""  # what history keeps as the command
    outputs: Outputs = field(default_factory=Outputs)
    probe_progress: Callable[[ProbeEvent], None] | None = None
    collected: Callable[[], None] | None = None  # collection ended (a probe display stops)
    replay_progress: Callable[[int, int], None] | None = None
    warn: Callable[[str], None] | None = None  # history's warnings (None: on stderr)

    @property
    def replay(self) -> bool:
        return bool(self.evidence)

    @property
    def collects(self) -> bool:
        """Whether the run collects evidence itself (this node or a simulated one)."""
        return not self.evidence and self.bundles is None
