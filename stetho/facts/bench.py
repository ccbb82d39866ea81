"""A bundle's benchmark runs (stetho.evidence.bench_run records) -> per-metric statistics.

Each benchmark's plan record says whether it ran (or why not) and its shape; its repeats are
parsed here with the benchmark's parser, so a replay re-measures old outputs with today's
parsers. A benchmark whose definition is no longer known is an error, not a silent gap.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from stetho.core.record import record
from stetho.evidence.bundle import ProbeRecord
from stetho.facts.metrics import Metric
from stetho.facts.node import NodeFacts

if TYPE_CHECKING:  # loaded only for a bundle that holds benchmark runs (most hold none)
    from stetho.benchmarks import spec
    from stetho.benchmarks.measure import Measured
    from stetho.benchmarks.verdict import ToolVerdict

PLAN = "bench:"
VERSION = "bench-version:"


@record
class BenchRun:
    """One benchmark on one node (one device for per: hca/gpu)."""

    name: str
    device: str
    definition: spec.Benchmark | None
    shape: str
    suite: str
    skipped: str | None  # why it did not run (node busy, tool missing, ...), else None
    measured: Measured | None
    records: tuple[ProbeRecord, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.name}:{self.device}" if self.device else self.name


def runs(facts: NodeFacts) -> tuple[BenchRun, ...]:
    """The benchmarks this node's bundle holds, in the order they ran (cached on the facts)."""
    return facts.parsed("bench:runs", lambda: _runs(facts))


def tool_versions(facts: NodeFacts) -> dict[str, str]:
    """`bench-version:fio` -> {'tool.fio': 'fio-3.33'}: the first line each tool printed."""
    out = {}
    for name, rec in facts.bundle.probes.items():
        if name.startswith(VERSION) and rec.status == "ok" and rec.stdout.strip():
            out[f"tool.{name[len(VERSION):]}"] = rec.stdout.strip().splitlines()[0][:80]
    return out


def metrics(facts: NodeFacts) -> list[Metric]:
    """Each measured benchmark metric (its median), for history and drift like any other."""
    out = []
    for run in runs(facts):
        if run.measured is None or run.definition is None:
            continue
        for m in run.definition.metrics:
            stat = run.measured.stats.get(m.name)
            if stat is not None:
                out.append(Metric("bench_metric", run.key, m.name, stat.median, m.unit))
    return out


def definitions() -> dict[str, spec.Benchmark]:
    from stetho import config
    from stetho.benchmarks import spec

    return spec.load_all_cached(tuple(config.active().benchmarks))


def _runs(facts: NodeFacts) -> tuple[BenchRun, ...]:
    probes = facts.bundle.probes
    plans = [(n[len(PLAN):], r) for n, r in probes.items()
             if n.startswith(PLAN) and "#" not in n]
    if not plans:
        return ()
    from stetho.benchmarks.measure import summarize

    known = definitions()
    out: list[BenchRun] = []
    for name, plan_rec in plans:
        try:
            plan = json.loads(plan_rec.stdout or "{}")
        except json.JSONDecodeError:
            plan = {}
        bench = known.get(name)
        shape, suite = str(plan.get("shape", "")), str(plan.get("suite", ""))
        devices = [str(d) for d in plan.get("devices", [""])] or [""]
        if plan_rec.status == "skipped":
            out.append(BenchRun(name, "", bench, shape, suite, plan_rec.reason or "skipped",
                                None))
            continue
        for device in devices:
            prefix = f"{PLAN}{name}{':' + device if device else ''}#"
            reps = tuple(r for n, r in probes.items() if n.startswith(prefix))
            measured = None
            if bench is not None:
                measured = summarize(bench, [(_label(r), _text(r)) for r in reps])
            out.append(BenchRun(name, device, bench, shape.replace("{device}", device), suite,
                                None, measured, reps))
    return tuple(out)


def _label(rec: ProbeRecord) -> str:
    name = rec.name[len(PLAN):]
    return name if rec.status == "ok" else f"{name} {rec.status} ({rec.reason})"


def _text(rec: ProbeRecord) -> str | None:
    """The output of a repeat that finished (exit 0), else None: a failed run measures
    nothing, even if it printed a partial result."""
    return rec.stdout if rec.status == "ok" and not rec.binary else None


def verdicts(run: BenchRun) -> tuple[tuple[str, ToolVerdict], ...]:
    """Each repeat's own verdict from its tool (`stetho.benchmarks.verdict`), labelled by
    repeat; () when the benchmark's parser gives none. A repeat that exited non-zero is read
    too (dcgmi diag and nccl-tests exit 1 on a failure: their FAIL is in the output); one that
    did so while its output reports no failure, or did not finish, is an error."""
    from stetho.benchmarks.verdict import JUDGES, ToolVerdict, judge_text

    if run.definition is None or run.definition.parser not in JUDGES:
        return ()
    out = []
    for rec in run.records:
        label = rec.name[len(PLAN):]
        if rec.status not in ("ok", "failed") or rec.binary:
            why = "binary output" if rec.binary else f"{rec.status} ({rec.reason})"
            out.append((label, ToolVerdict("error", f"did not finish: {why}")))
            continue
        said = judge_text(run.definition.parser, rec.stdout)
        if said is None:
            continue
        if rec.status == "failed" and said.status in ("pass", "warn"):
            said = ToolVerdict("error", f"exited {rec.rc} though its output reports no "
                               f"failure ({said.summary})", said.words + tuple(
                                   rec.stderr.strip().splitlines()[-3:]))
        out.append((label, said))
    return tuple(out)
