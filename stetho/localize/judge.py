"""Noise-aware verdicts on group tests: repeat until the evidence decides, else unknown.

A group's score is its measured bandwidth as a fraction of healthy. Healthy groups scatter
within ±`noise` of 1.0 (the benchmark's run-to-run variation, taken as two standard deviations);
a fault worth finding costs at least `min_slowdown`. The threshold sits half way down that
slowdown. A test passes (or fails) once the mean of its runs is beyond the threshold by
z·σ/√n for the requested confidence; until then it is repeated, and after `max_runs` it is
"unknown", which no caller treats as pass.

Under a heavy tail (`tail` > 0: a healthy group runs 20-40% slow on a fraction `tail` of its
runs) one slow run is no evidence: each run is read on its own, slow or not, and a test fails
only after `confirm` slow runs with no clean one between (a transient repeats with probability
`tail`^`confirm`). A test whose runs disagree runs to `max_runs`: slow on `confirm` + 1 or more
of them is "intermittent" (a straggler; never pass), slow once is a transient and passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist, fmean

from stetho.errors import ConfigError
from stetho.localize.model import FAIL, INTERMITTENT, PASS, UNKNOWN


@dataclass(frozen=True)
class Judge:
    noise: float = 0.03
    min_slowdown: float = 0.15
    confidence: float = 0.997
    max_runs: int = 5
    tail: float = 0.0
    confirm: int = 2

    def __post_init__(self) -> None:
        if not 0 < self.noise < 0.5:
            raise ConfigError(f"localize: noise {self.noise} must be a fraction in (0, 0.5)")
        if not self.noise < self.min_slowdown < 1:
            raise ConfigError(f"localize: min slowdown {self.min_slowdown} must exceed the "
                              f"noise ({self.noise}) and be below 1")
        if not 0.5 < self.confidence < 1:
            raise ConfigError(f"localize: confidence {self.confidence} must be in (0.5, 1)")
        if self.max_runs < 1:
            raise ConfigError("localize: max runs must be at least 1")
        if not 0 <= self.tail < 0.5:
            raise ConfigError(f"localize: tail {self.tail} must be a fraction in [0, 0.5)")
        if self.tail and not 1 <= self.confirm < self.max_runs:
            raise ConfigError(f"localize: confirmations {self.confirm} must be at least 1 and "
                              f"below max runs ({self.max_runs})")

    @property
    def threshold(self) -> float:
        return 1.0 - self.min_slowdown / 2

    @property
    def margin(self) -> float:
        """z·σ for one run: how far past the threshold a single run must land to decide."""
        z = NormalDist().inv_cdf(self.confidence)
        return z * self.noise / 2

    @property
    def fails_alone(self) -> float:
        """The score at or below which one run fails a test by itself (mean rule, n=1), so a
        runner may stop measuring a group there: more flows could only lower its value."""
        return max(0.0, self.threshold - self.margin)

    def verdict(self, scores: list[float], runs: int = 1) -> str | None:
        """PASS, FAIL, UNKNOWN (out of runs), or None: run it again. Under a tail, a pass
        needs `runs` clean runs (capped at max_runs)."""
        if not scores:
            return None
        if self.tail:
            return self._tailed(scores, min(runs, self.max_runs))
        m = fmean(scores)
        need = self.margin / math.sqrt(len(scores))
        if m - self.threshold >= need:
            return PASS
        if self.threshold - m >= need:
            return FAIL
        return UNKNOWN if len(scores) >= self.max_runs else None

    def _tailed(self, scores: list[float], runs: int) -> str | None:
        slow = sum(s < self.threshold for s in scores)
        if slow == 0:
            return PASS if len(scores) >= runs else None
        if slow == len(scores):
            return FAIL if slow >= self.confirm else None
        if len(scores) < self.max_runs:
            return None
        return INTERMITTENT if slow > self.confirm else PASS

    def transient(self, scores: list[float]) -> bool:
        """A pass with a slow run in it: the tail, not a fault."""
        return bool(self.tail) and any(s < self.threshold for s in scores)
