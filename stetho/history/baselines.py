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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from stetho import __version__
from stetho.errors import ConfigError, EvaluationError
from stetho.profiles import BaselineShape, Profile

#: Metrics whose fleet median becomes a baseline value: check.metric -> kept as a float.
MEASURED = ("gpu.temperature_c", "gpu.power_w", "gpu.app_sm_clock_mhz", "gpu.app_mem_clock_mhz",
            "ib.rate_gbps", "ib.pre_fec_ber")


@dataclass(frozen=True)
class Measurement:
    """`shapes`: busbw per message size, per run shape (a baseline is only ever compared
    with runs of its own shape); `busbw` is the profile's own shape's (its first baseline's),
    else the shape most nodes ran."""

    nodes: int
    busbw: dict[int, float]
    measured: dict[str, float]
    fingerprint: dict[str, str]
    spread: dict[str, str]  # components whose nodes disagree: the values seen
    shapes: dict[BaselineShape, dict[int, float]] = field(default_factory=dict)


def measure(bundle_paths: list[Path], profile: Profile) -> Measurement:
    from stetho.checking.nodes import node_facts
    from stetho.evidence.bundle import load
    from stetho.facts import metrics
    from stetho.facts.node import Unavailable

    busbw: dict[BaselineShape, dict[int, list[float]]] = {}
    runs: Counter[BaselineShape] = Counter()
    measured: dict[str, list[float]] = {}
    prints: dict[str, list[str]] = {}
    nodes = 0
    for path in bundle_paths:
        facts = node_facts(load(path), profile)
        nodes += 1
        try:
            run = facts.nccl_run()
            shape = run.shape
            # the output's collective, or the declared one where the output does not say
            collective = facts.nccl_collective()[0] if run.rows else None
            if not run.failed and not run.truncated and collective and shape.ranks:
                shape_key = BaselineShape(collective, shape.ranks, shape.nodes,
                                          shape.gpus_per_node)
                runs[shape_key] += 1
                for row in run.rows:
                    if row.oop_busbw_gbps is not None:
                        busbw.setdefault(shape_key, {}).setdefault(row.size_bytes, []).append(
                            row.oop_busbw_gbps)
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
    shapes = {key: {size: round(statistics.median(v), 2) for size, v in sorted(sizes.items())}
              for key, sizes in busbw.items()}
    own = profile.nccl.baseline.shape if profile.nccl.baseline else None
    main = next((k for k in shapes if own is not None and _same_shape(own, k)),
                runs.most_common(1)[0][0] if runs else None)
    return Measurement(
        nodes=nodes, shapes=shapes,
        busbw=shapes.get(main, {}) if main is not None else {},
        measured={k: _round(statistics.median(v)) for k, v in sorted(measured.items())},
        fingerprint=fingerprint, spread=spread)


def _same_shape(baseline: BaselineShape, run: BaselineShape) -> bool:
    return baseline.matches(run.collective, run.ranks, run.nodes, run.gpus_per_node)


def shape_label(shape: BaselineShape) -> str:
    """A baseline's key under `nccl.baselines`: 'all_reduce-2x8' (nodes x GPUs per node),
    'all_reduce-16r' when the GPUs per node differ."""
    if shape.nodes and shape.gpus_per_node:
        return f"{shape.collective}-{shape.nodes}x{shape.gpus_per_node}"
    return f"{shape.collective}-{shape.ranks}r"


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
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    fp = dict(m.fingerprint)
    shapes = {key: {size: v for size, v in sizes.items() if size >= min_size}
              for key, sizes in (m.shapes or {}).items()}
    shapes = {key: sizes for key, sizes in shapes.items() if sizes}
    if spec.enabled and not shapes:
        raise EvaluationError(f"no NCCL busbw at or above {min_size} B in the given evidence: "
                              "was nccl-tests run (profile nccl.run) on these nodes?")
    own = spec.baseline.shape if spec.baseline else None
    for key, sizes in sorted(shapes.items(), key=lambda kv: shape_label(kv[0])):
        block = {
            "source": f"stetho baseline record from {source} ({m.nodes} nodes, median)",
            "measured_on": today,
            "shape": {"collective": key.collective, "ranks": key.ranks, "nodes": key.nodes,
                      **({"gpus_per_node": key.gpus_per_node} if key.gpus_per_node else {})},
            "measured_with": {k: fp[k] for k in ("driver", "cuda", "nccl") if k in fp},
            "busbw_gbps": {format_size(s).replace(" ", "").replace("iB", "")
                           .replace("B", ""): v for s, v in sizes.items()},
        }
        where = ("nccl", "baseline") if own is None or _same_shape(own, key) else \
            ("nccl", "baselines", shape_label(key))
        if own is None:
            own = key
        text = yamledit.set_block(text, where, block, str(path))
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
    for base in profile.nccl.baselines:
        label = "allreduce" if base is profile.nccl.baseline else shape_label(base.shape)
        got_sizes = (m.shapes.get(_run_key(base.shape, m)) or {}) if m and m.shapes else \
            (m.busbw if m and base is profile.nccl.baseline else {})
        for size, want in sorted(base.busbw_gbps.items()):
            got = got_sizes.get(size)
            rows.append(_num_row("busbw", f"{label}@{format_size(size)}", want, got,
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


def _run_key(baseline: BaselineShape, m: Measurement) -> BaselineShape:
    """The measured shape a baseline compares with (its own, when it was measured)."""
    return next((k for k in m.shapes if _same_shape(baseline, k)), baseline)


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


#: Fewer healthy nodes than this make a median that one odd node can move.
MIN_NODES = 8


@dataclass(frozen=True)
class Screened:
    """The bundles a baseline may be measured on, and the ones left out with the reason."""

    kept: list[Path]
    excluded: dict[str, str]  # node -> "fail: cpu_governor, disk_rotational"


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
