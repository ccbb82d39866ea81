"""The diagnosis engine: signals in, ranked hypotheses with their evidence chain out.

A rule is *touched* when any of its supporting signals is seen. Every touched rule's falsifiers
are evaluated: one that holds moves the rule to the ruled-out list with the evidence that ruled
it out (the evidence the rule cited stays with it, and with every other rule citing it). A
touched rule that is not falsified is a candidate when one of its required signals is seen;
otherwise it is listed as unsupported. Candidates rank by score (see model.SEVERITIES):
severity first, then the share of the rule's evidence weight seen; so a GPU off the bus
outranks a CPU governor however complete the governor's evidence is.

Candidates whose defining evidence (their required signals) is not cited by a higher-ranked
finding are independent findings ("also found"); the others are alternative explanations of
the leading finding. A healthy node touches no rule: no hypothesis, nothing ruled out.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from stetho.diagnosis import rules as rules_mod
from stetho.diagnosis.model import SEVERITIES, Diagnosis, Evidence, Hypothesis
from stetho.diagnosis.rules import Rule, fill, fill_command, load_all
from stetho.diagnosis.signals import SIGNALS, NodeContext
from stetho.history.reference import bearing

TOP = 3


def _key(e: Evidence) -> tuple[str, str, str]:
    return (e.signal, e.check or "", e.subject or e.log_line or "")


def _where(evidence: list[Evidence], ctx: NodeContext) -> dict[str, str]:
    """The part the leading evidence points at: the first value of each key, from the rule's
    evidence in order."""
    out: dict[str, str] = {"node": ctx.node}
    for e in evidence:
        for k, v in e.where:
            out.setdefault(k, v)
        if e.subject:
            out.setdefault("subject", e.subject)
        if e.value:
            out.setdefault("value", e.value)
        if e.expected:
            out.setdefault("expected", e.expected)
    if "pci" in out and "slot" not in out:
        gpu = f"of GPU {out['gpu']} " if "gpu" in out else ""
        out["slot"] = f"the slot {gpu}at {out['pci']}"
    return out


def _absent(f: rules_mod.Falsifier) -> Evidence:
    return Evidence(f.signal, f"not seen: {f.signal.replace('_', ' ')}", 0.0, status="pass")


def _unsupported(rule: Rule, ctx: NodeContext) -> str:
    """What was looked at for a rule none of whose defining signals was seen, and what could
    not be seen at all: absence of evidence, never evidence of health."""
    from stetho.diagnosis import trends

    need = ", ".join(s.replace("_", " ") for s in rule.requires_any)
    blind = []
    if ctx.facts is None:
        blind.append("no evidence bundle, so nothing read from the kernel log, NCCL log, "
                     "nvidia-smi, PSI or sysfs")
    if ctx.history is None and {f.__name__ for f in trends.SIGNALS} & set(rule.requires_any):
        blind.append("no history, so no trend against earlier runs")
    return (f"not supported: looked for {need}; none seen"
            + (f"; not measured: {'; '.join(blind)}" if blind else ""))


def _build(rule: Rule, ctx: NodeContext, evidence: list[Evidence], got: float) -> Hypothesis:
    coverage = round(got / rule.total_weight, 3)
    where = _where(sorted(evidence, key=lambda e: e.signal not in rule.requires_any), ctx)
    steps = tuple(fill(s, where) for s in rule.steps) or (fill(rule.action, where),)
    watch = not any(e.status == "fail" for e in evidence)
    if watch:  # warn-level: it still works; act at the next window, do not drain now
        steps = (f"Keep {ctx.node} in service and watch it: the steps below belong in its next "
                 "maintenance window.", *(s for s in steps if not s.startswith("Drain")))
    cmds: list[str] = []
    for e in evidence:
        if e.command and e.command not in cmds:
            cmds.append(e.command)
    for c in rule.reproduce_extra:
        filled = fill_command(c, where)
        if filled and filled not in cmds:
            cmds.append(filled)
    return Hypothesis(
        cause=rule.cause, title=rule.title,
        score=round((rule.band + coverage) / len(SEVERITIES), 3), evidence=tuple(evidence),
        action=fill(rule.action, where), ticket=fill(rule.ticket, where),
        severity=rule.severity, kind=rule.kind, coverage=coverage,
        disposition="watch" if watch else "drain",
        summary=fill(rule.summary, where) if rule.summary else rule.title,
        steps=steps, reproduce=tuple(cmds),
        decisive=tuple(s.signal for s in rule.supports if s.decisive and any(
            e.signal == s.signal and e.status == "fail" for e in evidence)))


def escalated(h: Hypothesis, rule: Rule, node: str) -> Hypothesis:
    """A watch cause back as a new event too often (the rule's `escalate`): drain it and
    replace the part, with the rule's escalation steps filled from the same evidence."""
    where = _where(sorted(h.evidence, key=lambda e: e.signal not in rule.requires_any),
                   NodeContext(node, []))
    return replace(h, disposition="drain",
                   steps=tuple(fill(s, where) for s in rule.escalate_steps) or h.steps)


def candidates(ctx: NodeContext, rules: list[Rule] | None = None
               ) -> tuple[list[Hypothesis], list[Hypothesis]]:
    """(every live candidate, best first; every touched rule ruled out or unsupported)."""
    rules = rules if rules is not None else load_all()
    cache: dict[str, list[Evidence]] = {}

    def seen(signal: str) -> list[Evidence]:
        if signal not in cache:
            cache[signal] = SIGNALS[signal](ctx)
        return cache[signal]

    ranked, ruled_out = [], []
    for rule in rules:
        if not any(seen(s.signal) for s in rule.supports):
            continue
        evidence = [replace(e, weight=s.weight) for s in rule.supports for e in seen(s.signal)]
        got = sum(s.weight for s in rule.supports if seen(s.signal))
        h = _build(rule, ctx, evidence, got)
        held = [(f, seen(f.signal)) for f in rule.falsified_by
                if bool(seen(f.signal)) == (f.when == "present")]
        measured = [(f, ev) for f, ev in held if f.when == "present"]
        if measured:  # a falsifier seen: measured healthy, ruled out by evidence
            ruled_out.append(replace(h, falsified=tuple(f.why for f, _ in measured),
                                     ruled_out_by=tuple(ev[0] for _, ev in measured),
                                     basis="evidence"))
        elif held:  # only a signal's absence speaks against it: not evidence of health
            ruled_out.append(replace(h, falsified=tuple(
                f"not supported: {f.why}" for f, _ in held), ruled_out_by=tuple(
                    _absent(f) for f, _ in held), basis="unsupported"))
        elif not any(seen(s) for s in rule.requires_any):
            ruled_out.append(replace(h, falsified=(_unsupported(rule, ctx),),
                                     basis="unsupported"))
        else:
            ranked.append(h)
    order = {r.cause: i for i, r in enumerate(rules)}
    ranked.sort(key=lambda h: (-h.score, -len(h.evidence), order[h.cause]))
    return ranked, ruled_out


def hypotheses(ctx: NodeContext, rules: list[Rule] | None = None
               ) -> tuple[list[Hypothesis], list[Hypothesis]]:
    """(the top hypotheses, best first; the ruled-out ones and those ranked below)."""
    ranked, ruled_out = candidates(ctx, rules)
    return ranked[:TOP], ruled_out + [replace(h, falsified=(
        f"ranked below the top {TOP} (score {h.score:g})",), basis="ranked")
        for h in ranked[TOP:]]


def split_findings(ranked: list[Hypothesis], rules: list[Rule]
                   ) -> tuple[list[Hypothesis], list[Hypothesis]]:
    """(independent findings, best first; alternative explanations of the leading one)."""
    required = {r.cause: set(r.requires_any) for r in rules}
    findings: list[Hypothesis] = []
    alternatives: list[Hypothesis] = []
    for h in ranked:
        defining = {_key(e) for e in h.evidence if e.signal in required.get(h.cause, set())}
        cited = {_key(e) for f in findings for e in f.evidence}
        if findings and defining & cited:
            if any(defining & {_key(e) for e in f.evidence} for f in findings[:1]):
                alternatives.append(h)
            continue  # an alternative of a later finding: listed with the ruled-out ones
        findings.append(h)
    return findings, alternatives


def report_id(run: str, node: str, cause: str, stamp: datetime) -> str:
    """The same run, node and cause give the same id: reporting twice writes one report."""
    digest = hashlib.sha256(f"{run}\0{node}\0{cause}".encode()).hexdigest()[:6]
    return f"rpt-{stamp.strftime('%Y%m%dT%H%M%SZ')}-{node}-{digest}"


def run_time(run: str, fallback: float) -> float:
    """A run's start time from its id (`YYYYmmddTHHMMSSZ-...`), else `fallback`."""
    m = re.search(r"(\d{8}T\d{6}Z)", run)
    if m:
        return datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(
            tzinfo=timezone.utc).timestamp()
    return fallback


def diagnose(ctx: NodeContext, *, run: str, gate: str = "", profile: str = "",
             rules: list[Rule] | None = None, now: float | None = None,
             notes: tuple[str, ...] = ()) -> Diagnosis:
    from stetho.diagnosis import details

    rules = rules if rules is not None else load_all()
    now = run_time(run, now if now is not None else time.time())
    ctx.run = ctx.run or run
    ranked, ruled_out = candidates(ctx, rules)
    findings, alternatives = split_findings(ranked, rules)
    shown = (findings[:1] + alternatives)[:TOP]
    below = [h for h in ranked if h not in shown and h not in findings[1:]]
    falsified = ruled_out + [replace(h, falsified=(
        f"ranked below the top {TOP} (score {h.score:g})",), basis="ranked") for h in below]
    failing = tuple(sorted((r for r in ctx.results if r.status in ("fail", "error", "warn")),
                           key=lambda r: ({"fail": 0, "error": 1, "warn": 2}[r.status], r.check,
                                          r.subject)))
    cited = {(e.check or "", e.subject or "") for h in (*shown, *findings[1:])
             for e in h.evidence}
    listed, unlisted = bearing(failing, cited, bool(shown))
    verdict = "fail" if any(r.status == "fail" for r in failing) else (
        "error" if any(r.status == "error" for r in failing) else "warn")
    by_cause = {r.cause: r for r in rules}
    rule = by_cause.get(shown[0].cause) if shown else None
    stamp = datetime.fromtimestamp(now, timezone.utc)
    cause = shown[0].cause if shown else "undiagnosed"
    if ctx.facts is None:
        notes = (*notes, f"No evidence bundle for {ctx.node} (hosts/{ctx.node}/evidence.json): "
                 "kernel log, NCCL log, PSI and memory signals were not read, so causes seen "
                 "only there (AER, Xid, NCCL transport, OOM) cannot be found or ruled out.")
    return Diagnosis(
        id=report_id(run, ctx.node, cause, stamp),
        node=ctx.node, run=run, date=stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        profile=profile or ctx.summary.get("profile", ""), verdict=verdict,
        gate=gate or f"{sum(r.status == 'fail' for r in failing)} failing checks, "
                     f"{sum(r.status == 'error' for r in failing)} errors",
        phenomenon=_phenomenon(ctx.node, failing) + (
            f" {unlisted} drift warning(s) bear on no hypothesis and are not listed."
            if unlisted else ""),
        failing=tuple(listed), hypotheses=tuple(shown), falsified=tuple(falsified),
        also_found=tuple(findings[1:]),
        benchmarks=tuple(details.benchmarks(ctx.results)),
        logs=tuple(details.logs(ctx, shown)),
        reproduce=tuple(details.reproduce(shown, findings[1:])),
        prevention=rule.prevention if rule else (),
        trend=details.trend(ctx, rule, shown[0] if shown else None, now),
        notes=notes,
    )


def _phenomenon(node: str, failing: tuple[Any, ...]) -> str:
    if not failing:
        return f"{node} passed every check."
    if not any(r.status in ("fail", "error") for r in failing):
        checks = sorted({r.check for r in failing})
        return (f"{node} passed its checks but warned on {len(checks)} ({', '.join(checks)}). "
                f"First: {failing[0].check}: {failing[0].message}")
    checks = sorted({r.check for r in failing if r.status == "fail"}) or \
        sorted({r.check for r in failing})
    first = failing[0]
    subject = f" on {first.subject}" if first.subject else ""
    return (f"{node} failed {len(checks)} check(s) ({', '.join(checks)}). First: {first.check}"
            f"{subject}: {first.message}")
