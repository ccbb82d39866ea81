"""Baselines: the healthy values of a node class, measured on real nodes, with the
environment they were measured on.

`record` takes the median over the given runs and nodes (NCCL busbw per message size, and
every other metric the checks compare) and writes it into baselines/<profile>.yml with the
fingerprint (driver, VBIOS, CUDA, NCCL, HCA firmware, kernel, OFED, GPU model, PCI topology),
the date and the stetho version. A person commits that file: a baseline change is reviewed
like code. `compare` sets a baseline beside current values for `show` and `diff`.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from stetho import __version__
from stetho.errors import ConfigError, EvaluationError
from stetho.profiles import Profile

#: Metrics whose fleet median becomes a baseline value: check.metric -> kept as a float.
MEASURED = ("gpu.temperature_c", "gpu.power_w", "gpu.app_sm_clock_mhz", "gpu.app_mem_clock_mhz",
            "ib.rate_gbps", "ib.pre_fec_ber")


@dataclass(frozen=True)
class Measurement:
    nodes: int
    busbw: dict[int, float]
    measured: dict[str, float]
    fingerprint: dict[str, str]
    spread: dict[str, str]  # components whose nodes disagree: the values seen


def measure(bundle_paths: list[Path], profile: Profile) -> Measurement:
    from stetho.checking.nodes import node_facts
    from stetho.evidence.bundle import load
    from stetho.facts import metrics
    from stetho.facts.node import Unavailable

    busbw: dict[int, list[float]] = {}
    measured: dict[str, list[float]] = {}
    prints: dict[str, list[str]] = {}
    nodes = 0
    for path in bundle_paths:
        facts = node_facts(load(path), profile)
        nodes += 1
        try:
            run = facts.nccl_run()
            if not run.failed and not run.truncated:
                for row in run.rows:
                    if row.oop_busbw_gbps is not None:
                        busbw.setdefault(row.size_bytes, []).append(row.oop_busbw_gbps)
        except Unavailable:
            pass
        for m in metrics.extract(facts):
            key = f"{m.check}.{m.metric}"
            if key in MEASURED:
                measured.setdefault(key, []).append(m.value)
        for comp, value in facts.fingerprint().items():
            prints.setdefault(comp, []).append(value)
    if not nodes:
        raise EvaluationError("no evidence bundles to measure")
    fingerprint, spread = {}, {}
    for comp, values in prints.items():
        seen = Counter(values)
        fingerprint[comp] = seen.most_common(1)[0][0]
        if len(seen) > 1:
            spread[comp] = ", ".join(f"{v} ({n})" for v, n in seen.most_common())
    return Measurement(
        nodes=nodes,
        busbw={size: round(statistics.median(v), 2) for size, v in sorted(busbw.items())},
        measured={k: _round(statistics.median(v)) for k, v in sorted(measured.items())},
        fingerprint=fingerprint, spread=spread)


def _round(v: float) -> float:
    return float(f"{v:.4g}")


def record(profile: Profile, m: Measurement, source: str, out: Path | None = None) -> Path:
    """Write the measurement into the profile's YAML (or `out`), keeping everything else."""
    from stetho import profiles as profiles_mod
    from stetho.core import yamledit
    from stetho.parsers.nccl_tests import format_size

    path = out or Path(profile.source)
    text = path.read_text(encoding="utf-8") if path.exists() else \
        f"profile: {profile.name}\nextends: {profile.name}\n"
    spec = profile.nccl
    min_size = spec.min_size_bytes
    sizes = {size: v for size, v in m.busbw.items() if size >= min_size}
    if spec.enabled and not sizes:
        raise EvaluationError(f"no NCCL busbw at or above {min_size} B in the given evidence: "
                              "was nccl-tests run (profile nccl.run) on these nodes?")
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    fp = dict(m.fingerprint)
    if sizes:
        nccl_block = {
            "source": f"stetho baseline record from {source} ({m.nodes} nodes, median)",
            "measured_on": today,
            "measured_with": {k: fp[k] for k in ("driver", "cuda", "nccl") if k in fp},
            "busbw_gbps": {format_size(s).replace(" ", "").replace("iB", "")
                           .replace("B", ""): v for s, v in sizes.items()},
        }
        text = yamledit.set_block(text, ("nccl", "baseline"), nccl_block, str(path))
    top = {"measured_on": today, "stetho_version": __version__,
           "source": f"{source} ({m.nodes} nodes)", "on_stale": profile.baseline.on_stale,
           "fingerprint": fp, "measured": m.measured}
    text = yamledit.set_block(text, ("baseline",), top, str(path))
    path.write_text(text, encoding="utf-8")
    profiles_mod._LOADED.clear()
    profiles_mod.load(str(path))  # what was written must load: fail here, not at the gate
    return path


