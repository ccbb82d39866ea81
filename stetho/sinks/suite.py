"""A benchmark suite's night over the fleet, as one line and one record: how many nodes ran
it, which were busy (their invasive benchmarks skipped), which benchmarks regressed against
their baselines, which the tool itself failed, and which could not be judged.

The sweep (`stetho sweep --bench SUITE`) writes it into summary.txt, summary.json and the run
page, and the CLI ends with its line. It fails closed: a metric with no baseline is counted
as not compared (never as "did not regress"), and a node that brought back no benchmark
result is named, not left out of the count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stetho.core import hostlist
from stetho.results import Result

METRIC, VERDICT = "bench_metric", "bench_verdict"


@dataclass(frozen=True)
class SuiteSummary:
    suite: str
    hosts: tuple[str, ...]
    ran: tuple[str, ...]  # idle nodes that ran the suite, invasive benchmarks included
    busy: Mapping[str, str]  # node -> why nothing invasive ran there ("node busy (job 12)")
    missing: tuple[str, ...]  # nodes with no benchmark result at all (unreachable, killed)
    compared: int  # metric results judged against a baseline
    no_baseline: int  # metric results that had none (or one of another shape): not compared
    #: "benchmark[:device].metric" -> nodes where it fell outside its baseline's tolerance
    regressed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: "benchmark[:device]" -> nodes where the tool's own verdict was a fail (dcgmi diag Fail)
    failed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: "benchmark[:device]" or "...metric" -> nodes where it could not be decided (error);
    #: not the metrics of a run the tool itself failed (that fail says it)
    unjudged: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def line(self) -> str:
        """`nightly suite: ran on 3 of 5 nodes; 1 busy, skipped: node04; ...`."""
        parts = [f"{self.suite} suite: ran on {len(self.ran)} of {len(self.hosts)} nodes"]
        if self.busy:
            parts.append(f"{len(self.busy)} busy, invasive benchmarks skipped: "
                         f"{_names(self.busy)}")
        if self.missing:
            parts.append(f"{len(self.missing)} brought back no benchmark result: "
                         f"{_names(self.missing)}")
        base = (f"{self.compared} compared" + (f", {self.no_baseline} without a baseline"
                                                if self.no_baseline else ""))
        if self.regressed:
            parts.append(f"regressed against baselines: {_listing(self.regressed)} (of {base})")
        elif self.compared:
            parts.append(f"none regressed against its baseline ({base})")
        else:
            parts.append(f"no metric compared against a baseline ({self.no_baseline} without "
                         "one: record them with `stetho bench baseline`)")
        if self.failed:
            parts.append(f"failed by the tool's own verdict: {_listing(self.failed)}")
        if self.unjudged:
            parts.append(f"could not be judged: {_listing(self.unjudged)}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "hosts": len(self.hosts), "ran": list(self.ran),
                "busy": dict(self.busy), "missing": list(self.missing),
                "compared": self.compared, "no_baseline": self.no_baseline,
                "regressed": {k: list(v) for k, v in self.regressed.items()},
                "failed": {k: list(v) for k, v in self.failed.items()},
                "unjudged": {k: list(v) for k, v in self.unjudged.items()}}


def summarize(suite: str, results: Iterable[Result], hosts: Iterable[str],
              busy: Mapping[str, str]) -> SuiteSummary:
    """The suite's summary from a run's results; `busy`: node -> skip reason, for the nodes
    that said they were not idle (busy, or could not tell)."""
    hosts = tuple(sorted(hosts))
    benched: set[str] = set()
    compared = no_baseline = 0
    regressed: dict[str, set[str]] = {}
    failed: dict[str, set[str]] = {}
    unjudged: dict[str, set[str]] = {}
    for r in results:
        if r.check not in (METRIC, VERDICT):
            continue
        benched.add(r.node)
        if r.status == "error":
            unjudged.setdefault(r.subject, set()).add(r.node)
        elif r.check == VERDICT and r.status == "fail":
            failed.setdefault(r.subject, set()).add(r.node)
        elif r.check == METRIC and r.status in ("pass", "warn", "fail"):
            if r.reference is None and r.status != "fail":
                no_baseline += 1
                continue
            compared += 1
            if r.status == "fail":
                regressed.setdefault(r.subject, set()).add(r.node)
        elif r.check == METRIC and r.status == "skip" and "baseline" in r.message:
            no_baseline += 1
    for key in list(unjudged):  # a metric of a run the tool failed has no value: said once
        unjudged[key] -= failed.get(key.rsplit(".", 1)[0], set())
        if not unjudged[key]:
            del unjudged[key]
    return SuiteSummary(
        suite=suite, hosts=hosts, busy=dict(sorted(busy.items())),
        ran=tuple(h for h in hosts if h in benched and h not in busy),
        missing=tuple(h for h in hosts if h not in benched and h not in busy),
        compared=compared, no_baseline=no_baseline, regressed=_sorted(regressed),
        failed=_sorted(failed), unjudged=_sorted(unjudged))


def _sorted(found: dict[str, set[str]]) -> dict[str, tuple[str, ...]]:
    return {k: tuple(sorted(v)) for k, v in sorted(found.items())}


def _names(nodes: Iterable[str]) -> str:
    return hostlist.compress(sorted(nodes))


def _listing(found: Mapping[str, tuple[str, ...]], most: int = 6) -> str:
    items = [f"{k} ({_names(v)})" for k, v in found.items()]
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most
                                      else "")
