"""What became of one planned step: the outcome word the history keeps (done, failed,
refused, planned, skipped), a sentence saying why, and the command that ran or would run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stetho.remedy.plan import Step


@dataclass(frozen=True)
class Outcome:
    step: Step
    outcome: str  # stetho.history.remedies.OUTCOMES
    detail: str
    argv: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**self.step.to_json(), "outcome": self.outcome, "detail": self.detail,
                "argv": list(self.argv)}
