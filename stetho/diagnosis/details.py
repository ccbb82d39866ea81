"""The parts of a diagnosis below its first screen: benchmark rows, log lines, the reproduce
commands of the top hypotheses, and the trend of the implicated part's key metric."""

from __future__ import annotations

from statistics import median
from typing import Any

from stetho.diagnosis import projection
from stetho.diagnosis.context import NodeContext
from stetho.diagnosis.model import BenchmarkRow, Hypothesis, Trend
from stetho.diagnosis.rules import Rule
from stetho.results import Result

DAYS = 30


def benchmarks(results: list[Result]) -> list[BenchmarkRow]:
    rows = []
    for r in results:
        if r.check == "nccl_busbw" and isinstance(r.value, (int, float)) and r.reference:
            delta = (r.value - r.reference) / r.reference * 100
            rows.append((r.reference, BenchmarkRow(
                f"allreduce busbw {r.subject.split('@')[-1]}", f"{r.reference:g} GB/s",
                f"{r.value:g} GB/s", round(delta, 1), r.status)))
    return [row for _, row in sorted(rows, key=lambda x: x[0])]


def logs(ctx: NodeContext, top: list[Hypothesis]) -> list[str]:
    lines: list[str] = []
    for h in top:
        for e in h.evidence:
            if e.log_line and e.log_line not in lines:
                lines.append(e.log_line)
    for r in ctx.results:
        if r.status in ("fail", "warn") and r.probe == "kernel_log" and r.evidence:
            for ln in r.evidence.splitlines():
                if ln not in lines:
                    lines.append(ln)
    return lines[:40]


def reproduce(top: list[Hypothesis], also: list[Hypothesis]) -> list[str]:
    """Commands for the top three hypotheses (then the other findings), each aimed at the part
    its evidence names, in ranking order, without repeats."""
    cmds: list[str] = []
    for h in [*top, *also][:3]:
        for c in h.reproduce:
            if c not in cmds:
                cmds.append(c)
    return cmds


def _size(subject: str) -> int:
    tail = subject.split("@")[-1]
    for unit, mult in (("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30)):
        if tail.endswith(unit) and tail[:-3].isdigit():
            return int(tail[:-3]) * mult
    return int(tail) if tail.isdigit() else 0


def _subject_match(subject: str, wanted: list[str]) -> bool:
    return any(w and (subject == w or subject.replace(":", "/") == w.replace(":", "/"))
               for w in wanted)


def trend(ctx: NodeContext, rule: Rule | None, top: Hypothesis | None, now: float
          ) -> Trend | None:
    """The implicated subject's key metric over the last 30 days, with the threshold its
    check judged it against and a baseline (the profile's, else the node's own median)."""
    if ctx.history is None:
        return None
    key = chart_metric(rule, top)
    if key is None:
        return None
    check, metric = key
    series = ctx.history.series_of(ctx.node, check, metric)
    if not series:
        return None
    wanted = [e.subject or "" for e in top.evidence] if top else []
    wanted += [f"gpu{v}" for e in (top.evidence if top else ()) for k, v in e.where
               if k == "gpu"]
    picked = [s for s in series if _subject_match(s[2], wanted)]
    if not picked and check == "nccl":  # the largest message size
        picked = sorted(series, key=lambda s: _size(s[2]))[-1:]
    sid, _, subject, _, unit = (picked or series)[0]
    points = ctx.history.samples(ctx.node, [sid], since=now - DAYS * 86400,
                                 until=now + 86400).get(sid, [])
    if not points:
        return None
    threshold, baseline = _limits(ctx.results, top, subject)
    if baseline is None:
        past = [p.value for p in points if p.run != ctx.run]
        baseline = median(past) if past else None
    pts = tuple((float(p.time), p.value) for p in points)
    ahead = projection.for_trend(check, metric, list(pts), str(ctx.summary.get("profile", "")),
                                 threshold, unit or "", subject) \
        if top is not None and top.disposition == "watch" else ""
    return Trend(metric=f"{metric} {subject}".strip(), unit=unit, points=pts,
                 threshold=threshold, baseline=baseline, projection=ahead)


#: The metric a signal is about, for the chart of a rule that names none: (check, metric)
#: as history keeps it (stetho.facts.metrics).
SIGNAL_METRIC = {
    "ib_rate_low": ("ib", "rate_gbps"), "ib_port_down": ("ib", "rate_gbps"),
    "ib_symbol_errors": ("ib", "SymbolErrorCounter"), "ber_high": ("ib", "pre_fec_ber"),
    "ber_rising": ("ib", "pre_fec_ber"), "ber_trend": ("ib", "pre_fec_ber"),
    "nvlink_errors": ("gpu_nvlink", "nvlink_replay"), "aer_corrected": ("kernel", "aer_corrected"),
    "sbe_rising": ("gpu", "ecc_correctable"),
}


def chart_metric(rule: Rule | None, top: Hypothesis | None) -> tuple[str, str] | None:
    """What the chart plots: the rule's own trend metric, else the metric of the leading
    evidence (an IB fault charts the port's rate, BER or symbol errors), else busbw only when
    busbw is the cause's evidence; None: the cause has no metric to chart."""
    if rule is not None and rule.trend:
        return rule.trend
    signals = [e.signal for e in top.evidence] if top else []
    for s in sorted(signals, key=lambda s: rule is None or s not in rule.requires_any):
        if s in SIGNAL_METRIC:
            return SIGNAL_METRIC[s]
    if any(s.startswith("busbw") for s in signals) or top is None:
        return ("nccl", "busbw_gbps")
    return None


def _limits(results: list[Result], top: Hypothesis | None, subject: str
            ) -> tuple[float | None, float | None]:
    checks = {e.check for e in top.evidence} if top else set()
    for r in results:  # busbw: history names the size in bytes, the check in GiB
        if r.check in checks and (_subject_match(r.subject, [subject]) or (
                r.check == "nccl_busbw" and 0 < _size(r.subject) == _size(subject))):
            return _num(r.limit), _num(r.reference)
    return None, None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
