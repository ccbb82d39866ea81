"""The one canonical result record. JUnit, the table, JSON and SQLite rows render from it.

One Result per check x subject: a check states its measurement (value, unit, expected,
threshold) apart from its verdict (status, message), with the evidence it judged and a
remediation a person can act on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

STATUSES = ("pass", "warn", "fail", "error", "skip")
#: Worst first: the table and summaries sort by this.
SEVERITY = {"fail": 0, "error": 1, "warn": 2, "skip": 3, "pass": 4}
RESULTS_SCHEMA = "stetho.results"
RESULTS_SCHEMA_VERSION = 1


@dataclass(frozen=True, init=False)
class Result:
    node: str
    check: str
    subject: str
    status: str
    message: str = ""
    value: Any = None
    unit: str | None = None
    expected: Any = None
    threshold: Any = None
    remediation: str | None = None
    evidence: str | None = None
    probe: str | None = None
    duration_s: float = 0.0
    reference: float | None = None  # the numeric baseline/expectation a gate can tighten
    override: dict[str, Any] | None = None  # set when it passes only through an override
    #: The threshold as a number in `unit`, and how the value must compare with it to pass
    #: ("<", "<=", ">", ">=", "=="); `threshold` is the same limit in words.
    limit: float | None = None
    limit_op: str | None = None

    def __init__(self, node: str, check: str, subject: str, status: str, message: str = "",
                 value: Any = None, unit: str | None = None, expected: Any = None,
                 threshold: Any = None, remediation: str | None = None,
                 evidence: str | None = None, probe: str | None = None,
                 duration_s: float = 0.0, reference: float | None = None,
                 override: dict[str, Any] | None = None, limit: float | None = None,
                 limit_op: str | None = None) -> None:
        # The dataclass's own __init__ sets a frozen instance's fields one object.__setattr__
        # at a time (4.7 us a Result, 125 Results a node); one dict in field order is 1.4 us.
        # Same fields, same defaults (tests/test_spool.py holds this signature to the fields).
        object.__setattr__(self, "__dict__", {
            "node": node, "check": check, "subject": subject, "status": status,
            "message": message, "value": value, "unit": unit, "expected": expected,
            "threshold": threshold, "remediation": remediation, "evidence": evidence,
            "probe": probe, "duration_s": duration_s, "reference": reference,
            "override": override, "limit": limit, "limit_op": limit_op})

    @property
    def display_status(self) -> str:
        """'passed-with-override' for a result that passes only through an override."""
        return "passed-with-override" if self.override else self.status

    @property
    def id(self) -> str:
        return f"{self.node}/{self.subject}" if self.subject else self.node

    def to_json(self) -> dict[str, Any]:
        # Not dataclasses.asdict: its deep copy is the hot spot of a thousand-node replay.
        # The instance dict holds exactly the fields, in their order (a frozen dataclass's
        # __init__ sets them so, and nothing else can): copied in C, a million times a replay.
        return self.__dict__.copy()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Result:
        """A result as JSON wrote it; one whose status is not a known one is an error
        (could not evaluate), never a pass: see `known_status`."""
        return known_status(cls(**{k: v for k, v in d.items() if k in _FIELDS}))


_FIELDS = tuple(f.name for f in fields(Result))


def adopt(d: dict[str, Any]) -> Result:
    """The result `d` (a dict just parsed, owned by nobody else) describes, as from_json
    reads it. Where `d` holds exactly the fields in their order (what to_json wrote) it
    becomes the instance's own dict, no copy: a 64-node gate builds 8,000 results from
    history, and the constructor's keyword call was most of that."""
    if tuple(d) != _FIELDS:
        return Result.from_json(d)
    r = _new(Result)
    _set(r, "__dict__", d)
    return known_status(r)


_new = object.__new__
_set = object.__setattr__


_KNOWN = frozenset(STATUSES)


