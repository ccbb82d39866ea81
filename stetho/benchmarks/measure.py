"""A benchmark's repeats -> one figure per metric: the median, with min, max and the
coefficient of variation (stdev / mean), so a noisy measurement says it is noisy.

Pure: the outputs of the repeats in, statistics out. A repeat whose output does not parse
counts as a failed repeat (named, with the parser's message); a metric with no value in any
repeat is None, never 0.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from stetho.benchmarks.spec import Benchmark
from stetho.parsers import ParseError

#: Above this coefficient of variation a measurement is too noisy to become a baseline.
CV_BASELINE_MAX_PCT = 5.0


@dataclass(frozen=True)
class Stat:
    """One metric over the repeats that gave a value."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return float(statistics.median(self.values))

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    @property
    def cv_pct(self) -> float:
        """Coefficient of variation in percent (0 for one value, or a mean of 0)."""
        if self.n < 2:
            return 0.0
        mean = statistics.fmean(self.values)
        return abs(statistics.stdev(self.values) / mean * 100) if mean else 0.0

    def describe(self, unit: str) -> str:
        if self.n == 1:
            return f"{_num(self.median)} {unit} (1 run)"
        return (f"median {_num(self.median)} {unit} of {self.n} runs "
                f"(min {_num(self.min)}, max {_num(self.max)}, CV {self.cv_pct:.1f}%)")


@dataclass(frozen=True)
class Measured:
    """A benchmark's statistics on one node (one device when `per` is hca/gpu)."""

    stats: dict[str, Stat | None]
    failures: tuple[str, ...]  # one line per repeat that gave no parsable output
    repeats: int


def summarize(bench: Benchmark, outputs: list[tuple[str, str | None]]) -> Measured:
    """`outputs`: (repeat label, text or None when it did not run to the end) per repeat."""
    values: dict[str, list[float]] = {m.name: [] for m in bench.metrics}
    failures: list[str] = []
    for label, text in outputs:
        if text is None:
            failures.append(label)
            continue
        try:
            parsed = bench.parse(text)
        except ParseError as exc:
            failures.append(f"{label}: {exc}")
            continue
        for name, value in bench.measure(parsed).items():
            if value is not None:
                values[name].append(value)
    return Measured({k: Stat(tuple(v)) if v else None for k, v in values.items()},
                    tuple(failures), len(outputs))


def _num(v: float) -> str:
    return f"{v:.4g}"