@dataclass(frozen=True)
class Row:
    kind: str  # busbw | measured | fingerprint
    name: str
    baseline: Any
    current: Any
    delta_pct: float | None
    status: str  # same | better | worse | differs | missing

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "baseline": self.baseline,
                "current": self.current, "delta_pct": self.delta_pct, "status": self.status}


def compare(profile: Profile, m: Measurement | None) -> list[Row]:
    """The baseline beside `m` (None: the baseline alone, for `show`)."""
    from stetho.parsers.nccl_tests import format_size

    rows = []
    base = profile.nccl.baseline
    for size, want in sorted((base.busbw_gbps if base else {}).items()):
        got = m.busbw.get(size) if m else None
        rows.append(_num_row("busbw", f"allreduce@{format_size(size)}", want, got,
                             higher_is_better=True, tolerance=profile.nccl.tolerance_pct))
    for name, want in sorted(profile.baseline.measured.items()):
        got = m.measured.get(name) if m else None
        rows.append(_num_row("measured", name, want, got, higher_is_better=None, tolerance=5))
    ref = profile.reference_fingerprint()
    for comp in sorted(set(ref) | set(m.fingerprint if m else {})):
        want_s = ref.get(comp)
        got_s = m.fingerprint.get(comp) if m else None
        status = ("same" if want_s == got_s else "missing" if want_s is None or got_s is None
                  else "differs") if m else "same"
        rows.append(Row("fingerprint", comp, want_s, got_s, None, status))
    return rows


def _num_row(kind: str, name: str, want: float, got: float | None, *,
             higher_is_better: bool | None, tolerance: float) -> Row:
    if got is None:
        return Row(kind, name, want, None, None, "missing")
    delta = (got - want) / want * 100 if want else 0.0
    if abs(delta) <= tolerance:
        status = "same"
    elif higher_is_better is None:
        status = "differs"
    else:
        status = "better" if (delta > 0) == higher_is_better else "worse"
    return Row(kind, name, want, got, round(delta, 2), status)


def bundles_of(sources: list[str]) -> list[Path]:
    from stetho.evidence.bundle import find_bundles

    paths = [p for s in sources for p in find_bundles(Path(s))]
    if not paths:
        raise ConfigError("no evidence bundles in " + ", ".join(sources))
    return paths


# -- benchmark baselines ------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchEntry:
    """One benchmark metric over the nodes: the median of their medians."""

    key: str  # <bench>[:<device>].<metric>
    value: float
    unit: str
    shape: str
    cv_pct: float  # the noisiest node's coefficient of variation over its repeats
    nodes: int
    noisy_nodes: tuple[str, ...]  # nodes whose CV is over the limit


@dataclass(frozen=True)
class BenchMeasurement:
    entries: dict[str, BenchEntry]
    fingerprint: dict[str, str]
    nodes: int
    skipped: dict[str, str]  # <node>/<bench> -> why it did not run