def known_status(r: Result) -> Result:
    """`r`, or where its status is none of STATUSES (a results file or history row written
    elsewhere, edited, or by a newer stetho) an `error` saying so: an unknown status is
    could-not-evaluate, never GO."""
    if isinstance(r.status, str) and r.status in _KNOWN:
        return r
    text = str(r.status)[:40].encode("ascii", "backslashreplace").decode()
    return Result(node=r.node, check=r.check, subject=r.subject, status="error",
                  message=f"unknown status {text!r} (known: {', '.join(STATUSES)}): "
                  "could not evaluate", probe=r.probe,
                  remediation="check it again with this stetho (the recorded result cannot "
                  "be judged)")


@dataclass(frozen=True)
class Limit:
    """A threshold as a number: a value passes while `value op limit` holds (for "==",
    within ±tolerance). Checks build it from the profile, so the number that decides is the
    number that reaches JSON, JUnit and history."""

    value: float
    op: str
    unit: str | None = None
    tolerance: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.op not in LIMIT_OPS:
            raise ValueError(f"limit operator {self.op!r} is not one of {', '.join(LIMIT_OPS)}")

    def holds(self, value: float) -> bool:
        if self.op == "==":
            return abs(value - self.value) <= (self.tolerance or 0.0)
        return {"<": value < self.value, "<=": value <= self.value, ">": value > self.value,
                ">=": value >= self.value}[self.op]

    def describe(self) -> str:
        number = format_value(self.value, self.unit)
        text = (f"{number} ±{format_value(self.tolerance, self.unit)}"
                if self.op == "==" and self.tolerance else f"{self.op} {number}")
        return f"{text} ({self.note})" if self.note else text


LIMIT_OPS = ("<", "<=", ">", ">=", "==")


def exit_code(results: Sequence[Result]) -> int:
    """0 go (warnings allowed), 1 a failing check, 3 could not evaluate (errors)."""
    return exit_code_of(counts(results))


def exit_code_of(c: Mapping[str, int]) -> int:
    """exit_code from the results' counts, for a caller that has them already."""
    if c.get("fail"):
        return 1
    if c.get("error"):
        return 3
    return 0


def counts(results: Sequence[Result]) -> dict[str, int]:
    """Results per status, every status named; one not in STATUSES is a KeyError."""
    kept = getattr(results, "counts", None)  # results spilled to disk count as they arrive
    if callable(kept):
        return dict(kept())
    out = dict.fromkeys(STATUSES, 0)
    # counted in C (a gate counts its 8,000 results twice), then folded in: an unknown status
    # is the same KeyError as it was counted one by one
    for status, n in Counter(map(_status, results)).items():
        out[status] += n
    return out


_status = attrgetter("status")


def ordered(results: list[Result]) -> list[Result]:
    """Failing rows first, then errors, warnings, skips, passes; stable by node and check."""
    return sorted(results, key=lambda r: (SEVERITY[r.status], r.node, r.check, r.subject))


def format_value(value: Any, unit: str | None) -> str:
    """A value or threshold as every renderer shows it (table, JUnit, run page, diagnosis
    report, gate lines, a Limit's words): the one place numbers become text."""
    if value is None:
        return ""
    if isinstance(value, float):
        text = format_number(value)
    elif isinstance(value, (list, tuple)):
        text = ", ".join(str(v) for v in value)
    else:
        text = str(value)
    return f"{text} {unit}" if unit else text


def format_number(x: float) -> str:
    """A float people can read at any magnitude: from 1 up, at most two decimals (1980,
    412.5, 412.53); under 1, three significant digits (0.0312, 0.00024, 4e-05, 1e-07), so a
    BER of 4e-05 never reads as 0. The numeric JSON fields keep the exact value."""
    if x == 0 or x != x or x in (_INF, -_INF):
        return "0" if x == 0 else str(x)
    if abs(x) >= 1:
        return f"{x:.2f}".rstrip("0").rstrip(".")
    return f"{x:.3g}"


_INF = float("inf")
