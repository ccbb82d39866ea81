"""What a diagnosis holds: ranked hypotheses with their evidence chain, and everything the
report shows. Frozen, JSON-ready, produced by stetho.diagnosis.engine and rendered by
stetho.diagnosis.report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from stetho.results import Result


@dataclass(frozen=True)
class Evidence:
    """One signal that supports (or falsifies) a cause."""

    signal: str  # the rule's signal name, e.g. "pcie_aer_corrected_rising"
    description: str  # what was seen, in a sentence
    weight: float
    check: str | None = None
    subject: str | None = None
    value: str | None = None  # measured value, formatted with its unit
    expected: str | None = None  # baseline or expected value
    log_line: str | None = None  # a raw kernel/NCCL log line (rendered as code, inert)
    command: str | None = None  # the command that reproduces the observation


@dataclass(frozen=True)
class Hypothesis:
    cause: str  # rule id, e.g. "riser-pcie-slot"
    title: str  # "Riser card / PCIe slot"
    score: float  # 0..1: supporting weight found over the rule's total weight
    evidence: tuple[Evidence, ...]
    action: str  # the runbook step a technician follows
    ticket: str  # ticket text
    falsified: tuple[str, ...] = ()  # why it was ruled out (empty for live hypotheses)


@dataclass(frozen=True)
class BenchmarkRow:
    metric: str  # "allreduce busbw @ 8 GiB"
    baseline: str
    current: str
    delta_pct: float | None
    status: str  # pass | fail | warn


@dataclass(frozen=True)
class Trend:
    """The key metric over the last 30 days, for the report's SVG chart."""

    metric: str  # "pcie_aer corrected errors", "busbw_gbps allreduce@8GiB"
    unit: str
    points: tuple[tuple[float, float], ...]  # (POSIX time, value), oldest first
    threshold: float | None = None
    baseline: float | None = None


@dataclass(frozen=True)
class Similar:
    id: str
    date: str
    node: str
    cause: str
    link: str  # relative path or URL of the earlier report
    score: float


@dataclass(frozen=True)
class Diagnosis:
    id: str  # rpt-<run time>-<node>-<hex>
    node: str
    run: str
    date: str  # ISO UTC
    profile: str
    verdict: str  # "fail" | "error" | "warn": the node's worst status
    gate: str  # the gate decision in words ("blocked by pre-job: 3 failing checks")
    phenomenon: str  # what was observed, in one or two sentences
    failing: tuple[Result, ...]
    hypotheses: tuple[Hypothesis, ...]  # best first (top 3)
    falsified: tuple[Hypothesis, ...]  # considered and ruled out, with why
    benchmarks: tuple[BenchmarkRow, ...] = ()
    logs: tuple[str, ...] = ()  # raw log lines (quoted as code, never live Markdown/HTML)
    reproduce: tuple[str, ...] = ()  # commands
    prevention: tuple[str, ...] = ()
    trend: Trend | None = None
    similar: tuple[Similar, ...] = ()
    status: str = "open"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def top(self) -> Hypothesis | None:
        return self.hypotheses[0] if self.hypotheses else None

    @property
    def cause(self) -> str:
        return self.top.cause if self.top else "undiagnosed"

    @property
    def signature(self) -> tuple[str, ...]:
        """Sorted evidence keys: what makes two incidents look alike."""
        keys = {r.check for r in self.failing}
        if self.top:
            keys |= {e.signal for e in self.top.evidence}
        return tuple(sorted(keys))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["failing"] = [r.to_json() for r in self.failing]
        d["cause"] = self.cause
        d["signature"] = list(self.signature)
        return d
