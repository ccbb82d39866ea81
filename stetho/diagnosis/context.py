"""What the signals read: one node's results, facts, summary and history at diagnosis time,
and the helpers that turn a check's subject into the part it names (GPU index, PCI address,
serial, HCA and port, disk), so rule text and commands can target that part."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from stetho.checking.nodes import NodeSummary
from stetho.diagnosis.model import Evidence
from stetho.results import Result, format_value

_GPU_SUBJECT = re.compile(r"(?i)^gpu(\d+)$")
_IB_SUBJECT = re.compile(r"^(mlx\d+_\d+|[a-z]+\d*_\d+)[:/](\d+)$")


@dataclass
class NodeContext:
    """Everything known about one node at diagnosis time. `run` is the run being diagnosed:
    history trends read only the runs before it, never the run itself."""

    node: str
    results: list[Result]
    facts: Any = None  # NodeFacts when the evidence bundle is at hand
    history: Any = None  # stetho.history.store.History, when there is one
    summary: NodeSummary | dict[str, Any] = field(default_factory=dict)
    fleet: list[NodeSummary] = field(default_factory=list)  # peers' summaries
    run: str = ""
    #: how many of the node's earlier runs `past` reads (None: all its history): a trend
    #: that compares the last few runs need not read and verify a year of them
    past_runs: int | None = None
    #: (run, (check, metric) -> subject -> values before that run), read on the first `past`
    _past: tuple[str, dict[tuple[str, str], dict[str, list[float]]]] | None = field(
        default=None, init=False, repr=False, compare=False)

    def results_of(self, check: str, statuses: tuple[str, ...] = ("fail", "warn", "error")
                   ) -> list[Result]:
        return [r for r in self.results if r.check == check and r.status in statuses]

    def metric(self, check: str, metric: str) -> list[tuple[str, float]]:
        return [(str(s), float(v)) for c, s, m, v, _ in self.summary.get("metrics", [])
                if c == check and m == metric]

    def past(self, check: str, metric: str) -> dict[str, list[float]]:
        """This node's values of a metric per subject in the runs before this one, oldest
        first (empty without history)."""
        if self.history is None:
            return {}
        if self._past is None or self._past[0] != self.run:
            self._past = (self.run, self._all_past())
        return {subject: list(values)
                for subject, values in self._past[1].get((check, metric), {}).items()}

    def _all_past(self) -> dict[tuple[str, str], dict[str, list[float]]]:
        """Every metric of this node before this run, read and verified once: the signals
        ask for a dozen metrics a node, and each read verified the node's whole signed
        window again (most of a failing node's diagnosis)."""
        series = self.history.series_of(self.node)
        if not series:
            return {}
        # up to the newest earlier run's readings (this run's own are not its past), from
        # the last `past_runs` runs' or the first
        window = self.history.recent_window(self.node, self.past_runs or 1, self.run)
        if window is None:  # no run but this one recorded any reading
            return {}
        since = window[0] if self.past_runs is not None else 0
        got = self.history.samples(self.node, [s[0] for s in series], since=since,
                                   until=window[1])
        out: dict[tuple[str, str], dict[str, list[float]]] = {}
        for sid, check, subject, metric, _unit in series:
            pts = got.get(sid)
            if pts:
                out.setdefault((check, metric), {})[subject] = [
                    p.value for p in pts if p.run != self.run]
        return out


def facts_of(ctx: NodeContext, name: str) -> Any:
    if ctx.facts is None:
        return None
    from stetho.facts.node import Unavailable

    try:
        return getattr(ctx.facts, name)()
    except Unavailable:
        return None


def short_pci(address: str) -> str:
    """'00000000:9B:00.0' or '0000:9b:00' -> '0000:9b:00' (domain:bus:device, lower case)."""
    a = address.strip().lower()
    m = re.search(r"([0-9a-f]{4,8}):([0-9a-f]{2}):([0-9a-f]{2})", a)
    if not m:
        return a
    return f"{m.group(1)[-4:]}:{m.group(2)}:{m.group(3)}"


def gpu_where(ctx: NodeContext, index: int | None = None, pci: str | None = None
              ) -> tuple[tuple[str, str], ...]:
    """The GPU named by index or PCI address, as (key, value) pairs: gpu, pci, serial."""
    gpus = facts_of(ctx, "gpus") or ()
    for g in gpus:
        if (index is not None and g.index == index) or (
                pci is not None and short_pci(g.pci_bus_id) == short_pci(pci)):
            out = [("gpu", str(g.index)), ("pci", short_pci(g.pci_bus_id) + ".0")]
            if g.serial:
                out.append(("serial", g.serial))
            return tuple(out)
    if index is not None:
        return (("gpu", str(index)),)
    if pci is not None:
        full = pci.strip().lower()
        return (("pci", full if "." in full else full + ".0"),)
    return ()


def subject_where(ctx: NodeContext, r: Result) -> tuple[tuple[str, str], ...]:
    """What a result's subject names: a GPU, an IB port, a disk, a PCI device."""
    subject = r.subject or ""
    m = _GPU_SUBJECT.match(subject)
    if m:
        return gpu_where(ctx, index=int(m.group(1)))
    m = _IB_SUBJECT.match(subject)
    if m:
        return (("device", m.group(1)), ("port", m.group(2)))
    if re.fullmatch(r"nvme\d+n\d+|sd[a-z]+", subject):
        return (("disk", subject),)
    if re.fullmatch(r"(?i)[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}(\.\d)?", subject):
        return gpu_where(ctx, pci=subject)
    return ()


def fmt(value: Any, unit: str | None = None) -> str:
    """A measured value as every renderer shows it (stetho.results.format_value: a BER of
    4e-06 is not '0'); the unit once, where the value is words that already end in it."""
    text = format_value(value, None)
    return f"{text} {unit}" if unit and text and not text.endswith(unit) else text


def expected_text(r: Result) -> str | None:
    """What the result expected, without repeating the value's unit twice."""
    if r.expected is None:
        return None if r.threshold is None else str(r.threshold)
    if isinstance(r.expected, float):
        return fmt(r.expected, r.unit)
    return str(r.expected)


def quantity_of(metric: str) -> str:
    """What a history metric's value is (model.QUANTITIES), from its declared kind in
    stetho.facts.kinds: a counter is a counter, a gauge a gauge, anything else a state."""
    from stetho.facts import kinds

    k = kinds.resolve(metric)
    return k.kind if k is not None and k.kind in ("counter", "gauge") else "state"


def from_results(ctx: NodeContext, rows: list[Result], signal: str, command: str | None = None,
                 *, weight: float = 1.0, commands: Any = None, quantity: str = "state"
                 ) -> list[Evidence]:
    """One Evidence per result; `commands(where)` builds a command that targets the part the
    result names (else the fixed `command`). `quantity` is what the results' values are
    (model.QUANTITIES): the signal declares it."""
    out = []
    for r in rows:
        where = subject_where(ctx, r)
        cmd = commands(dict(where)) if commands is not None else command
        out.append(Evidence(
            signal=signal, description=r.message, weight=weight, check=r.check,
            subject=r.subject or None, value=fmt(r.value, r.unit) or None,
            expected=expected_text(r),
            log_line=_last_line(r.evidence) if r.probe == "kernel_log" else None,
            command=cmd, status="warn" if r.status == "warn" else "fail", where=where,
            quantity=quantity))
    return out


def _last_line(text: str | None) -> str | None:
    return text.splitlines()[-1] if text else None
