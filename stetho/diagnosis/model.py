"""What a diagnosis holds: ranked hypotheses with their evidence chain, and everything the
report shows. Frozen, JSON-ready, produced by stetho.diagnosis.engine and rendered by
stetho.diagnosis.report."""

from __future__ import annotations

import hashlib
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
    status: str = "fail"  # "fail": a failing check or hard log event; "warn": a trend, a warning
    #: what the observation points at, for filling rule text: (key, value) pairs such as
    #: ("gpu", "4"), ("pci", "0000:9b:00.0"), ("device", "mlx5_4"), ("port", "1")
    where: tuple[tuple[str, str], ...] = ()
    #: what `value` is (QUANTITIES), declared by the signal that measured it: it decides
    #: whether the value is part of the incident's identity (`Diagnosis.event`)
    quantity: str = "state"


#: What an evidence value is. "counter": a cumulative count (ECC, remapped rows, AER, IB symbol
#: or link-down counts): a count that grew is a new event. "gauge": a continuous measurement
#: (busbw, temperature, BER, clocks, pressure) that jitters run to run: the same fault measured
#: again is the same event whatever the reading. "state": a discrete reading (a port's state
#: and rate, an Xid code, a transport, a version): a different one is a new event.
QUANTITIES = ("counter", "gauge", "state")


#: Severity bands, lowest first. A hypothesis' score is its band's index plus the share of
#: its rule's evidence weight found, over the number of bands: every critical cause outranks
#: every high one, and within a band more evidence ranks higher. Scores compare across rules.
SEVERITIES = ("low", "medium", "high", "critical")
KINDS = ("hardware", "degradation", "configuration", "software")


@dataclass(frozen=True)
class Hypothesis:
    cause: str  # rule id, e.g. "riser-pcie-slot"
    title: str  # "Riser card / PCIe slot"
    score: float  # 0..1: (severity band + coverage) / len(SEVERITIES), see SEVERITIES
    evidence: tuple[Evidence, ...]
    action: str  # the runbook step a technician follows, filled from the facts
    ticket: str  # ticket text, filled from the facts
    falsified: tuple[str, ...] = ()  # why it was ruled out (empty for live hypotheses)
    severity: str = "medium"
    kind: str = "hardware"
    coverage: float = 0.0  # share of the rule's evidence weight seen, 0..1
    disposition: str = "drain"  # "drain": act now; "watch": warn-level, act before it fails
    summary: str = ""  # the cause in one sentence, naming the part
    steps: tuple[str, ...] = ()  # the actions, in order, filled from the facts
    reproduce: tuple[str, ...] = ()  # commands that target the implicated part
    ruled_out_by: tuple[Evidence, ...] = ()  # the evidence that falsified it
    decisive: tuple[str, ...] = ()  # the decisive signals seen (the rule marks them)
    #: why it is not a live hypothesis: "evidence" (a falsifier measured it healthy),
    #: "unsupported" (its defining signals were not seen, or were not measured), "ranked"
    #: (live, ranked below the top ones); empty for live hypotheses
    basis: str = ""

    @property
    def confidence(self) -> str:
        """High when a decisive signal was seen (a port at half its rate is conclusive on
        its own); else how much of the rule's evidence was seen, in a word."""
        if self.decisive or self.coverage >= 0.75:
            return "high"
        return "medium" if self.coverage >= 0.4 else "low"


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
    #: where the trend is heading against its limit, in a sentence: "crosses ... in about 3
    #: runs (around 2025-12-04)" (stetho.diagnosis.projection); empty when not projected
    projection: str = ""


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
    also_found: tuple[Hypothesis, ...] = ()  # independent causes on the same node
    benchmarks: tuple[BenchmarkRow, ...] = ()
    logs: tuple[str, ...] = ()  # raw log lines (quoted as code, never live Markdown/HTML)
    reproduce: tuple[str, ...] = ()  # commands
    prevention: tuple[str, ...] = ()
    trend: Trend | None = None
    similar: tuple[Similar, ...] = ()
    status: str = "open"
    repeats: tuple[Similar, ...] = ()  # earlier reports of the same node and cause
    replace_hardware: bool = False  # repeats reached the limit: replace, do not reset again
    notes: tuple[str, ...] = ()  # what the diagnosis could not see (no evidence bundle, ...)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def disposition(self) -> str:
        """'drain' when the leading cause or a failing check says act now, else 'watch'."""
        if self.top is not None:
            return self.top.disposition
        return "drain" if self.verdict in ("fail", "error") else "watch"

    @property
    def ruled_out(self) -> tuple[Hypothesis, ...]:
        """Causes a measurement showed healthy (a falsifier seen), with that measurement."""
        return tuple(h for h in self.falsified if h.basis == "evidence")

    @property
    def unsupported(self) -> tuple[Hypothesis, ...]:
        """Causes looked for and not seen, or not measurable here: not ruled out (nor is a
        cause set aside without saying on what basis)."""
        return tuple(h for h in self.falsified if h.basis in ("unsupported", ""))

    @property
    def ranked_below(self) -> tuple[Hypothesis, ...]:
        return tuple(h for h in self.falsified if h.basis == "ranked")

    @property
    def top(self) -> Hypothesis | None:
        return self.hypotheses[0] if self.hypotheses else None

    @property
    def cause(self) -> str:
        return self.top.cause if self.top else "undiagnosed"

    @property
    def event(self) -> str:
        """What makes an incident the same event as an earlier report of it: the leading
        cause's evidence by its identity (signal, part, log line) and, for a counter or a
        state, its value, hashed. Four nightly reports of one stale DBE share it; a counter
        that grew or a new Xid line does not; a gauge's reading (busbw 301.2 or 299.8 GB/s,
        a temperature) is left out, so its jitter never makes a new event."""
        if self.top is None:
            return ""
        parts = sorted({"\0".join((e.signal, e.subject or "",
                                   "" if e.quantity == "gauge" else e.value or "",
                                   e.log_line or ""))
                        for e in self.top.evidence})
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]

    @property
    def implicated(self) -> tuple[str, ...]:
        """The parts the leading cause's evidence names, sorted: a GPU by its serial (else its
        index), an HCA port, else the subject. A repeat that escalates must be the same part
        (a pending remap back on the GPU that was reset, not on another one)."""
        if self.top is None:
            return ()
        out = set()
        for e in self.top.evidence:
            w = dict(e.where)
            if "serial" in w:
                out.add(f"serial:{w['serial']}")
            elif "gpu" in w:
                out.add(f"gpu{w['gpu']}")
            elif "device" in w:
                out.add(f"{w['device']}:{w.get('port', '1')}")
            elif e.subject:
                out.add(e.subject)
        return tuple(sorted(out))

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
        d["event"] = self.event
        return d
