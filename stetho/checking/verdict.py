"""How a check states its measurement and its verdict, apart.

Checks get a `verdict` fixture. They record what they measured (`measure`), what they judged
it on (`cite`), then pass by returning, or call `warn`, `fail` or `error`. A plain `assert` in
a site's own check fails too; any other exception is an `error`, never a pass.
"""

from __future__ import annotations

from typing import NoReturn

from stetho.results import Limit


class CheckFailed(AssertionError):
    """The node is measurably wrong: status `fail`."""


class CheckError(Exception):
    """The check could not decide: status `error`."""


class Verdict:
    def __init__(self) -> None:
        self.status = "pass"
        self.message = ""
        self.value: object = None
        self.unit: str | None = None
        self.expected: object = None
        self.threshold: object = None
        self.remediation: str | None = None
        self.evidence: str | None = None
        self.probe: str | None = None
        self.reference: float | None = None
        self.limit: Limit | None = None

    def measure(self, value: object, unit: str | None = None, *, expected: object = None,
                threshold: Limit | str | None = None, reference: float | None = None) -> None:
        """`threshold` is a Limit (a number, with how the value must compare) wherever the
        check decides by one, else words; `reference` is the numeric expectation (a
        baseline) when there is one, so a gate policy can tighten the check's own threshold."""
        self.value, self.unit, self.expected = value, unit, expected
        if isinstance(threshold, Limit):
            self.limit, self.threshold = threshold, threshold.describe()
        else:
            self.limit, self.threshold = None, threshold
        self.reference = reference

    def cite(self, excerpt: str, probe: str) -> None:
        """The evidence judged, as a short excerpt, and the probe that produced it."""
        self.evidence = excerpt if len(excerpt) <= 2000 else excerpt[:1997] + "..."
        self.probe = probe

    def ok(self, message: str) -> None:
        self.message = message

    def warn(self, message: str, remediation: str | None = None) -> None:
        """Record a warning and carry on; a later `fail` still wins."""
        self.status = "warn"
        self.message = message
        if remediation:
            self.remediation = remediation

    def fail(self, message: str, remediation: str | None = None) -> NoReturn:
        self.status = "fail"
        self.message = message
        if remediation:
            self.remediation = remediation
        raise CheckFailed(message)

    def error(self, message: str, remediation: str | None = None) -> NoReturn:
        self.status = "error"
        self.message = message
        if remediation:
            self.remediation = remediation
        raise CheckError(message)
