"""Benchmarks: each metric's median over its repeats, against the profile's baseline for it.

The baseline is keyed by benchmark, device and metric, and holds the run shape (the command
line without per-run values) and the versions it was measured on: another shape has no
baseline (skip, saying so), other versions make it stale (warn). A drop beyond the metric's
tolerance (`bench.tolerance` in the profile) fails. A benchmark that did not run (node busy,
tool missing) skips with the reason; one whose repeats all failed is an error. A GPU benchmark
on a node whose clocks are not locked to the profile's target is marked noisy (warn at best).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts.node import Unavailable
from stetho.results import Limit

if TYPE_CHECKING:
    from stetho.checking.subjects import BenchMetric
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile


def test_bench_metric(bench_metric: BenchMetric, facts: NodeFacts, profile: Profile,
                      verdict: Verdict) -> None:
    run, metric = bench_metric.run, bench_metric.metric
    measured = run.measured
    stat = measured.stats.get(metric.name) if measured else None
    failed = "; ".join(measured.failures[:3]) if measured and measured.failures else ""
    if stat is None:
        runs = measured.repeats if measured else 0
        verdict.error(f"{run.key}: no value for {metric.name} in {runs} runs" + (
            f": {failed}" if failed else f" ({metric.field} is unknown in the output)"))
    key = f"{run.key}.{metric.name}"
    base = profile.bench.baseline.get(key)
    tolerance = profile.bench.tolerance_for(run.name, metric.name)
    summary = stat.describe(metric.unit)
    verdict.cite(f"{run.shape}: {summary}" + (f"; failed runs: {failed}" if failed else ""),
                 f"bench:{run.key}")
    if base is None:
        verdict.measure(stat.median, metric.unit)
        raise Unavailable("skip", f"{summary}; no baseline for {key} in profile "
                          f"{profile.name}: record one with `stetho bench baseline`")
    if base.shape != run.shape:
        verdict.measure(stat.median, metric.unit)
        raise Unavailable("skip", f"{summary}; the baseline for {key} was measured with "
                          f"another shape ({base.shape}), not comparable")
    higher = metric.direction == "higher"
    limit = base.value * (1 - tolerance / 100) if higher else base.value * (1 + tolerance / 100)
    verdict.measure(stat.median, metric.unit, expected=f"{base.value:.4g} {metric.unit} "
                    "(baseline)", threshold=Limit(limit, ">=" if higher else "<=", metric.unit,
                                                  note=f"baseline {'-' if higher else '+'}"
                                                  f"{tolerance:g}%"), reference=base.value)
    worse = stat.median < limit if higher else stat.median > limit
    delta = (stat.median - base.value) / base.value * 100 if base.value else 0.0
    if worse:
        verdict.fail(f"{metric.name} {summary}: {delta:+.1f}% against the baseline "
                     f"{base.value:.4g} {metric.unit} (tolerance {tolerance:g}%)",
                     remediation=f"rerun `stetho bench run --suite {run.suite or 'nightly'}` to "
                     "confirm; then look for the cause (disk/NIC errors, throttling, a "
                     "neighbour's load) before draining")
    if failed:
        verdict.warn(f"{summary}, but some runs failed: {failed}")
    stale = _stale(facts, base.fingerprint)
    if stale:
        verdict.warn(f"baseline stale: {summary} within {tolerance:g}% of a baseline measured "
                     f"with {stale}", remediation="re-record it on healthy nodes: "
                     f"`stetho bench baseline EVIDENCE... --profile {profile.name}`")
    noisy = _noisy(run, facts, profile)
    if noisy:
        verdict.warn(f"noisy: {noisy}; {summary} ({delta:+.1f}% vs baseline)",
                     remediation="lock the GPU clocks (`nvidia-smi -lgc`/`-lmc`) before "
                     "benchmarking")
    verdict.ok(f"{summary} ({delta:+.1f}% vs baseline)")


def _stale(facts: NodeFacts, reference: dict[str, str]) -> str:
    from stetho.facts import bench

    mine = {**facts.fingerprint(), **bench.tool_versions(facts)}
    return "; ".join(f"{k} {v} (baseline) vs {mine[k]} (node)" for k, v in
                     sorted(reference.items()) if k in mine and mine[k] != v)


def _noisy(run: object, facts: NodeFacts, profile: Profile) -> str:
    """Why a GPU benchmark's figure is noisy ('' when clocks are locked to the target)."""
    definition = getattr(run, "definition", None)
    if definition is None or "gpu" not in definition.needs:
        return ""
    target = profile.gpu.clocks
    if target is None:
        return f"profile {profile.name} sets no clock target, so locked clocks are not known"
    try:
        gpus = facts.gpus()
    except Unavailable as u:
        return f"clocks unknown ({u.reason})"
    from stetho.facts.clocks import lock_state

    # The clocks check's notion of locked: the current clocks at the target, not the
    # application clocks (whose defaults equal the target on H100 even when unlocked).
    off = []
    for g in gpus:
        state = lock_state(g, target)
        if not state.locked:
            off.append(f"gpu{g.index} ({', '.join(state.off) or state.why})")
    return f"clocks not locked to the target on {', '.join(off)}" if off else ""
