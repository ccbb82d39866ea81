"""Canaries against controls, one benchmark at a time: pure numbers in, a verdict out.

Why controls: a new NCCL or driver changes what "healthy" measures, so a stored baseline goes
stale exactly when a release needs it; control nodes on the current release, measured in the
same window through the same fabric, are the like-for-like reference.

The noise model is bench's (stetho.benchmarks.measure.Stat): every group (one node, or a pair
across leaves) runs K repeats; its figure is the median, its noise the coefficient of
variation. The noise band is the wider of the policy's floor and twice the noisiest control's
CV. Controls whose medians disagree with one another by more than that band, too few controls,
or a control that could not run make the comparison unknown (never GO). A canary group
nccl-tests itself declares FAILED, or canaries more than max(max_drop_pct, band) under the
controls' median (as a group, or any one canary group), fail.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from stetho.benchmarks.measure import Stat
from stetho.gate.release.settings import CanaryRules


@dataclass(frozen=True)
class GroupRun:
    """One group's repeats: the busbw of each repeat that ran, and what went wrong in the
    others (`errors`: could not run; `failed`: the tool said the run is wrong)."""

    nodes: tuple[str, ...]
    values: tuple[float, ...] = ()
    errors: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return "+".join(self.nodes)

    @property
    def stat(self) -> Stat | None:
        return Stat(self.values) if self.values else None


@dataclass(frozen=True)
class Comparison:
    benchmark: str
    verdict: str  # pass | fail | unknown
    reasons: tuple[str, ...]
    canary_gbps: float | None = None
    control_gbps: float | None = None
    drop_pct: float | None = None
    band_pct: float | None = None
    slow: tuple[str, ...] = field(default_factory=tuple)  # canary groups beyond the limit

    def to_json(self) -> dict[str, object]:
        return {"benchmark": self.benchmark, "verdict": self.verdict,
                "reasons": list(self.reasons), "canary_gbps": self.canary_gbps,
                "control_gbps": self.control_gbps, "drop_pct": self.drop_pct,
                "noise_band_pct": self.band_pct, "slow_canaries": list(self.slow)}


def compare(benchmark: str, canaries: list[GroupRun], controls: list[GroupRun],
            rules: CanaryRules, min_control_groups: int) -> Comparison:
    def unknown(*why: str) -> Comparison:
        return Comparison(benchmark, "unknown", why)

    if not canaries:
        return unknown("no canary group ran this benchmark (a multi-node pair needs at "
                       "least 2 canary nodes)")
    if len(controls) < min_control_groups:
        return unknown(f"{len(controls)} control group(s), at least {min_control_groups} "
                       "needed to tell a regression from an odd node")
    broken = [f"control {g.label}: {(g.errors + g.failed)[0]}" for g in controls
              if g.errors or g.failed or not g.values]
    if broken:
        return unknown(*broken)
    failed = [f"canary {g.label}: {g.failed[0]}" for g in canaries if g.failed]
    if failed:
        return Comparison(benchmark, "fail", tuple(failed))
    lost = [f"canary {g.label}: {g.errors[0] if g.errors else 'no value'}" for g in canaries
            if g.errors or not g.values]
    if lost:
        return unknown(*lost)
    ctl = [_stat(g) for g in controls]
    can = [_stat(g) for g in canaries]
    ref = statistics.median(s.median for s in ctl)
    if ref <= 0:
        return unknown(f"the controls' median busbw is {ref:g} GB/s")
    band = max(rules.noise_floor_pct, 2 * max(s.cv_pct for s in ctl))
    spread = max(abs(s.median - ref) / ref * 100 for s in ctl)
    if spread > band:
        odd = [g.label for g, s in zip(controls, ctl, strict=True)
               if abs(s.median - ref) / ref * 100 > band]
        return Comparison(benchmark, "unknown", (
            f"controls disagree: {', '.join(odd)} {spread:.1f}% off the controls' median "
            f"{ref:.1f} GB/s, beyond the noise band {band:.1f}%: no reference to judge by",),
            control_gbps=round(ref, 2), band_pct=round(band, 2))
    mid = statistics.median(s.median for s in can)
    drop = (ref - mid) / ref * 100
    limit = max(rules.max_drop_pct, band)
    slow = tuple(g.label for g, s in zip(canaries, can, strict=True)
                 if (ref - s.median) / ref * 100 > limit)
    verdict = "fail" if drop > limit or slow else "pass"
    why = (f"canaries {mid:.1f} GB/s vs controls {ref:.1f} GB/s: {-drop:+.1f}% "
           f"(limit -{limit:.1f}%: max drop {rules.max_drop_pct:g}%, noise band {band:.1f}%)")
    extra = (f"slow canary group(s): {', '.join(slow)}",) if slow and drop <= limit else ()
    return Comparison(benchmark, verdict, (why, *extra), round(mid, 2), round(ref, 2),
                      round(drop, 2), round(band, 2), slow)


def _stat(g: GroupRun) -> Stat:
    s = g.stat
    assert s is not None  # groups without values were turned away above
    return s


def overall(comparisons: list[Comparison]) -> str:
    """fail beats unknown beats pass: a canary that failed one benchmark is blocked even when
    another could not be evaluated; nothing unevaluated is ever a pass."""
    verdicts = {c.verdict for c in comparisons}
    if "fail" in verdicts:
        return "fail"
    if "unknown" in verdicts or not comparisons:
        return "unknown"
    return "pass"
