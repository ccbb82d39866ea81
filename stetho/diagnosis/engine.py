"""The diagnosis engine: signals in, ranked hypotheses with their evidence chain out.

For each rule: collect the evidence of its supporting signals; a rule is a candidate when one
of its required signals is present; a present falsifying signal moves it to the falsified
list with the rule's reason. Candidates rank by score, the share of the rule's total weight
that was seen. A healthy node has no candidate: no failing signal, no hypothesis.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from stetho.diagnosis.model import BenchmarkRow, Diagnosis, Evidence, Hypothesis, Trend
from stetho.diagnosis.rules import Rule, load_all
from stetho.diagnosis.signals import SIGNALS, NodeContext
from stetho.history.reference import bearing

TOP = 3


def hypotheses(ctx: NodeContext, rules: list[Rule] | None = None
               ) -> tuple[list[Hypothesis], list[Hypothesis]]:
    rules = rules if rules is not None else load_all()
    cache: dict[str, list[Evidence]] = {}

    def seen(signal: str) -> list[Evidence]:
        if signal not in cache:
            cache[signal] = SIGNALS[signal](ctx)
        return cache[signal]

    ranked, falsified = [], []
    for rule in rules:
        if not any(seen(s) for s in rule.requires_any):
            continue
        evidence = [replace(e, weight=s.weight) for s in rule.supports for e in seen(s.signal)]
        got = sum(s.weight for s in rule.supports if seen(s.signal))
        h = Hypothesis(cause=rule.cause, title=rule.title,
                       score=round(got / rule.total_weight, 3), evidence=tuple(evidence),
                       action=rule.action, ticket=rule.ticket)
        why = [f.why for f in rule.falsified_by if seen(f.signal)]
        if why:
            falsified.append(replace(h, falsified=tuple(why)))
        else:
            ranked.append(h)
    order = {r.cause: i for i, r in enumerate(rules)}
    ranked.sort(key=lambda h: (-h.score, -len(h.evidence), order[h.cause]))
    return ranked[:TOP], falsified + [replace(h, falsified=(
        f"ranked below the top {TOP} (score {h.score:g})",)) for h in ranked[TOP:]]


def diagnose(ctx: NodeContext, *, run: str, gate: str = "", profile: str = "",
             rules: list[Rule] | None = None, now: float | None = None) -> Diagnosis:
    rules = rules if rules is not None else load_all()
    now = now if now is not None else time.time()
    top, falsified = hypotheses(ctx, rules)
    failing = tuple(sorted((r for r in ctx.results if r.status in ("fail", "error", "warn")),
                           key=lambda r: ({"fail": 0, "error": 1, "warn": 2}[r.status], r.check,
                                          r.subject)))
    cited = {(e.check or "", e.subject or "") for h in top for e in h.evidence}
    listed, unlisted = bearing(failing, cited, bool(top))
    verdict = "fail" if any(r.status == "fail" for r in failing) else (
        "error" if any(r.status == "error" for r in failing) else "warn")
    by_cause = {r.cause: r for r in rules}
    rule = by_cause.get(top[0].cause) if top else None
    stamp = datetime.fromtimestamp(now, timezone.utc)
    return Diagnosis(
        id=f"rpt-{stamp.strftime('%Y%m%dT%H%M%SZ')}-{ctx.node}-{secrets.token_hex(3)}",
        node=ctx.node, run=run, date=stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        profile=profile or ctx.summary.get("profile", ""), verdict=verdict,
        gate=gate or f"{sum(r.status == 'fail' for r in failing)} failing checks, "
                     f"{sum(r.status == 'error' for r in failing)} errors",
        phenomenon=_phenomenon(ctx.node, failing) + (
            f" {unlisted} drift warning(s) bear on no hypothesis and are not listed."
            if unlisted else ""),
        failing=tuple(listed), hypotheses=tuple(top), falsified=tuple(falsified),
        benchmarks=tuple(_benchmarks(ctx.results)),
        logs=tuple(_logs(ctx, top)),
        reproduce=tuple(_reproduce(top, rule)),
        prevention=rule.prevention if rule else (),
        trend=_trend(ctx, rule, now),
    )


def _phenomenon(node: str, failing: tuple[Any, ...]) -> str:
    if not failing:
        return f"{node} passed every check."
    checks = sorted({r.check for r in failing if r.status == "fail"}) or \
        sorted({r.check for r in failing})
    first = failing[0]
    subject = f" on {first.subject}" if first.subject else ""
    return (f"{node} failed {len(checks)} check(s) ({', '.join(checks)}). First: {first.check}"
            f"{subject}: {first.message}")


def _benchmarks(results: list[Any]) -> list[BenchmarkRow]:
    rows = []
    for r in results:
        if r.check == "nccl_busbw" and isinstance(r.value, (int, float)) and r.reference:
            delta = (r.value - r.reference) / r.reference * 100
            rows.append((r.reference, BenchmarkRow(
                f"allreduce busbw {r.subject.split('@')[-1]}", f"{r.reference:g} GB/s",
                f"{r.value:g} GB/s", round(delta, 1), r.status)))
    return [row for _, row in sorted(rows, key=lambda x: x[0])]


def _logs(ctx: NodeContext, top: list[Hypothesis]) -> list[str]:
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


def _reproduce(top: list[Hypothesis], rule: Rule | None) -> list[str]:
    cmds: list[str] = []
    for h in top[:1]:
        for e in h.evidence:
            if e.command and e.command not in cmds:
                cmds.append(e.command)
    if rule:
        cmds += [c for c in rule.reproduce_extra if c not in cmds]
    return cmds


def _trend(ctx: NodeContext, rule: Rule | None, now: float) -> Trend | None:
    if ctx.history is None:
        return None
    check, metric = rule.trend if rule and rule.trend else ("nccl", "busbw_gbps")
    series = ctx.history.series_of(ctx.node, check, metric)
    if not series:
        return None
    if check == "nccl":  # the largest message size
        series = sorted(series, key=lambda s: int(s[2].split("@")[-1]) if "@" in s[2] else 0)[-1:]
    sid, _, subject, _, unit = series[0]
    points = ctx.history.samples(ctx.node, [sid], since=now - 30 * 86400, until=now).get(sid, [])
    if not points:
        return None
    return Trend(metric=f"{metric} {subject}".strip(), unit=unit,
                 points=tuple((float(p.time), p.value) for p in points))