def measure_bench(bundle_paths: list[Path], profile: Profile) -> BenchMeasurement:
    """Every benchmark metric the bundles hold (`stetho bench run --evidence-out`)."""
    from stetho.benchmarks.measure import CV_BASELINE_MAX_PCT
    from stetho.checking.nodes import node_facts
    from stetho.evidence.bundle import load
    from stetho.facts import bench

    seen: dict[str, list[tuple[str, float, float, str, str]]] = {}
    prints: dict[str, list[str]] = {}
    skipped: dict[str, str] = {}
    for path in bundle_paths:
        facts = node_facts(load(path), profile)
        for comp, v in {**facts.fingerprint(), **bench.tool_versions(facts)}.items():
            prints.setdefault(comp, []).append(v)
        for run in bench.runs(facts):
            if run.skipped is not None or run.measured is None or run.definition is None:
                skipped[f"{facts.name}/{run.key}"] = run.skipped or "not defined"
                continue
            for metric in run.definition.metrics:
                stat = run.measured.stats.get(metric.name)
                if stat is not None:
                    seen.setdefault(f"{run.key}.{metric.name}", []).append(
                        (facts.name, stat.median, stat.cv_pct, metric.unit, run.shape))
    if not seen:
        raise EvaluationError("no benchmark results in the given evidence" + (
            ": " + "; ".join(f"{k}: {v}" for k, v in sorted(skipped.items())[:5])
            if skipped else " (record them with `stetho bench run --evidence-out`)"))
    entries = {}
    for key, rows in sorted(seen.items()):
        shape = Counter(r[4] for r in rows).most_common(1)[0][0]
        same = [r for r in rows if r[4] == shape]
        entries[key] = BenchEntry(
            key=key, value=_round(statistics.median(r[1] for r in same)), unit=same[0][3],
            shape=shape, cv_pct=round(max(r[2] for r in same), 2), nodes=len(same),
            noisy_nodes=tuple(r[0] for r in same if r[2] > CV_BASELINE_MAX_PCT))
    fingerprint = {c: Counter(v).most_common(1)[0][0] for c, v in sorted(prints.items())}
    return BenchMeasurement(entries, fingerprint, len(bundle_paths), skipped)


def record_bench(profile: Profile, m: BenchMeasurement, source: str, out: Path | None = None,
                 force: bool = False) -> Path:
    """Write the measurement into the profile's `bench.baseline` (or `out`), keeping the other
    entries. A metric measured with a CV over 5% on any node is refused unless `force`."""
    from stetho import profiles as profiles_mod
    from stetho.benchmarks.measure import CV_BASELINE_MAX_PCT
    from stetho.core import yamledit

    noisy = [e for e in m.entries.values() if e.noisy_nodes]
    if noisy and not force:
        raise EvaluationError(
            f"refusing to record a baseline from noisy runs (CV over {CV_BASELINE_MAX_PCT:g}% "
            "between repeats): " + "; ".join(
                f"{e.key} CV {e.cv_pct:g}% on {', '.join(e.noisy_nodes[:3])}" for e in noisy)
            + ". Lock clocks, stop what disturbs the nodes, raise `repeats`, or pass --force")
    path = out or Path(profile.source)
    text = path.read_text(encoding="utf-8") if path.exists() else \
        f"profile: {profile.name}\nextends: {profile.name}\n"
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    block: dict[str, Any] = {
        k: {"value": b.value, "unit": b.unit, "shape": b.shape, "cv_pct": b.cv_pct,
            "nodes": b.nodes, "measured_on": b.measured_on, "fingerprint": b.fingerprint}
        for k, b in profile.bench.baseline.items()} if path == Path(profile.source) else {}
    for key, e in m.entries.items():
        block[key] = {"value": e.value, "unit": e.unit, "shape": e.shape, "cv_pct": e.cv_pct,
                      "nodes": e.nodes, "measured_on": today, "stetho_version": __version__,
                      "source": source, "fingerprint": dict(m.fingerprint)}
    text = yamledit.set_block(text, ("bench", "baseline"), dict(sorted(block.items())),
                              str(path))
    path.write_text(text, encoding="utf-8")
    profiles_mod._LOADED.clear()
    profiles_mod.load(str(path))  # what was written must load: fail here, not in a check
    return path
