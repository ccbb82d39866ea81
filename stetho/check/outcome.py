"""What a check run gives back: the results and everything the outputs are written from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.core.record import record
from stetho.errors import ConfigError
from stetho.results import Result, exit_code

if TYPE_CHECKING:
    from stetho.check.request import CheckRequest
    from stetho.checking.nodes import NodeSummary
    from stetho.evidence.bundle import Bundle


class NothingSelected(ConfigError):
    """A `-k` selection that matched no check: a usage error naming the checks there are
    (never "0 fail" and a pass)."""

    def __init__(self, select: str, names: list[str]) -> None:
        super().__init__(f"-k {select!r} matches no check; checks are: " + ", ".join(names))
        self.select = select
        self.names = names


@record(frozen=False)
class CheckOutcome:
    """One finished run: its results (drift included when recorded), each node's summary,
    the bundles it collected or was given (None for a replay of files), its id and times,
    how many check items ran, and the files its outputs went to."""

    request: CheckRequest
    results: Sequence[Result]  # a fleet's replay: on disk (stetho.sinks.spool.Results)
    summaries: dict[str, NodeSummary]
    bundles: list[Bundle] | None
    run_id: str
    started: datetime
    duration_s: float
    items: int
    run_dir: Path | None = None
    written: list[Path] = field(default_factory=list)
    #: outputs that could not be written, each "cannot write X: why" (stetho.check.outputs)
    output_problems: list[str] = field(default_factory=list)

    @property
    def command(self) -> str:
        return self.request.command

    @property
    def exit_code(self) -> int:
        return exit_code(self.results)

    def nodes(self) -> list[str]:
        """The nodes the results are about, in order of first appearance."""
        return list(dict.fromkeys(r.node for r in self.results))
