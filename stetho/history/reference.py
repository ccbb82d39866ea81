"""What a drift verdict compares with, and how its warnings read.

- ``reference``: the past runs a metric's current value is judged against: like with like
  (same hour of day for a metric with a daily rhythm, same weekday too for a weekly one, where
  the history holds enough of them), and only with enough of them, over enough days: else the
  reason, with the counts, so the check can say why it is silent.
- ``group``: one warning per cause: every subject of a node whose metric drifted the same way
  in one result, strongest first, instead of a row per GPU or port.
"""

from __future__ import annotations

from collections.abc import Sequence

from stetho.core.record import record
from stetho.facts.kinds import MetricKind
from stetho.history.store import Sample
from stetho.profiles import DriftSpec
from stetho.results import Result

DAY = 86400.0
WEEK = 7 * DAY

#: How many subjects a grouped message names before "and N more" (all are in its evidence).
NAMED = 6


@record
class Reference:
    points: list[Sample]  # oldest first; empty when short
    how: str  # "last 7 days", "same hour ±2 h, last 7 days", ...
    short: str = ""  # why there is no verdict: "3 runs over 1.2 days"

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


def _near(t: float, now: float, period: float, band: float) -> bool:
    d = (t - now) % period
    return min(d, period - d) <= band


def enough(spec: DriftSpec, points: Sequence[Sample], now: float) -> bool:
    return (len(points) >= spec.min_samples and bool(points)
            and now - points[0].time >= spec.min_span_days * DAY)


def counts(points: Sequence[Sample], now: float) -> str:
    if not points:
        return "no runs"
    return f"{len(points)} run{'s' if len(points) != 1 else ''} over " \
           f"{(now - points[0].time) / DAY:.1f} days"


def reference(spec: DriftSpec, kind: MetricKind, past: Sequence[Sample], now: float,
              days: float) -> Reference:
    """The runs to judge against over the last `days`, like with like, or why there are none.

    A metric with a rhythm is never compared with runs at another time of day: a nightly
    history says nothing about an afternoon reading, so that is a skip, not a verdict.
    """
    band = spec.hour_band_h * 3600.0
    window = [p for p in past if p.time >= now - days * DAY]
    if kind.rhythm == "weekly":
        weekly = [p for p in past if p.time >= now - spec.weekly_weeks * WEEK
                  and _near(p.time, now, WEEK, band)]
        if enough(spec, weekly, now):
            return Reference(weekly, f"same weekday and hour ±{spec.hour_band_h:g} h, last "
                                     f"{spec.weekly_weeks:g} weeks")
    if kind.rhythm in ("daily", "weekly"):
        same_hour = [p for p in window if _near(p.time, now, DAY, band)]
        how = f"same hour ±{spec.hour_band_h:g} h, last {days:g} days"
        if enough(spec, same_hour, now):
            return Reference(same_hour, how)
        return Reference([], how, f"{counts(same_hour, now)} at this hour ±"
                                  f"{spec.hour_band_h:g} h ({len(window)} at any hour)")
    how = f"last {days:g} days"
    if enough(spec, window, now):
        return Reference(window, how)
    return Reference([], how, counts(window, now))


def needs(spec: DriftSpec) -> str:
    return (f"needs {spec.min_samples} runs over at least {spec.min_span_days:g} days "
            f"(at the same hour ±{spec.hour_band_h:g} h for metrics with a daily rhythm)")


@record
class Finding:
    """One subject's drift, before grouping."""

    check: str  # drift_shift | drift_trend
    metric: str
    subject: str  # the node's subject (gpu3, mlx5_0:1); "" for node-wide metrics
    label: str  # subject:metric, the ungrouped result's subject
    strength: float  # how far beyond its bound (1.0 = at it): the order within a group
    text: str  # "gpu3 is 39 C vs 31 (z +8.0)"
    value: float
    unit: str
    expected: str
    threshold: str
    remediation: str


def group(node: str, findings: Sequence[Finding]) -> list[Result]:
    """One warning per (check, metric): the subjects strongest first. A single subject keeps
    its own `subject:metric` identity; a group is named by the metric and lists them all in its
    evidence."""
    by_cause: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        by_cause.setdefault((f.check, f.metric), []).append(f)
    out = []
    for (check, metric), items in sorted(by_cause.items()):
        items = sorted(items, key=lambda f: (-f.strength, f.label))
        top = items[0]
        if len(items) == 1:
            subject, message = top.label, f"{metric}: {top.text}"
        else:
            named = "; ".join(f.text for f in items[:NAMED])
            more = f"; and {len(items) - NAMED} more" if len(items) > NAMED else ""
            subject = metric
            message = f"{metric} on {len(items)} subjects, strongest first: {named}{more}"
        out.append(Result(node, check, subject, "warn", message, value=top.value,
                          unit=top.unit, expected=top.expected, threshold=top.threshold,
                          evidence="\n".join(f"{f.label}: {f.text}" for f in items),
                          probe="history", remediation=top.remediation))
    return out


def bearing(results: Sequence[Result], cited: set[tuple[str, str]], hypotheses: bool
            ) -> tuple[list[Result], int]:
    """For a diagnosis report: the results to list, and how many drift warnings were left out.

    A drift warning is listed only where it bears on a hypothesis (the hypothesis cites its
    check and subject); the rest are counted, not shown. With no hypothesis at all every row
    is kept: then they are everything known.
    """
    if not hypotheses:
        return list(results), 0
    shown = [r for r in results if not (r.check.startswith("drift_") and r.status == "warn")
             or (r.check, r.subject) in cited]
    return shown, len(results) - len(shown)
