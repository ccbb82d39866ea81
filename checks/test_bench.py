"""Benchmarks: the tool's own verdict, and each metric's median against the profile's baseline.

`bench_verdict` believes a tool that judges its own run (dcgmi diag's per-test Pass/Fail/Warn,
gpu-burn's OK/FAULTY and error counts, nccl-tests' `#wrong` and FAILED lines; tool errors of
nvbandwidth, fio, iperf3 and perftest): a FAIL is a fail with the tool's words, with or without
a baseline, and the worst repeat decides (stetho.benchmarks.verdict).

`bench_metric`: each metric's median over its repeats, against the profile's baseline for it.

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
    from stetho.facts.bench import BenchRun
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile


def test_bench_verdict(bench_run: BenchRun, verdict: Verdict) -> None:
    from stetho.benchmarks.verdict import worst
    from stetho.facts import bench

    run = bench_run
    assert run.definition is not None  # the subject is an error without one
    said = bench.verdicts(run)
    if not run.records:
        verdict.error(f"{run.key}: no repeat ran")
    if not said:
        raise Unavailable("skip", f"{run.definition.parser} output carries no verdict of its "
                          "own; the metrics are judged by bench_metric")
    status = worst([v.status for _, v in said])
    decided = [(label, v) for label, v in said if v.status == status]
    words = [w for _, v in decided for w in v.words]
    verdict.measure(sum(1 for _, v in said if v.status in ("fail", "error")), "count",
                    expected=f"0 failed of {len(said)} runs (the tool's own verdict)")
    verdict.cite("\n".join([f"{label}: {v.status}: {v.summary}" for label, v in said]
                           + words[:20]), f"bench:{run.key}")
    label, first = decided[0]
    quoted = "; ".join(dict.fromkeys(words[:4]))
    message = (f"{first.summary}" + (f": {quoted}" if quoted and quoted not in first.summary
                                     else "") + f" [{label}"
               + (f" and {len(decided) - 1} more runs]" if len(decided) > 1 else "]"))
    if status == "fail":
        verdict.fail(message, remediation=_FAIL_FIX.get(run.definition.parser, _FAIL_FIX[""]))
    if status == "error":
        verdict.error(message, remediation="fix what stopped the tool (its words are in the "
                      f"message and evidence), then rerun `stetho bench run -b {run.name}`")
    if status == "warn":
        verdict.warn(message, remediation="read the tool's warning; rerun to see whether it "
                     "persists")
        return
    verdict.ok(f"{first.summary} ({len(said)} run{'s' if len(said) > 1 else ''})")


_FAIL_FIX = {
    "dcgmi_diag": "drain the node; read the failed tests' messages (`dcgmi diag -r 3 -v` for "
                  "detail), check Xid/ECC in the kernel log and `nvidia-smi -q`; reset or "
                  "replace the GPU the test names",
    "gpu_burn": "drain the node: a GPU whose results differ between iterations computes "
                "wrongly; check its Xid/ECC and row remapping, reset it and rerun, replace it "
                "if it stays FAULTY",
    "nccl_tests": "drain the node now; run `dcgmi diag -r 3` and check Xid/ECC and NVLink "
                  "errors; a GPU or link is corrupting data",
    "": "drain the node and rerun the benchmark to confirm; the tool's own words say what failed",
}


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
